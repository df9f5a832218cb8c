"""Replays on a run's page: the form that starts them, the list of a run's replays (with
how much repeats agree), and, on a replay, its source and a link to the comparison."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import escape

from agentops.errors import ServiceError
from agentops.llm.offline import OFFLINE_MODEL
from agentops.pages import Need, ProjectPage
from agentops.selectors import provider_secret_list
from runs import selectors
from runs.forms import ReplayForm
from runs.models import AgentVersion, Run
from runs.services.replay import replay_defaults, replay_groups, replay_start


def refusal_sentence(message: str) -> str:
    """Why a run cannot be replayed, as one sentence: the service's message already says
    "this run cannot be replayed: ..." (the API answers it as is), so it is not said twice."""
    if message.lower().startswith("this run cannot be"):
        return message[:1].upper() + message[1:]
    return f"This run cannot be replayed: {message}"


def _form(run: Run, organization, data=None) -> tuple[ReplayForm | None, str]:
    """The replay form for ``run``, or None and why it cannot be replayed (a sentence).
    Without a Mistral key in the organization, the form starts on the offline model, so
    a first replay (of the demo's runs, say) runs rather than failing for want of a key."""
    try:
        defaults, tool_choices = replay_defaults(run)
    except ServiceError as exc:
        return None, refusal_sentence(exc.message)
    versions = []
    if run.executed_version_id:
        versions = sorted(
            AgentVersion.objects.filter(agent_id=run.executed_version.agent_id).values_list("number", flat=True),
            reverse=True,
        )
    form = ReplayForm(data, source_spec=defaults, tool_choices=tool_choices, versions=versions, can_fork=run.executed)
    if defaults["model"] != OFFLINE_MODEL and not _has_mistral_key(organization):
        form.initial["model"] = OFFLINE_MODEL
        form.fields["model"].help_text = (
            f"This run used <code>{escape(defaults['model'])}</code>, but the organization has no Mistral key "
            "(Secrets), so the replay starts on <code>offline</code>, a scripted stand-in that calls each tool "
            "once. Add a key to replay on the run's model."
        )
    return form, ""


def _has_mistral_key(organization) -> bool:
    return provider_secret_list(organization=organization).filter(provider="mistral").exists()


def replay_context(page: ProjectPage, run: Run) -> dict[str, Any]:
    """What the run's page shows of replays: its source (a replay), its replays, and the
    form to start one (people who may start runs, on a run that has ended)."""
    context: dict[str, Any] = {"replay_groups": replay_groups(run) if run.executed or run.ended else []}
    if run.replay_of_id:
        context["replay_source"] = selectors.run_list(project=page.project).filter(pk=run.replay_of_id).first()
    if run.ended and page.access.allows("work:write"):
        context["replay_form"], context["replay_refusal"] = _form(run, page.organization)
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
        form, refusal = _form(run, self.organization, request.POST)
        if form is None:
            messages.error(request, refusal)
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
