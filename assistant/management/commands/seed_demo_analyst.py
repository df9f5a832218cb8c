from django.core.management.base import BaseCommand

from agentops.management.commands._common import get_project
from agentops.scoping import organization_scope
from assistant.analyst.demo import demo_analyst_seed


class Command(BaseCommand):
    help = (
        "Ask the analyst about the demo's failed run and for the demo leaderboard's insights "
        "(after seed_demo_runs and seed_demo_evals): seed_demo_analyst <org_slug>/<project_slug>."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="org_slug/project_slug")

    def handle(self, *args, path, **options):
        project = get_project(path)
        with organization_scope(project.organization):
            asked = demo_analyst_seed(project=project)
        if not options["verbosity"]:
            return
        if asked:
            self.stdout.write(f"Asked the analyst {asked} demo question(s) in {path}")
        else:
            self.stdout.write(f"{path} already has analyst answers (or nobody to ask for)")
