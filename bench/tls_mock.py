"""perf-floor's instant mock upstream behind TLS, with a CA of its own.

Run: `python bench/tls_mock.py --port P --ca-out FILE [--floor DIR] [--tokens N]`.

Serves `mock_upstream.py`'s protocol (same replies, same cost) through the loop's TLS, with
a certificate for 127.0.0.1 and localhost signed by a CA made at start-up
(tests/upstream/tls_upstream.py). The CA's PEM is written to `--ca-out` once the port
listens: a client trusts it with `SSL_CERT_FILE=FILE`, and the file's appearance says the
mock is ready.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca-out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    sys.path[:0] = [str(args.floor), str(ROOT)]
    import mock_upstream
    import uvloop

    from tests.upstream.tls_upstream import Authority

    mock_upstream.ARGS = argparse.Namespace(
        host="127.0.0.1", port=args.port, tokens=args.tokens, delay_ms=0.0, model_id="mock-model"
    )
    certs = Path(tempfile.mkdtemp(prefix="tls-mock-"))
    authority = Authority(certs)
    tls = authority.server_context(["127.0.0.1", "localhost"])

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            mock_upstream.Conn, "127.0.0.1", args.port, backlog=1024, ssl=tls
        )
        partial = args.ca_out.with_suffix(".partial")
        shutil.copy(authority.pem, partial)
        partial.replace(args.ca_out)
        async with server:
            await server.serve_forever()

    try:
        uvloop.run(serve())
    except KeyboardInterrupt:
        pass
    finally:
        shutil.rmtree(certs, ignore_errors=True)


if __name__ == "__main__":
    main()
