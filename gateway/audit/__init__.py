"""The audit log: who changed what, when, and whether it was accepted (docs/security.md)."""

from __future__ import annotations

from gateway.audit.log import AUDIT, AuditEntry, AuditLog, Outcome, insert_entry

__all__ = ["AUDIT", "AuditEntry", "AuditLog", "Outcome", "insert_entry"]
