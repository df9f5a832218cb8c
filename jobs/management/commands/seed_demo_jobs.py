from django.core.management.base import BaseCommand

from agentops.management.commands._common import get_project
from agentops.scoping import organization_scope
from jobs.demo import demo_jobs_seed


class Command(BaseCommand):
    help = "Add a local compute backend and a small demo job to a project: seed_demo_jobs <org_slug>/<project_slug>."

    def add_arguments(self, parser):
        parser.add_argument("path", metavar="org_slug/project_slug")

    def handle(self, *args, path, **options):
        project = get_project(path)
        with organization_scope(project.organization):
            jobs = demo_jobs_seed(project=project)
        if jobs:
            self.stdout.write(f"Added a local compute backend and a demo job to {path}")
        else:
            self.stdout.write(f"{path} already has the demo backend (or the local backend is turned off)")
