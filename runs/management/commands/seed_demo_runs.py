from agentops.management.commands._common import ProjectCommand
from runs.services.demo import DEMO_SESSION_MESSAGES, demo_agent_seed, demo_runs_seed, demo_session_seed


class Command(ProjectCommand):
    help = "Add sample runs and an offline demo agent to a project: seed_demo_runs <org_slug>/<project_slug>."

    def handle_project(self, project, *, path, **options):
        created = demo_runs_seed(project=project)
        agents = demo_agent_seed(project=project)
        sessions = demo_session_seed(project=project)
        if not options["verbosity"]:
            return  # -v 0 (serve --demo): its own lines say what the demo holds
        self.stdout.write(f"Added {created} sample run(s) to {path}" if created else f"{path} already has runs")
        if agents:
            self.stdout.write(f"Added an offline demo agent to {path}, with one executed run")
        if sessions:
            self.stdout.write(f"Added a demo session with {len(DEMO_SESSION_MESSAGES)} turns to {path}")
