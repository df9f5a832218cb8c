from django.core.management.base import BaseCommand

from agentops.management.commands._common import get_project
from agentops.scoping import organization_scope
from runs.services.demo import demo_runs_seed


class Command(BaseCommand):
    help = "Add sample runs to a project that has none: seed_demo_runs <org_slug>/<project_slug>."

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="org_slug/project_slug")

    def handle(self, *args, path, **options):
        project = get_project(path)
        with organization_scope(project.organization):
            created = demo_runs_seed(project=project)
        self.stdout.write(f"Added {created} sample run(s) to {path}" if created else f"{path} already has runs")
