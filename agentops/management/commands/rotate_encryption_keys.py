from django.core.management.base import BaseCommand

from agentops.services.secrets import rotate_encryption


class Command(BaseCommand):
    help = "Re-encrypt every stored secret with the first key of ENCRYPTION_KEYS."

    def handle(self, *args, **options):
        count = rotate_encryption()
        self.stdout.write(f"Re-encrypted {count} secret(s) with the newest key; older keys may now be removed.")
