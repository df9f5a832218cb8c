from agentops.management.commands._common import ProjectCommand
from jobs.demo import demo_jobs_seed


class Command(ProjectCommand):
    help = "Add a local compute backend and a small demo job to a project: seed_demo_jobs <org_slug>/<project_slug>."

    def handle_project(self, project, *, path, **options):
        seeded = demo_jobs_seed(project=project)
        if not options["verbosity"]:
            return
        if seeded:
            self.stdout.write(f"Added a local compute backend and a demo job to {path}")
        else:
            self.stdout.write(f"{path} already has the demo backend (or the local backend is turned off)")
