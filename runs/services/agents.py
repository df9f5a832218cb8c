"""Agents (with immutable versions) and webhook tools."""

from __future__ import annotations

import re
import secrets as secret_tokens
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentops import crypto
from agentops.errors import Conflict, InvalidRequest
from agentops.netguard import UnsafeUrlError, check_outbound_url
from agentops.services.audit import audit_record
from runs.models import Agent, AgentVersion, WebhookTool
from runs.tools.builtins import BUILTIN_TOOLS
from runs.tools.registry import available_tools

PARAMETER_RANGES = {
    "temperature": (0.0, 2.0, float),
    "top_p": (0.0, 1.0, float),
    "max_tokens": (1, 1_000_000, int),
    "random_seed": (0, 2**31 - 1, int),
}
TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
MAX_STEP_LIMIT = 500


def clean_parameters(parameters: dict[str, Any] | None) -> dict[str, Any]:
    cleaned = {}
    for name, value in (parameters or {}).items():
        if name not in PARAMETER_RANGES:
            raise InvalidRequest(f"unknown parameter {name!r}; use {', '.join(PARAMETER_RANGES)}")
        if value is None:
            continue
        low, high, kind = PARAMETER_RANGES[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (kind is int and not isinstance(value, int))
        ):
            raise InvalidRequest(f"{name} must be a {'whole ' if kind is int else ''}number")
        if not low <= value <= high:
            raise InvalidRequest(f"{name} must be between {low} and {high}")
        cleaned[name] = kind(value)
    return cleaned


def _version_fields(*, project, model, system_prompt, tools, approval_tools, parameters, step_limit) -> dict:
    model = (model or "").strip()
    if not model:
        raise InvalidRequest("the agent needs a model (for example mistral-large-latest, or offline)")
    tools = list(dict.fromkeys(tools or []))
    approval_tools = list(dict.fromkeys(approval_tools or []))
    known = available_tools(project=project)
    unknown = [name for name in tools if name not in known]
    if unknown:
        raise InvalidRequest(f"unknown tool {unknown[0]!r}; available: {', '.join(sorted(known))}")
    stray = [name for name in approval_tools if name not in tools]
    if stray:
        raise InvalidRequest(f"{stray[0]!r} needs approval but is not one of the agent's tools")
    if not 1 <= step_limit <= MAX_STEP_LIMIT:
        raise InvalidRequest(f"the step limit must be between 1 and {MAX_STEP_LIMIT}")
    return {
        "model": model[:200],
        "system_prompt": system_prompt or "",
        "tools": tools,
        "approval_tools": approval_tools,
        "parameters": clean_parameters(parameters),
        "step_limit": step_limit,
    }


def agent_create(
    *,
    project,
    actor,
    name: str,
    description: str = "",
    model: str,
    system_prompt: str = "",
    tools: list[str] | None = None,
    approval_tools: list[str] | None = None,
    parameters: dict | None = None,
    step_limit: int = 20,
    ip: str | None = None,
) -> Agent:
    """Create an agent with its first version."""
    name = (name or "").strip()
    if not name:
        raise InvalidRequest("the agent needs a name")
    fields = _version_fields(
        project=project,
        model=model,
        system_prompt=system_prompt,
        tools=tools,
        approval_tools=approval_tools,
        parameters=parameters,
        step_limit=step_limit,
    )
    try:
        with transaction.atomic():
            agent = Agent.objects.create(
                organization_id=project.organization_id,
                project=project,
                name=name[:100],
                description=description,
                latest_version=1,
                created_by=actor,
            )
            AgentVersion.objects.create(
                organization_id=project.organization_id,
                project=project,
                agent=agent,
                number=1,
                created_by=actor,
                **fields,
            )
            audit_record(
                organization=project.organization,
                actor=actor,
                action="agent.create",
                target=agent,
                data={"project": project.slug, "model": fields["model"]},
                ip=ip,
            )
    except IntegrityError:
        raise Conflict(f"an agent named {name!r} already exists in this project") from None
    return agent


def agent_version_create(*, agent: Agent, actor, ip: str | None = None, **changes) -> AgentVersion:
    """Save an edit as a new version (versions are never changed); unchanged fields carry over."""
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        if agent.platform:
            raise InvalidRequest(f"{agent.name!r} is the platform's own agent; it cannot be edited")
        current = AgentVersion.objects.get(agent=agent, number=agent.latest_version)
        merged = {
            key: changes[key] if changes.get(key) is not None else getattr(current, key)
            for key in ("model", "system_prompt", "tools", "approval_tools", "parameters", "step_limit")
        }
        fields = _version_fields(project=agent.project, **merged)
        agent.latest_version += 1
        agent.updated_at = timezone.now()
        agent.save(update_fields=["latest_version", "updated_at"])
        version = AgentVersion.objects.create(
            organization_id=agent.organization_id,
            project_id=agent.project_id,
            agent=agent,
            number=agent.latest_version,
            created_by=actor,
            **fields,
        )
        audit_record(
            organization=agent.project.organization,
            actor=actor,
            action="agent.version",
            target=agent,
            data={"version": version.number},
            ip=ip,
        )
    return version


def _check_webhook(name: str, url: str, parameters: dict | None, timeout_seconds: float) -> None:
    if not TOOL_NAME.match(name or ""):
        raise InvalidRequest("a tool name is 1 to 64 letters, digits, _ or -, starting with a letter or _")
    if name in BUILTIN_TOOLS:
        raise InvalidRequest(f"{name!r} is a built-in tool; choose another name")
    if parameters is not None and (not isinstance(parameters, dict) or parameters.get("type") != "object"):
        raise InvalidRequest('parameters must be a JSON schema object with "type": "object"')
    if not 0.5 <= timeout_seconds <= 60:
        raise InvalidRequest("the timeout must be between 0.5 and 60 seconds")
    try:
        check_outbound_url(url)
    except UnsafeUrlError as exc:
        raise InvalidRequest(f"URL refused: {exc}") from None


def webhook_tool_create(
    *,
    project,
    actor,
    name: str,
    url: str,
    description: str = "",
    parameters: dict | None = None,
    timeout_seconds: float = 10.0,
    ip: str | None = None,
) -> tuple[WebhookTool, str]:
    """Create a webhook tool; return it with its signing secret, shown once."""
    _check_webhook(name, url, parameters, timeout_seconds)
    secret = "whsec_" + secret_tokens.token_urlsafe(32)
    try:
        with transaction.atomic():
            tool = WebhookTool.objects.create(
                organization_id=project.organization_id,
                project=project,
                name=name,
                url=url,
                description=description,
                parameters=parameters or {"type": "object", "properties": {}},
                secret_ciphertext=crypto.encrypt(secret),
                timeout_seconds=timeout_seconds,
                created_by=actor,
            )
            audit_record(
                organization=project.organization,
                actor=actor,
                action="webhook_tool.create",
                target=tool,
                data={"project": project.slug, "url": url},
                ip=ip,
            )
    except IntegrityError:
        raise Conflict(f"a tool named {name!r} already exists in this project") from None
    return tool, secret


def webhook_tool_delete(*, tool: WebhookTool, actor, ip: str | None = None) -> None:
    with transaction.atomic():
        audit_record(
            organization=tool.project.organization, actor=actor, action="webhook_tool.delete", target=tool, ip=ip
        )
        tool.delete()
