from django.core.management.base import BaseCommand, CommandError

from agentops.errors import ServiceError
from agentops.services.organizations import organization_create
from agentops.services.users import user_get_or_create_verified


class Command(BaseCommand):
    help = "Create an organization owned by --owner (created with a one-time password if new)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--owner", required=True, help="Owner's email address")
        parser.add_argument("--name", help="Display name (default: from the slug)")

    def handle(self, *args, slug, owner, name, **options):
        user, password = user_get_or_create_verified(email=owner)
        try:
            organization = organization_create(name=name or slug.replace("-", " ").title(), slug=slug, owner=user)
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Created organization {organization.slug} owned by {user.email}")
        if password:
            self.stdout.write(f"New user {user.email}; one-time password (change it after logging in): {password}")
