"""Write the ledger's SQLite schema script again: `python -m gateway.ledger.write_schema`.

Run it after adding a migration (tests/ledger/test_ledger_template.py fails until then):
it migrates a scratch ledger and dumps what SQLite recorded (gateway/ledger/template.py).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from gateway.ledger.engine import head_revision, migrate
from gateway.ledger.template import SCHEMA, dump_schema


async def migrated_schema() -> str:
    """Run the migrations into a scratch ledger and dump its schema script."""
    head = head_revision()
    with tempfile.TemporaryDirectory(prefix="farebox-schema-") as folder:
        path = Path(folder) / "ledger.db"
        await migrate(f"sqlite+aiosqlite:///{path}", revision=head)  # named: not the script
        return dump_schema(path, head)


if __name__ == "__main__":
    SCHEMA.write_text(asyncio.run(migrated_schema()), encoding="utf-8")
    print(f"wrote {SCHEMA}", file=sys.stderr)
