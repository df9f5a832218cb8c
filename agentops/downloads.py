"""Streamed downloads: a body of text lines read from the database as the client takes
them, in the organization's scope. Every streamed export of the platform (experiment
results and leaderboards, job logs, trajectories, the runs export) sends its lines through here.

The scope of the view is gone by the time the body is read, and an ASGI server reads
each chunk in a fresh copy of the context, so each chunk enters the scope itself. Under
ASGI the body is an async iterator, each chunk read in the database thread: Django would
otherwise read a synchronous iterator to its end, in memory, before sending anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse

from agentops.scoping import organization_scope

# Lines per chunk of the response body: one trip to the database thread per chunk.
LINES_PER_CHUNK = 200


def _chunks(lines: Iterable[str], organization, lines_per_chunk: int) -> Any:
    """A function returning the next chunk of text ("" at the end), reading inside the
    organization's scope each time."""
    iterator = iter(lines)

    def take() -> str:
        with organization_scope(organization):
            return "".join(islice(iterator, lines_per_chunk))

    return take


def streaming_body(lines: Iterable[str], *, organization, asynchronous: bool, lines_per_chunk: int = LINES_PER_CHUNK):
    """``lines`` as a response body read ``lines_per_chunk`` lines at a time: an async
    iterator under ASGI, a plain one under WSGI."""
    take = _chunks(lines, organization, lines_per_chunk)
    if asynchronous:

        async def body():
            while chunk := await sync_to_async(take)():
                yield chunk

        return body()

    def body_sync():
        while chunk := take():
            yield chunk

    return body_sync()


def streaming_download(
    request,
    lines: Iterable[str],
    *,
    organization,
    content_type: str,
    filename: str,
    lines_per_chunk: int = LINES_PER_CHUNK,
) -> StreamingHttpResponse:
    """A download of ``lines`` named ``filename`` (an attachment, never cached)."""
    raw = getattr(request, "_request", request)  # a DRF Request wraps Django's
    response = StreamingHttpResponse(
        streaming_body(
            lines,
            organization=organization,
            asynchronous=isinstance(raw, ASGIRequest),
            lines_per_chunk=lines_per_chunk,
        ),
        content_type=content_type,
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response
