"""Virtual keys: their records, secrets, store and in-process cache (see docs/security.md)."""
