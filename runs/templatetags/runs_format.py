"""Filters the runs pages use to show durations, money, token counts and payloads the
same way everywhere (pages, fragments and live updates)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote

from django import template
from django.urls import reverse
from django.utils.safestring import SafeString

from runs.views import display

register = template.Library()

MICRO = Decimal("0.000001")


@register.filter
def duration(milliseconds: Any) -> str:
    """850 ms, 1.24 s, 2m 05s, 1h 02m; an em dash when unknown."""
    if milliseconds is None or milliseconds == "":
        return "—"
    ms = float(milliseconds)
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


@register.filter
def money(amount: Any) -> str:
    """A Decimal amount in USD, exact to the micro-dollar and never through float:
    $0.00, $0.00145, $1,234.50, <$0.000001."""
    if amount is None or amount == "":
        return "—"
    try:
        value = amount if isinstance(amount, Decimal) else Decimal(str(amount))
    except InvalidOperation:
        return "—"
    if value == 0:
        return "$0.00"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value < MICRO / 2:
        return f"<{sign}$0.000001"
    whole, _, fraction = f"{value.quantize(MICRO, rounding=ROUND_HALF_UP):f}".partition(".")
    return f"{sign}${int(whole):,}.{fraction.rstrip('0').ljust(2, '0')}"


@register.filter
def tokens(count: Any) -> str:
    """12,345; beyond that, where the digits stop helping, 124.5k and 1.2M."""
    if count is None or count == "":
        return "—"
    count = int(count)
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f}M"
    if count >= 100_000:
        return f"{count / 1_000:.1f}k"
    return f"{count:,}"


@register.filter
def pretty_json(value: Any, limit: int | None = display.PREVIEW_CHARS) -> display.Rendered:
    """The value as a collapsible JSON tree cut to ``limit`` characters."""
    return display.render_json(value, limit=limit)


@register.filter
def short_json(value: Any, limit: int = 160) -> str:
    return display.compact_json(value, limit=int(limit))


@register.filter
def percent(value: Any) -> str:
    if value is None:
        return "—"
    return f"{float(value) * 100:.1f}%"


@register.simple_tag
def payload(value: Any, url: str = "", limit: int = display.PREVIEW_CHARS) -> SafeString:
    """A payload drawn as JSON, with "Show all" (loading ``url``) when it was cut."""
    from django.template.loader import render_to_string

    rendered = display.render_json(value, limit=limit)
    return render_to_string("runs/_payload.html", {"rendered": rendered, "url": url})


@register.simple_tag
def value_url(urls: dict, kind: str, object_id: int, field: str) -> str:
    """The URL of one stored value in full (``runs:value``), from the run's base URLs."""
    return f"{urls['values']}{kind}/{object_id}/{field}/"


@register.simple_tag
def session_url(organization, project, session_id: str) -> str:
    """The page of one session (``runs:session``). The id is the agent's own text, so it
    is encoded as a single path segment: with ``{% url %}`` a "/../" in it made the
    link resolve to another page of the site, and a newline made the page fail (500)."""
    sessions = reverse("runs:sessions", kwargs={"org_slug": organization.slug, "project_slug": project.slug})
    return f"{sessions}{quote(session_id, safe='')}/"
