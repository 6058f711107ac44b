"""Who may call what: the admin key, virtual keys and the open mode (see docs/security.md)."""
