"""Key rotation: re-encrypt every stored ciphertext with the newest key of
``ENCRYPTION_KEYS``, so older keys can be removed.

It walks the one registry of encrypted columns (``crypto.encrypted_fields()``), across
every organization. Each row is re-encrypted in its own transaction, locked, so a secret
saved meanwhile is never overwritten with an older value and an interruption leaves every
row readable with the keys listed. A ciphertext the newest key already decrypts is left
as is: running it again changes nothing. A ciphertext no listed key decrypts is reported,
not raised, so the others are still rotated; the command then fails, and the old key must
stay until it is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from agentops import crypto


@dataclass
class TableRotation:
    """What rotation did to one table."""

    table: str
    rotated: int = 0
    current: int = 0
    unreadable: list = field(default_factory=list)  # primary keys


def encryption_rotate() -> list[TableRotation]:
    """Re-encrypt every ciphertext of every registered column with the newest key."""
    report = []
    for model, names in crypto.encrypted_fields():
        # The base manager: rotation crosses organizations on purpose (TenantModel's
        # base manager is its unscoped one).
        manager = model._base_manager
        outcome = TableRotation(table=model._meta.db_table)
        for pk in manager.order_by("pk").values_list("pk", flat=True):
            with transaction.atomic():
                row = manager.select_for_update().filter(pk=pk).values(*names).first()
                if row is None:
                    continue  # Deleted meanwhile.
                changes = {}
                try:
                    for name, ciphertext in row.items():
                        if ciphertext and not crypto.is_current(ciphertext):
                            changes[name] = crypto.rotate(ciphertext)
                except crypto.DecryptionError:
                    outcome.unreadable.append(pk)
                    continue
                if changes:
                    manager.filter(pk=pk).update(**changes)
                    outcome.rotated += 1
                elif any(row.values()):
                    outcome.current += 1
        report.append(outcome)
    return report
