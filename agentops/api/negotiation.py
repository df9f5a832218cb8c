"""Content negotiation: DRF's, with an unknown ``?format=`` named in a 400 (DRF answers
a bare 404 "Not found.", which says nothing of what was wrong)."""

from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation

from agentops.errors import InvalidRequest


class ContentNegotiation(DefaultContentNegotiation):
    def filter_renderers(self, renderers, format):
        kept = [renderer for renderer in renderers if renderer.format == format]
        if not kept:
            known = ", ".join(dict.fromkeys(renderer.format for renderer in renderers))
            raise InvalidRequest(f"format: {format!r} is not a format of this endpoint; one of {known}")
        return kept
