import argparse
from datetime import timedelta

from django.core.management.base import CommandError
from django.utils import timezone

from agentops.errors import ServiceError
from agentops.forms import ApiKeyCreateForm
from agentops.management.commands._common import ProjectCommand, checked
from agentops.services.api_keys import api_key_create

# A hundred years: longer is no expiry at all, and a day count past the calendar's end
# (year 9999) would be an OverflowError's traceback instead of an answer.
MAX_EXPIRY_DAYS = 36_500


def expiry_days(value: str) -> int:
    """``--expires-in-days``: a whole number of days from 1 (0 used to mean "never")."""
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of days, got {value!r}") from None
    if not 1 <= days <= MAX_EXPIRY_DAYS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_EXPIRY_DAYS} days, got {days}")
    return days


class Command(ProjectCommand):
    help = "Create a project API key. The key is printed alone on the last line (and never again)."

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--scopes", default="ingest,read,execute", help="Comma-separated: ingest,read,execute")
        parser.add_argument("--name", default="cli")
        parser.add_argument(
            "--expires-in-days", type=expiry_days, help=f"Expire the key after this many days (1 to {MAX_EXPIRY_DAYS})"
        )

    def handle_project(self, project, *, path, scopes, name, expires_in_days, **options):
        arguments = checked(
            ApiKeyCreateForm, name=name, scopes=[scope.strip() for scope in scopes.split(",") if scope.strip()]
        )
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        try:
            key, raw_key = api_key_create(
                project=project,
                actor=None,
                name=arguments["name"],
                scopes=arguments["scopes"],
                expires_at=expires_at,
            )
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Created API key {key.prefix}… ({', '.join(key.scopes)}) for {path}")
        self.stdout.write(raw_key)
