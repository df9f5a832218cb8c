"""Helpers shared by the operator commands."""

from django import forms
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_slug

from agentops.models import Organization, Project
from agentops.scoping import organization_scope


def checked(form_class: type[forms.Form], **arguments) -> dict:
    """``arguments`` cleaned by the form the page uses for the same thing, so a command
    refuses what the page refuses (too long, a NUL character, not an email address) in
    one line, instead of a database error's traceback or a half-made row."""
    form = form_class(data=arguments)
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        raise CommandError(f"{field.replace('_', ' ')}: {' '.join(errors)}")
    return form.cleaned_data


def _is_slug(value: str) -> bool:
    try:
        validate_slug(value)
    except ValidationError:
        return False
    return True


def split_project_path(value: str) -> tuple[str, str]:
    org_slug, sep, project_slug = value.partition("/")
    if not sep or not org_slug or not project_slug:
        raise CommandError(f"expected <org_slug>/<project_slug>, got {value!r}")
    return org_slug, project_slug


def get_organization(slug: str) -> Organization:
    # What is not a slug names nothing (and a NUL character cannot even be sent to PostgreSQL).
    organization = Organization.objects.filter(slug=slug).first() if _is_slug(slug) else None
    if organization is None:
        raise CommandError(f"no organization with the slug {slug!r}")
    return organization


def get_project(path: str) -> Project:
    org_slug, project_slug = split_project_path(path)
    organization = get_organization(org_slug)
    with organization_scope(organization):
        project = Project.objects.filter(slug=project_slug).first() if _is_slug(project_slug) else None
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
