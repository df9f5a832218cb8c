from django.core.management.base import BaseCommand

from agentops.management.commands._common import get_project
from agentops.scoping import organization_scope
from runs.services.demo import DEMO_SESSION_MESSAGES, demo_agent_seed, demo_runs_seed, demo_session_seed


class Command(BaseCommand):
    help = "Add sample runs and an offline demo agent to a project: seed_demo_runs <org_slug>/<project_slug>."

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="org_slug/project_slug")

    def handle(self, *args, path, **options):
        project = get_project(path)
        with organization_scope(project.organization):
            created = demo_runs_seed(project=project)
            agents = demo_agent_seed(project=project)
            sessions = demo_session_seed(project=project)
        self.stdout.write(f"Added {created} sample run(s) to {path}" if created else f"{path} already has runs")
        if agents:
            self.stdout.write(f"Added an offline demo agent to {path}, with one executed run")
        if sessions:
            self.stdout.write(f"Added a demo session with {len(DEMO_SESSION_MESSAGES)} turns to {path}")
