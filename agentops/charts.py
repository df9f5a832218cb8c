"""Helpers for the pages' Plotly charts, shared by every app's pages."""

from __future__ import annotations

import html


def chart_label(text: str) -> str:
    """An agent's text (a model name) as a chart label. Plotly draws labels as its own
    subset of HTML (``<a href>``, ``<span style>``, ``<br>``) and decodes entities back
    to characters, so escaping shows the name as sent instead of a link in the chart."""
    return html.escape(text, quote=False)
