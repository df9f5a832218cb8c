from agentops.management.commands._common import ProjectCommand
from evals.services.demo import demo_evals_seed


class Command(ProjectCommand):
    help = (
        "Add a demo dataset, evaluators and two experiments of the offline demo agent to a project "
        "(after seed_demo_runs): seed_demo_evals <org_slug>/<project_slug>."
    )

    def handle_project(self, project, *, path, **options):
        experiments = demo_evals_seed(project=project)
        if not options["verbosity"]:
            return
        if experiments:
            self.stdout.write(f"Added a demo dataset, evaluators and {experiments} experiments to {path}")
        else:
            self.stdout.write(f"{path} already has the demo dataset (or no demo agent)")
