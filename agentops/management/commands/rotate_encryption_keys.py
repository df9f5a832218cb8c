from django.core.management.base import BaseCommand, CommandError

from agentops.services.key_rotation import encryption_rotate


class Command(BaseCommand):
    help = "Re-encrypt every stored secret (every encrypted column) with the first key of ENCRYPTION_KEYS."

    def handle(self, *args, **options):
        report = encryption_rotate()
        for table in report:
            line = f"{table.table}: {table.rotated} re-encrypted, {table.current} already on the newest key"
            if table.unreadable:
                line += f", {len(table.unreadable)} unreadable (ids {', '.join(map(str, table.unreadable))})"
            self.stdout.write(line)
        rotated = sum(table.rotated for table in report)
        if any(table.unreadable for table in report):
            raise CommandError(
                "some secrets could not be decrypted with any key of ENCRYPTION_KEYS (listed above): "
                "keep every old key until they are replaced or deleted"
            )
        self.stdout.write(f"Re-encrypted {rotated} secret(s) with the newest key; older keys may now be removed.")
