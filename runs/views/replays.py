"""Replays on a run's page: the form that starts them, the list of a run's replays (with
how much repeats agree), and, on a replay, its source and a link to the comparison."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse

from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage
from runs import selectors
from runs.forms import ReplayForm
from runs.models import AgentVersion, Run
from runs.services.replay import ENDED, replay_defaults, replay_groups, replay_start


def _form(run: Run, data=None) -> tuple[ReplayForm | None, str]:
    """The replay form for ``run``, or None and why it cannot be replayed."""
    try:
        defaults, tool_choices = replay_defaults(run)
    except ServiceError as exc:
        return None, exc.message
    versions = []
    if run.executed_version_id:
        versions = sorted(
            AgentVersion.objects.filter(agent_id=run.executed_version.agent_id).values_list("number", flat=True),
            reverse=True,
        )
    form = ReplayForm(data, source_spec=defaults, tool_choices=tool_choices, versions=versions, can_fork=run.executed)
    return form, ""


def replay_context(page: ProjectPage, run: Run) -> dict[str, Any]:
    """What the run's page shows of replays: its source (a replay), its replays, and the
    form to start one (people who may start runs, on a run that has ended)."""
    context: dict[str, Any] = {"replay_groups": replay_groups(run) if run.executed or run.status in ENDED else []}
    if run.replay_of_id:
        context["replay_source"] = selectors.run_list(project=page.project).filter(pk=run.replay_of_id).first()
    if run.status in ENDED and page.access.allows("work:write"):
        context["replay_form"], context["replay_refusal"] = _form(run)
    return context


class ReplayStartAction(ProjectPage):
    """Start replays of a run from its page: one opens the replay's page, a repeat the
    run's list of replays."""

    permissions = {"POST": Need("work:write", "replay runs")}

    def post(self, request, org_slug, project_slug, run_id):
        run = selectors.run_detail(project=self.project, run_id=run_id)
        source_url = reverse(
            "runs:detail", kwargs={"org_slug": org_slug, "project_slug": project_slug, "run_id": run.pk}
        )
        form, refusal = _form(run, request.POST)
        if form is None:
            messages.error(request, f"This run cannot be replayed: {refusal}")
            return redirect(source_url)
        if not form.is_valid():
            problems = "; ".join(
                f"{form.fields[name].label or name if name in form.fields else 'form'}: {' '.join(errors)}"
                for name, errors in form.errors.items()
            )
            messages.error(request, f"The replay was not started. {problems}")
            return redirect(f"{source_url}#replays")
        try:
            runs = replay_start(
                source=run,
                actor=request.user,
                overrides=form.overrides(),
                tool_mode=form.cleaned_data["tool_mode"],
                unmatched=form.cleaned_data["unmatched"],
                fork_step=form.cleaned_data.get("fork_step"),
                repeat=form.cleaned_data["repeat"],
                ip=self.ip,
            )
        except ServiceError as exc:
            messages.error(request, f"The replay was not started: {exc.message}")
            return redirect(f"{source_url}#replays")
        if len(runs) == 1:
            return redirect("runs:detail", org_slug=org_slug, project_slug=project_slug, run_id=runs[0].pk)
        messages.success(request, f"{len(runs)} replays started.")
        return redirect(f"{source_url}#replays")
