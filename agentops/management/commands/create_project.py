from django.core.management.base import BaseCommand, CommandError

from agentops.errors import ServiceError
from agentops.forms import ProjectCreateForm
from agentops.management.commands._common import checked, get_organization, split_project_path
from agentops.scoping import organization_scope
from agentops.services.organizations import project_create


class Command(BaseCommand):
    help = "Create a project: create_project <org_slug>/<project_slug> [--name NAME]."

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="org_slug/project_slug")
        parser.add_argument("--name", help="Display name (default: from the slug)")

    def handle(self, *args, path, name, **options):
        org_slug, project_slug = split_project_path(path)
        arguments = checked(ProjectCreateForm, name=name or project_slug.replace("-", " ").title())
        organization = get_organization(org_slug)
        with organization_scope(organization):
            try:
                project = project_create(
                    organization=organization,
                    actor=None,
                    name=arguments["name"],
                    slug=project_slug,
                )
            except ServiceError as exc:
                raise CommandError(exc.message) from None
        self.stdout.write(f"Created project {organization.slug}/{project.slug}")
