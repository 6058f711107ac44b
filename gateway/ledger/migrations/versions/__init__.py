"""Ledger migration scripts; a package only so that setuptools ships them."""
