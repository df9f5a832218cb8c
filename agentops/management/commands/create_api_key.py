from datetime import timedelta

from django.core.management.base import CommandError
from django.utils import timezone

from agentops.errors import ServiceError
from agentops.management.commands._common import ProjectCommand
from agentops.services.api_keys import api_key_create


class Command(ProjectCommand):
    help = "Create a project API key. The key is printed alone on the last line (and never again)."

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--scopes", default="ingest,read,execute", help="Comma-separated: ingest,read,execute")
        parser.add_argument("--name", default="cli")
        parser.add_argument("--expires-in-days", type=int, help="Expire the key after this many days")

    def handle_project(self, project, *, path, scopes, name, expires_in_days, **options):
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        try:
            key, raw_key = api_key_create(
                project=project,
                actor=None,
                name=name,
                scopes=[scope.strip() for scope in scopes.split(",") if scope.strip()],
                expires_at=expires_at,
            )
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Created API key {key.prefix}… ({', '.join(key.scopes)}) for {path}")
        self.stdout.write(raw_key)
