"""The cost of patching a small request's bytes for its upstream call (`_build_call`).

Run: `python bench/pipeline_patch.py [--src CHECKOUT] [-n 20000] [--callgrind]`.

Patches the load generator's request body (rendered by `json.dumps`, `", "` and `": "`)
and the same body rendered compact by orjson with the route's edit (the alias renamed),
through `compact_patch.patch_rendered` falling back to `rawjson.patch_object`, as
`gateway/pipeline/chat.py` `_build_call` does. Prints µs per patch (best of `--rounds`).
`--callgrind` runs this script under valgrind twice, with no patch and with `-n`, and
prints the instructions per patch (the difference over `-n`): steady on a shared box.
`--src` imports the gateway from another checkout (an A/B of two trees).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]

BODY: dict[str, Any] = {
    "model": "bench-gpt",
    "messages": [{"role": "user", "content": "Say hello (request 17)."}],
    "max_tokens": 16,
    "stream": True,
}
EDIT = {"model": "mock-model"}


def _bodies() -> dict[str, bytes]:
    import orjson

    return {"spaced": json.dumps(BODY).encode(), "compact": orjson.dumps(BODY)}


def _patcher() -> Any:
    import orjson

    from gateway.compact_patch import patch_rendered
    from gateway.rawjson import patch_object

    def patch(raw: bytes, parsed: dict[str, Any]) -> bytes:
        fast = patch_rendered(raw, parsed, EDIT, set())
        return fast or patch_object(raw, EDIT, set(), trusted=True)

    assert orjson  # imported before any count
    return patch


def _run(kind: str, n: int) -> None:
    import orjson

    patch = _patcher()
    raw = _bodies()[kind]
    parsed = orjson.loads(raw)
    for _ in range(n):
        patch(raw, parsed)


def _instructions(args: argparse.Namespace, kind: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as out:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg"]
        cmd += [sys.executable, __file__, "--inner", kind, "-n", str(n)]
        if args.src:
            cmd += ["--src", args.src]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        text = (Path(out) / "cg").read_text()
    found = re.search(r"^summary: (\d+)", text, re.MULTILINE)
    assert found is not None
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.src:
        use_checkout(args.src)
    if args.inner:
        _run(args.inner, args.n)
        return
    result: dict[str, Any] = {"src": args.src or str(Path(__file__).resolve().parents[1])}
    for kind in ("spaced", "compact"):
        if args.callgrind:
            base, run = _instructions(args, kind, 0), _instructions(args, kind, args.n)
            result[f"{kind}_instructions"] = round((run - base) / args.n)
            continue
        import orjson

        patch = _patcher()
        raw = _bodies()[kind]
        parsed = orjson.loads(raw)
        once = functools.partial(patch, raw, parsed)
        best = min(timeit.repeat(once, number=args.n, repeat=args.rounds))
        result[f"{kind}_us"] = round(best / args.n * 1e6, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
