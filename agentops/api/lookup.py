"""Finding an object an API body names either by id (a number) or by name."""

from __future__ import annotations

from agentops.errors import NotFound


def by_name_or_id(queryset, value, what: str):
    """The row of ``queryset`` (already scoped) whose id is ``value`` (a number) or
    whose ``name`` is ``value`` (a text); NotFound naming ``what`` otherwise."""
    found = None
    if isinstance(value, int) and not isinstance(value, bool):
        found = queryset.filter(pk=value).first()
    elif isinstance(value, str):
        found = queryset.filter(name=value).first()
    if found is None:
        raise NotFound(f"no {what} {value!r}")
    return found
