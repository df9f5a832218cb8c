"""The analyst's parts of the pages (docs/mcp.md#the-analyst): the "Ask about this run" panel
of a run page and the insights panel of a dataset's leaderboard, each loaded by htmx from
the page it sits on (the runs and evals apps import nothing of this one), and the action
that opens a chat with the analyst, a session on the sessions' chat page. Viewers read the
answers; members ask. An answer still being written streams in from its run's event
stream (``data-event-stream``, agentops/static/agentops/app.js); once it ends the panel
is fetched again with the answer in full, its step citations linked."""

from __future__ import annotations

from django.shortcuts import redirect, render
from django.urls import path, reverse

from agentops.errors import InvalidRequest
from agentops.pages import Need, ProjectPage
from assistant.analyst import asking
from assistant.analyst.offline import OFFLINE_ANALYST_MODEL
from assistant.models import AnalystQuestion
from evals import selectors as evals_selectors
from runs import selectors as runs_selectors
from runs.models import Run, ToolCall


def answer_parts(question: AnalystQuestion, subject_run: Run | None) -> list[tuple[str, object]]:
    """The answer's text in pieces: ("text", str), and ("step", Step) for each citation of a
    step of ``subject_run`` (a citation of anything else stays text)."""
    text = question.answer_run.output if isinstance(question.answer_run.output, str) else ""
    steps = asking.cited_steps(text, subject_run) if subject_run is not None else {}
    parts, position = [], 0
    for match in asking.CITATION.finditer(text):
        step = steps.get(int(match.group(1)))
        if step is None:
            continue
        parts.append(("text", text[position : match.start()]))
        parts.append(("step", step))
        position = match.end()
    parts.append(("text", text[position:]))
    return [(kind, value) for kind, value in parts if value != ""]


class AnalystPanel(ProjectPage):
    def events_url(self, run: Run) -> str:
        return f"/api/v1/projects/{self.organization.slug}/{self.project.slug}/runs/{run.pk}/events/"

    def answer(self, question: AnalystQuestion, subject_run: Run | None) -> dict:
        run = question.answer_run
        ended = run.status in Run.ENDED
        parts = answer_parts(question, subject_run) if ended else []
        return {
            "question": question,
            "run": run,
            "ended": ended,
            "offline": (run.execution or {}).get("spec", {}).get("model") == OFFLINE_ANALYST_MODEL,
            "parts": parts,
            "cited": list({value.pk: value for kind, value in parts if kind == "step"}.values()),
            "events_url": self.events_url(run),
            "tool_calls": [
                f"{call.tool_name}({', '.join(f'{k}={v}' for k, v in sorted((call.arguments or {}).items()))})"
                for call in ToolCall.objects.filter(run=run).order_by("started_at", "id")
            ]
            if run.status in Run.ENDED
            else [],
        }


class RunAskPanel(AnalystPanel):
    """GET: the questions asked about a run and their answers; POST: ask one."""

    permissions = {"GET": Need("work:read", "see this run"), "POST": Need("work:write", "ask the analyst")}

    def panel(self, run: Run, *, error: str = "", question: str = "", status: int = 200):
        context = {
            **self.page_context(),
            "run": run,
            "answers": [self.answer(asked, run) for asked in asking.run_questions(run=run)],
            "panel_url": reverse("assistant:run-ask", args=[self.organization.slug, self.project.slug, run.pk]),
            "run_url": reverse("runs:detail", args=[self.organization.slug, self.project.slug, run.pk]),
            "target": f"run-analyst-{run.pk}",
            "error": error,
            "draft": question,
            "max_chars": asking.MAX_QUESTION_CHARS,
        }
        return render(self.request, "assistant/_run_ask.html", context, status=status)

    def get(self, request, org_slug, project_slug, run_id):
        return self.panel(runs_selectors.run_detail(project=self.project, run_id=run_id))

    def post(self, request, org_slug, project_slug, run_id):
        run = runs_selectors.run_detail(project=self.project, run_id=run_id)
        question = request.POST.get("question", "")
        try:
            asking.ask_about_run(access=self.access, run=run, question=question)
        except InvalidRequest as refused:
            if request.htmx:
                return self.panel(run, error=refused.message, question=question[:10_000], status=400)
            raise
        if request.htmx:
            return self.panel(run)
        return redirect(f"{reverse('runs:detail', args=[org_slug, project_slug, run.pk])}#run-analyst-{run.pk}")


class LeaderboardInsightsPanel(AnalystPanel):
    """GET: a dataset's latest leaderboard insights; POST: ask for new ones."""

    permissions = {"GET": Need("work:read", "see this leaderboard"), "POST": Need("work:write", "ask the analyst")}

    def panel(self, dataset, status: int = 200):
        latest = asking.latest_insights(dataset=dataset)
        context = {
            **self.page_context(),
            "dataset": dataset,
            "insight": self.answer(latest, None) if latest else None,
            "target": f"leaderboard-insights-{dataset.pk}",
            "panel_url": reverse(
                "assistant:leaderboard-insights", args=[self.organization.slug, self.project.slug, dataset.pk]
            ),
        }
        return render(self.request, "assistant/_leaderboard_insights.html", context, status=status)

    def get(self, request, org_slug, project_slug, dataset_id):
        return self.panel(evals_selectors.dataset_detail(project=self.project, dataset_id=dataset_id))

    def post(self, request, org_slug, project_slug, dataset_id):
        dataset = evals_selectors.dataset_detail(project=self.project, dataset_id=dataset_id)
        asking.refresh_insights(access=self.access, dataset=dataset)
        if request.htmx:
            return self.panel(dataset)
        return redirect(f"{reverse('evals:leaderboard', args=[org_slug, project_slug, dataset.pk])}#insights")


class AnalystChatAction(ProjectPage):
    """POST: open a chat session with the project's analyst, shown on the sessions' chat page."""

    permissions = {"POST": Need("work:write", "chat with the analyst")}

    def post(self, request, org_slug, project_slug):
        session = asking.start_chat(access=self.access)
        return redirect(reverse("runs:chat_session", args=[org_slug, project_slug, session.pk]))


urlpatterns = [
    path("chat/", AnalystChatAction.as_view(), name="analyst-chat"),
    path("runs/<int:run_id>/ask/", RunAskPanel.as_view(), name="run-ask"),
    path("datasets/<int:dataset_id>/insights/", LeaderboardInsightsPanel.as_view(), name="leaderboard-insights"),
]
