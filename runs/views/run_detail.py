"""One run: its header, the agents around it, and four tabs (the step tree beside a
waterfall with a step panel, the transcript as a chat, the tool calls, the memory and
how it changed), plus the fragments those load on demand and on live updates.

Every tab costs a fixed number of queries whatever the run's size (one for the steps,
one for the messages, ...), and payloads are drawn only up to a budget
(``display.PREVIEW_CHARS``); "Show all" loads one value in full.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone

from agentops import live
from agentops.pages import Need, ProjectPage
from billing.carbon import run_footprint
from runs import selectors
from runs.models import Approval, Run, Step
from runs.views import display, run_tabs
from runs.views.replays import replay_context
from runs.views.run_tabs import STEP_PAYLOADS, chat, memory_entries, run_family, trace_rows

TABS = {"trace": "Trace", "transcript": "Transcript", "tools": "Tool calls", "memory": "Memory"}
DEFAULT_TAB = "trace"
# Step columns the tree and the waterfall draw; payloads load with the step panel.
TREE_FIELDS = (
    "id",
    "run_id",
    "span_id",
    "parent_span_id",
    "kind",
    "name",
    "started_at",
    "ended_at",
    "duration_ms",
    "status",
    "model",
    "input_tokens",
    "output_tokens",
    "cost",
    "unpriced",
)

READ = Need("work:read", "see this project's runs")


class RunPageMixin:
    """Shared by the run's page and fragments: the run, looked up in the URL's project
    (another project's run is a 404), and what the header shows."""

    def get_run(self, run_id: int) -> Run:
        return selectors.run_detail(project=self.project, run_id=run_id)

    def urls(self, run: Run) -> dict[str, str]:
        kwargs = {"org_slug": self.organization.slug, "project_slug": self.project.slug, "run_id": run.pk}
        detail = reverse("runs:detail", kwargs=kwargs)
        return {
            "detail": detail,
            # Step and value URLs are built by appending ids, not by reversing 500 times.
            "steps": f"{detail}steps/",
            "values": f"{detail}values/",
            "run_input": f"{detail}values/run/{run.pk}/input/",
            "run_output": f"{detail}values/run/{run.pk}/output/",
        }

    def header_context(self, run: Run, now: datetime) -> dict[str, Any]:
        # While a run goes on, its latency only covers the steps seen so far: show the time since it started.
        elapsed_ms = None
        if run.started_at and not run.ended:
            elapsed_ms = max((now - run.started_at).total_seconds() * 1000, 0)
        parent = None
        if run.parent_run_id:
            parent = selectors.run_list(project=self.project).filter(pk=run.parent_run_id).first()
        return {
            "run": run,
            "elapsed_ms": elapsed_ms,
            "parent": parent,
            "urls": self.urls(run),
            "approvals": run_approvals(run),
            "footprint": run_footprint(run.pk),
        }

    def tab_context(self, run: Run, tab: str, now: datetime) -> dict[str, Any]:
        if tab == "trace":
            limit = run_tabs.STEP_LIMIT
            steps = list(selectors.step_list(run=run).only(*TREE_FIELDS)[:limit])
            rows, axis = trace_rows(run=run, steps=steps, now=now)
            return {"rows": rows, "axis": axis, "limit": limit if len(steps) == limit else None}
        if tab == "transcript":
            messages = chat(run=run)
            return {
                "chat": messages,
                "limit": run_tabs.MESSAGE_LIMIT if len(messages) == run_tabs.MESSAGE_LIMIT else None,
            }
        if tab == "tools":
            limit = run_tabs.TOOL_CALL_LIMIT
            calls = list(selectors.tool_call_list(run=run).defer(*STEP_PAYLOADS)[:limit])
            return {"tool_calls": calls, "limit": limit if len(calls) == limit else None}
        entries, total = memory_entries(run=run)
        return {"memory": entries, "memory_total": total}


def run_approvals(run: Run) -> list[Approval]:
    """The run's approvals for its header (one query; only runs the platform executed have
    any), each with ``arguments_text``: its arguments as indented JSON, to edit."""
    if not run.executed:
        return []
    approvals = list(Approval.objects.filter(run=run).select_related("decided_by"))
    for approval in approvals:
        approval.arguments_text = json.dumps(approval.arguments, indent=2, ensure_ascii=False)
    return approvals


def tabs(run: Run) -> list[tuple[str, str, int]]:
    """(key, label, how many rows) of each tab."""
    counts = {
        "trace": run.step_count,
        "transcript": selectors.message_list(run=run).count(),
        "tools": selectors.tool_call_list(run=run).count(),
        "memory": selectors.memory_list(run=run).count(),
    }
    return [(key, label, counts[key]) for key, label in TABS.items()]


def _tab(request) -> str:
    tab = request.GET.get("tab") or DEFAULT_TAB
    return tab if tab in TABS else DEFAULT_TAB


class RunDetailPage(RunPageMixin, ProjectPage):
    """A run: header, the agents around it, and the tab in ``?tab=`` (with the step in
    ``?step=`` open beside the tree, so every view of it has a URL and needs no JS)."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, run_id):
        run = self.get_run(run_id)
        now = timezone.now()
        tab = _tab(request)
        selected = None
        if tab == "trace" and request.GET.get("step", "").isdecimal():
            selected = selectors.step_list(run=run).filter(pk=int(request.GET["step"])).first()
        return self.render_page(
            "runs/detail.html",
            {
                **self.header_context(run, now),
                **self.tab_context(run, tab, now),
                "tab": tab,
                "tabs": tabs(run),
                "family": run_family(project=self.project, run=run),
                **replay_context(self, run),
                "selected": selected,
                **(step_panel_context(run, selected, self.urls(run)) if selected else {}),
            },
            live_topics=[live.topic("run", run.pk)],
        )


class RunLiveFragment(RunPageMixin, ProjectPage):
    """The header and the open tab, re-rendered for a live update of a running run
    (swapped out of band by id; the page asks for it when told the run changed); once
    the run has ended, also its replays panel, so the replay form appears without a reload."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, run_id):
        run = self.get_run(run_id)
        now = timezone.now()
        tab = _tab(request)
        # Once the run has ended, the page gets what it would show on a reload: the replay form.
        ended = run.ended
        return self.render_page(
            "runs/live/run_refresh.html",
            {
                **self.header_context(run, now),
                **self.tab_context(run, tab, now),
                "tab": tab,
                "tabs": tabs(run),
                **(replay_context(self, run) if ended else {}),
                "replays_live": ended,
                "oob": True,
            },
        )


def step_panel_context(run: Run, step: Step, urls: dict[str, str]) -> dict[str, Any]:
    messages = list(selectors.message_list(run=run).filter(step=step))
    for message in messages:
        # A message that only calls tools has no content: it is shown by its calls.
        message.calls = display.tool_calls_of(message.tool_calls)
    tool_calls = list(selectors.tool_call_list(run=run).filter(step=step))
    offset_ms = None
    if step.started_at and run.started_at:
        offset_ms = (step.started_at - run.started_at).total_seconds() * 1000
    return {
        "step": step,
        "step_messages": messages,
        "step_tool_calls": tool_calls,
        "offset_ms": offset_ms,
        "step_values": f"{urls['values']}step/{step.pk}/",
        "urls": urls,
    }


class StepPanelFragment(RunPageMixin, ProjectPage):
    """One step in full (payloads cut to the preview), for the panel beside the tree.
    Outside htmx it opens the run's page with the step selected."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, run_id, step_id):
        run = self.get_run(run_id)
        step = selectors.step_list(run=run).filter(pk=step_id).first()
        if step is None:
            raise Http404("step not found")
        urls = self.urls(run)
        if not request.htmx:
            return redirect(f"{urls['detail']}?tab=trace&step={step.pk}#step-panel")
        return self.render_page("runs/_step_panel.html", {"run": run, **step_panel_context(run, step, urls)})


# kind -> (selector of the run's rows of that kind, the fields a page may load in full)
VALUE_SOURCES = {
    "step": (selectors.step_list, ("input", "output", "attributes", "events", "error")),
    "message": (selectors.message_list, ("content", "tool_calls")),
    "toolcall": (selectors.tool_call_list, ("arguments", "result", "error")),
    "memory": (selectors.memory_list, ("state",)),
}
RUN_VALUE_FIELDS = ("input", "output", "metadata", "error")


class ValueFragment(RunPageMixin, ProjectPage):
    """One stored value in full: the "Show all" of a cut payload (a fragment for htmx,
    a page otherwise), or the raw JSON with ``?raw=1``."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, run_id, kind, object_id, field):
        run = self.get_run(run_id)
        if kind == "run" and field in RUN_VALUE_FIELDS and object_id == run.pk:
            value = getattr(run, field)
            label = f"Run {field}"
        elif kind in VALUE_SOURCES and field in VALUE_SOURCES[kind][1]:
            select, _fields = VALUE_SOURCES[kind]
            row = select(run=run).select_related(None).filter(pk=object_id).only("pk", field).first()
            if row is None:
                raise Http404("value not found")
            value = getattr(row, field)
            label = f"{kind.title()} {field.replace('_', ' ')}"
        else:
            raise Http404("no such value")
        if request.GET.get("raw"):
            response = HttpResponse(display.raw_json(value), content_type="application/json; charset=utf-8")
            response["Content-Disposition"] = f'inline; filename="run-{run.pk}-{kind}-{object_id}-{field}.json"'
            return response
        rendered = display.render_json(value, limit=None, open_depth=3)
        context = {
            "run": run,
            "rendered": rendered,
            "label": label,
            "raw_url": f"{request.path}?raw=1",
            "urls": self.urls(run),
        }
        template = "runs/_value_full.html" if request.htmx else "runs/value_page.html"
        return self.render_page(template, context)
