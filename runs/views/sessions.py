"""Sessions: the conversations of the project, and the runs of one in order."""

from __future__ import annotations

from decimal import Decimal

from django.http import Http404
from django.utils import timezone

from agentops.pages import Need, ProjectPage
from runs import selectors
from runs.forms import RANGES, DashboardRangeForm
from runs.views import display
from runs.views.keyset import after, decode, encode

PAGE_SIZE = 50
SESSION_RUN_LIMIT = 200
PREVIEW = 600

READ = Need("work:read", "see this project's sessions")


class SessionsPage(ProjectPage):
    """Sessions with their run counts and totals, most recently active first."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug):
        preset = request.GET.get("range", "")
        started_after = timezone.now() - RANGES[preset] if preset in RANGES else None
        sessions = selectors.session_list(project=self.project, started_after=started_after).order_by(
            "-last_started_at", "-session_id"
        )
        cursor = request.GET.get("cursor", "")
        if cursor:
            text, _, session_id = cursor.rpartition("~")
            try:
                sessions = sessions.filter(
                    after("last_started_at", True, decode("last_started_at", text), session_id, tie="session_id")
                )
            except ValueError:
                pass
        rows = list(sessions[: PAGE_SIZE + 1])
        next_cursor = None
        if len(rows) > PAGE_SIZE:
            rows = rows[:PAGE_SIZE]
            next_cursor = f"{encode(rows[-1]['last_started_at'])}~{rows[-1]['session_id']}"
        return self.render_page(
            "runs/sessions.html",
            {
                "sessions": rows,
                "next_cursor": next_cursor,
                "is_first_page": not cursor,
                "range": preset if preset in RANGES else "",
                "range_choices": [("", "Any time"), *DashboardRangeForm.range_choices[:-1]],
            },
        )


def _preview(value) -> str:
    if value is None:
        return ""
    return display.truncate_text(display.preview_text(value).strip(), PREVIEW)[0]


class SessionDetailPage(ProjectPage):
    """The runs of one conversation in order: what each was asked and answered."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, session_id):
        runs = list(selectors.session_runs(project=self.project, session_id=session_id)[: SESSION_RUN_LIMIT + 1])
        if not runs:
            raise Http404("session not found")
        more = len(runs) > SESSION_RUN_LIMIT
        runs = runs[:SESSION_RUN_LIMIT]
        turns = [{"run": run, "input": _preview(run.input), "output": _preview(run.output)} for run in runs]
        totals = {
            "runs": len(runs),
            "input_tokens": sum(run.input_tokens for run in runs),
            "output_tokens": sum(run.output_tokens for run in runs),
            "cost": sum((run.total_cost for run in runs), Decimal(0)),
            "unpriced": sum(run.unpriced_step_count for run in runs),
            "failed": sum(1 for run in runs if run.status == "failed"),
        }
        started = [run.started_at for run in runs if run.started_at]
        ended = [run.ended_at for run in runs if run.ended_at]
        span_ms = (max(ended) - min(started)).total_seconds() * 1000 if started and ended else None
        return self.render_page(
            "runs/session_detail.html",
            {"session_id": session_id, "turns": turns, "more": more, "totals": totals, "span_ms": span_ms},
        )
