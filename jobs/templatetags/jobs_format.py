"""Filters of the job pages. ``jobs.live`` renders the status block outside any view,
so what it shows must come from the job and these filters, not from view context."""

from __future__ import annotations

import shlex
from typing import Any

from django import template

from runs.templatetags.runs_format import duration

register = template.Library()


@register.filter
def seconds(value: Any) -> str:
    """A number of seconds as the runs pages show durations: 850 ms, 4.20 s, 2m 05s."""
    if value is None or value == "":
        return "—"
    return duration(float(value) * 1000)


@register.filter
def shell(command: Any) -> str:
    """A command (a list of arguments) written as one shell-quoted line, as typed."""
    if not command:
        return ""
    return shlex.join(str(part) for part in command)
