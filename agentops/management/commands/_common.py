"""Helpers shared by the operator commands."""

from django.core.management.base import BaseCommand, CommandError

from agentops.models import Organization, Project
from agentops.scoping import organization_scope


def split_project_path(value: str) -> tuple[str, str]:
    org_slug, sep, project_slug = value.partition("/")
    if not sep or not org_slug or not project_slug:
        raise CommandError(f"expected <org_slug>/<project_slug>, got {value!r}")
    return org_slug, project_slug


def get_organization(slug: str) -> Organization:
    organization = Organization.objects.filter(slug=slug).first()
    if organization is None:
        raise CommandError(f"no organization with the slug {slug!r}")
    return organization


def get_project(path: str) -> Project:
    org_slug, project_slug = split_project_path(path)
    organization = get_organization(org_slug)
    with organization_scope(organization):
        project = Project.objects.filter(slug=project_slug).first()
    if project is None:
        raise CommandError(f"no project {project_slug!r} in organization {org_slug!r}")
    return project


class ProjectCommand(BaseCommand):
    """A command that acts on one project, named ``<org_slug>/<project_slug>``:
    ``handle_project`` runs in the project's organization scope."""

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="org_slug/project_slug")

    def handle(self, *args, path, **options):
        project = get_project(path)
        with organization_scope(project.organization):
            self.handle_project(project, path=path, **options)

    def handle_project(self, project: Project, *, path: str, **options) -> None:
        raise NotImplementedError
