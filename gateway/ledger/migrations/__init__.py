"""Alembic migrations of the ledger tables, shipped in the package (see `ledger.engine.migrate`)."""
