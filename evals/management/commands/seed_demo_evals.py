from django.core.management.base import BaseCommand

from agentops.management.commands._common import get_project
from agentops.scoping import organization_scope
from evals.services.demo import demo_evals_seed


class Command(BaseCommand):
    help = (
        "Add a demo dataset, evaluators and two experiments of the offline demo agent to a project "
        "(after seed_demo_runs): seed_demo_evals <org_slug>/<project_slug>."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="org_slug/project_slug")

    def handle(self, *args, path, **options):
        project = get_project(path)
        with organization_scope(project.organization):
            experiments = demo_evals_seed(project=project)
        if experiments:
            self.stdout.write(f"Added a demo dataset, evaluators and {experiments} experiments to {path}")
        else:
            self.stdout.write(f"{path} already has the demo dataset (or no demo agent)")
