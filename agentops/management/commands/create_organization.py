from django import forms
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agentops.errors import ServiceError
from agentops.forms import OrganizationCreateForm
from agentops.management.commands._common import checked
from agentops.services.organizations import organization_create
from agentops.services.users import user_get_or_create_verified


class OrganizationCommandForm(OrganizationCreateForm):
    """The page's form and the owner's address; the slug argument is left to the service,
    which makes a slug of it as it does of a name."""

    owner = forms.EmailField()


class Command(BaseCommand):
    help = "Create an organization owned by --owner (created with a one-time password if new)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--owner", required=True, help="Owner's email address")
        parser.add_argument("--name", help="Display name (default: from the slug)")

    def handle(self, *args, slug, owner, name, **options):
        arguments = checked(OrganizationCommandForm, name=name or slug.replace("-", " ").title(), owner=owner)
        try:
            # One transaction: a refused organization (its slug taken) leaves no new user
            # behind whose one-time password was never shown.
            with transaction.atomic():
                user, password = user_get_or_create_verified(email=arguments["owner"])
                organization = organization_create(name=arguments["name"], slug=slug, owner=user)
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Created organization {organization.slug} owned by {user.email}")
        if password:
            self.stdout.write(f"New user {user.email}; one-time password (change it after logging in): {password}")
