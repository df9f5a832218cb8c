"""Agents the platform runs, as pages: the list and a new agent; one agent (its current
configuration, its versions compared side by side, an edit that saves a new version,
starting a run, its recent runs); the project's webhook tools; and cancelling an
executed run from its page.

Every write goes through one service (``runs.services.agents``, ``runs.execution``),
whose errors are shown on the form or as a message, never as a 500. Agents and tools
are looked up in the URL's project, so another tenant's id is a 404 like a missing one.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from django.contrib import messages
from django.db.models import F
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from agentops import live
from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage
from runs import selectors
from runs.execution import run_cancel, run_start
from runs.forms import (
    MODEL_SUGGESTIONS,
    PARAMETER_LABELS,
    AgentConfigForm,
    AgentCreateForm,
    RunStartForm,
    WebhookToolForm,
)
from runs.models import Agent, AgentVersion, Run, WebhookTool
from runs.services.agents import agent_create, agent_version_create, webhook_tool_create, webhook_tool_delete
from runs.tools.registry import available_tools

READ = Need("work:read", "see this project's agents")
RECENT_RUNS = 20


def agent_in_project(project, agent_id: int) -> Agent:
    """The agent, looked up in the URL's project: another tenant's is a 404, like a missing
    one, and so is one of the platform's own (the analyst: ``Agent.platform``)."""
    agent = Agent.objects.filter(project=project, pk=agent_id, platform="").first()
    if agent is None:  # the platform's own agents (the analyst) are not shown here either
        raise Http404("agent not found")
    return agent


# --- Comparing two versions --------------------------------------------------------------------

VERSION_FIELDS = (
    ("model", "Model"),
    ("system_prompt", "System prompt"),
    ("tools", "Tools"),
    ("approval_tools", "Needs approval"),
    *PARAMETER_LABELS.items(),
    ("step_limit", "Step limit"),
)


def version_config(version: AgentVersion) -> dict[str, Any]:
    """A version's configuration as plain data, parameters flattened (what a diff compares):
    the values the edit form starts from."""
    return AgentConfigForm.initial_from(version)


def version_json(version: AgentVersion) -> str:
    """The version as stable, indented JSON: copy two of them into any diff tool."""
    config = version_config(version)
    config["parameters"] = {name: config.pop(name) for name in PARAMETER_LABELS if config[name] is not None}
    return json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False)


def _shown(value: Any) -> str:
    if value is None or value == "" or value == []:
        return ""
    if isinstance(value, list):
        return ", ".join(value)
    return str(value)


def version_changes(before: AgentVersion | None, after: AgentVersion) -> list[dict[str, Any]]:
    """One row per field: its value before and after, and whether it was added, removed,
    changed or kept. A changed system prompt also gets its lines diffed."""
    old = version_config(before) if before else {}
    new = version_config(after)
    rows = []
    for name, label in VERSION_FIELDS:
        was, now = _shown(old.get(name)), _shown(new[name])
        if before is None or was == now:
            kind = "same"
        elif not was:
            kind = "added"
        elif not now:
            kind = "removed"
        else:
            kind = "changed"
        row = {"name": name, "label": label, "before": was, "after": now, "kind": kind}
        if name == "system_prompt" and kind == "changed":
            row["lines"] = [
                (line[0], line[2:])
                for line in difflib.ndiff(was.splitlines(), now.splitlines())
                if not line.startswith("?")
            ]
        rows.append(row)
    return rows


# --- The agents list and a new agent -----------------------------------------------------------


class AgentsPage(ProjectPage):
    """The project's agents, with their latest version; members create one here."""

    permissions = {"GET": READ, "POST": Need("work:write", "create agents")}

    def get(self, request, org_slug, project_slug):
        return self._render(AgentCreateForm(tools=available_tools(project=self.project), initial={"model": "offline"}))

    def post(self, request, org_slug, project_slug):
        form = AgentCreateForm(request.POST, tools=available_tools(project=self.project))
        if not form.is_valid():
            return self._render(form, status=400)
        try:
            agent = agent_create(
                project=self.project,
                actor=request.user,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
                ip=self.ip,
                **form.config(),
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(form, status=exc.status)
        messages.success(request, f"The agent “{agent.name}” was created (version 1). Start a run below.")
        return redirect("runs:agent", org_slug=org_slug, project_slug=project_slug, agent_id=agent.pk)

    def _render(self, form, *, status: int = 200) -> HttpResponse:
        agents = list(Agent.objects.filter(project=self.project, platform="").order_by("name"))
        latest = {
            version.agent_id: version
            for version in AgentVersion.objects.filter(project=self.project, number=F("agent__latest_version"))
        }
        return self.render_page(
            "runs/agents.html",
            {
                "rows": [(agent, latest.get(agent.pk)) for agent in agents],
                "form": form,
                "model_suggestions": MODEL_SUGGESTIONS,
            },
            status=status,
        )


# --- One agent ---------------------------------------------------------------------------------


class AgentDetailPage(ProjectPage):
    """An agent: start a run, its current configuration, its recent runs, its versions
    (``?version=`` shows one compared with ``?compare=``, by default the one before), and
    the edit form, which saves a new version."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, agent_id):
        return self.render_agent(agent_in_project(self.project, agent_id))

    def render_agent(
        self,
        agent: Agent,
        *,
        edit_form: AgentConfigForm | None = None,
        start_form: RunStartForm | None = None,
        status: int = 200,
    ) -> HttpResponse:
        versions = list(AgentVersion.objects.filter(agent=agent).select_related("created_by").order_by("-number"))
        by_number = {version.number: version for version in versions}
        current = by_number[agent.latest_version]
        chosen = by_number.get(_number(self.request.GET.get("version")), current)
        compare_number = _number(self.request.GET.get("compare"))
        if compare_number not in by_number or compare_number == chosen.number:
            compare_number = chosen.number - 1
        compared = by_number.get(compare_number)
        tools = available_tools(project=self.project)
        if edit_form is None:
            edit_form = AgentConfigForm(tools=tools, initial=AgentConfigForm.initial_from(current))
        if start_form is None:
            start_form = RunStartForm(versions=[version.number for version in versions], latest=current.number)
        recent_runs = list(
            selectors.run_list(project=self.project)
            .filter(executed_version__agent=agent)
            .order_by("-created_at", "-id")[:RECENT_RUNS]
        )
        return self.render_page(
            "runs/agents_detail.html",
            {
                "agent": agent,
                "current": current,
                "versions": versions,
                "chosen": chosen,
                "compared": compared,
                "changes": version_changes(compared, chosen),
                "chosen_json": version_json(chosen),
                "missing_tools": [name for name in current.tools if name not in tools],
                "edit_form": edit_form,
                "start_form": start_form,
                "recent_runs": recent_runs,
                "model_suggestions": MODEL_SUGGESTIONS,
            },
            status=status,
            live_topics=[live.topic("run-row", run.pk) for run in recent_runs],
        )


def _number(value: str | None) -> int | None:
    return int(value) if value and value.isdecimal() else None


class AgentEditAction(AgentDetailPage):
    """Save the edit form as the agent's next version; earlier versions never change."""

    permissions = {"POST": Need("work:write", "edit agents")}

    def post(self, request, org_slug, project_slug, agent_id):
        agent = agent_in_project(self.project, agent_id)
        form = AgentConfigForm(request.POST, tools=available_tools(project=self.project))
        if not form.is_valid():
            return self.render_agent(agent, edit_form=form, status=400)
        try:
            version = agent_version_create(agent=agent, actor=request.user, ip=self.ip, **form.config())
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self.render_agent(agent, edit_form=form, status=exc.status)
        messages.success(request, f"Saved as version {version.number}; runs started from now on use it.")
        # To the new version compared with the one before: what the edit changed.
        url = reverse("runs:agent", kwargs={"org_slug": org_slug, "project_slug": project_slug, "agent_id": agent.pk})
        return redirect(f"{url}?version={version.number}#version-view")


class AgentRunStartAction(AgentDetailPage):
    """Start a run of the agent and open its page, where its steps appear live."""

    permissions = {"POST": Need("work:write", "start runs")}

    def post(self, request, org_slug, project_slug, agent_id):
        agent = agent_in_project(self.project, agent_id)
        numbers = list(AgentVersion.objects.filter(agent=agent).values_list("number", flat=True))
        form = RunStartForm(request.POST, versions=sorted(numbers, reverse=True), latest=agent.latest_version)
        if not form.is_valid():
            return self.render_agent(agent, start_form=form, status=400)
        try:
            run = run_start(
                project=self.project,
                agent=agent,
                actor=request.user,
                input=form.cleaned_data["input"],
                version_number=form.cleaned_data["version"],
                parameters=form.parameters(),
                ip=self.ip,
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self.render_agent(agent, start_form=form, status=exc.status)
        return redirect("runs:detail", org_slug=org_slug, project_slug=project_slug, run_id=run.pk)


# --- Webhook tools -----------------------------------------------------------------------------


class WebhookToolsPage(ProjectPage):
    """The project's webhook tools; members add one here. A new tool's signing secret is
    in the response to the POST, once, and nowhere else."""

    permissions = {"GET": READ, "POST": Need("work:write", "add webhook tools")}

    def get(self, request, org_slug, project_slug):
        return self._render(WebhookToolForm())

    def post(self, request, org_slug, project_slug):
        form = WebhookToolForm(request.POST)
        if not form.is_valid():
            return self._render(form, status=400)
        try:
            tool, secret = webhook_tool_create(
                project=self.project, actor=request.user, ip=self.ip, **form.cleaned_data
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
            return self._render(form, status=exc.status)
        # Rendered, not redirected: the secret must never be stored (in the session or a
        # message) to survive a redirect.
        response = self._render(WebhookToolForm(), created=tool, secret=secret)
        response["Cache-Control"] = "no-store"
        return response

    def _render(self, form, *, status: int = 200, created=None, secret: str = "") -> HttpResponse:
        return self.render_page(
            "runs/webhook_tools.html",
            {
                "tools": list(WebhookTool.objects.filter(project=self.project).order_by("name")),
                "form": form,
                "created": created,
                "secret": secret,
            },
            status=status,
        )


class WebhookToolDeleteAction(ProjectPage):
    permissions = {"POST": Need("work:write", "delete webhook tools")}

    def post(self, request, org_slug, project_slug, tool_id):
        tool = WebhookTool.objects.filter(project=self.project, pk=tool_id).first()
        if tool is None:
            raise Http404("tool not found")
        name = tool.name
        try:
            webhook_tool_delete(tool=tool, actor=request.user, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"Could not delete {name}: {exc.message}.")
        else:
            messages.success(request, f"The tool “{name}” was deleted; agents that use it run without it.")
        return redirect("runs:webhook_tools", org_slug=org_slug, project_slug=project_slug)


# --- Cancelling a run --------------------------------------------------------------------------


class RunCancelAction(ProjectPage):
    """Ask an executed run to stop (the button on its page): a queued run stops at once,
    a running one before its next step."""

    permissions = {"POST": Need("work:write", "cancel runs")}

    def post(self, request, org_slug, project_slug, run_id):
        run = selectors.run_detail(project=self.project, run_id=run_id)
        try:
            run = run_cancel(run=run, actor=request.user, ip=self.ip)
        except ServiceError as exc:
            messages.error(request, f"The run could not be cancelled: {exc.message}.")
        else:
            # The service stores a queued run's end through ingest, not on this object.
            run.refresh_from_db(fields=["status"])
            if run.status == Run.Status.CANCELLED:
                messages.success(request, "The run was cancelled.")
            else:
                messages.success(request, "Cancelling: the run stops before its next step.")
        return redirect("runs:detail", org_slug=org_slug, project_slug=project_slug, run_id=run_id)
