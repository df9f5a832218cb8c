"""The analyst in the demo: a question about the demo's failed run and the insights of the
demo dataset's leaderboard, asked for the organization's owner and answered here (on
the offline analyst, or Mistral when a key is set), so a new user finds answers on the
run page and the leaderboard, and asks more."""

from __future__ import annotations

from agentops.access import Access
from agentops.models import Membership
from assistant.analyst.asking import ask_about_run, refresh_insights
from assistant.models import AnalystQuestion
from evals.models import Dataset
from runs.execution import run_execute
from runs.models import Run

DEMO_QUESTION = "Why did this run fail, and which step should I look at first?"


def demo_analyst_seed(*, project) -> int:
    """Ask the demo questions unless the project has analyst questions; how many were asked."""
    owner = Membership.objects.filter(role="owner").select_related("user").order_by("id").first()
    if owner is None or AnalystQuestion.objects.filter(project=project).exists():
        return 0
    access = Access(organization=project.organization, membership=owner, project=project)
    asked = []
    failed = Run.objects.filter(project=project, status=Run.Status.FAILED, executed=False).order_by("id").first()
    if failed is not None:
        asked.append(ask_about_run(access=access, run=failed, question=DEMO_QUESTION))
    dataset = Dataset.objects.filter(project=project).order_by("id").first()
    if dataset is not None:
        asked.append(refresh_insights(access=access, dataset=dataset))
    for question in asked:
        # Executed here rather than on a worker: the demo is seeded before the workers start.
        run_execute(run_id=question.answer_run_id)
    return len(asked)
