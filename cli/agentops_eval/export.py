"""``agentops export``: a session's or a run's trajectory, JSON Lines in the
``agentops.trajectory/1`` format (docs/sessions.md#trajectories), to a file or stdout.

The body is copied as the server streams it, never held whole: a long session costs the
client no memory. With ``-o FILE`` it is written to ``FILE.part`` and renamed once
complete, so a download cut short never leaves a file that looks whole. Opening the
download is retried like every call of the client (connection errors, 5xx, 429); a
download cut once it has started is an error (exit 4), not retried.

Exit codes: 0 written; 1 the server refused (404: no such session or run in the
project); 2 usage or configuration error, or the key was refused (401, 403); 4 server or
network error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import requests

from agentops_eval import app
from agentops_eval.client import ApiError, ClientError, ConfigError, short
from agentops_eval.config import add_command, make_client, say

CONTENT_TYPE = "application/x-ndjson"
CHUNK_BYTES = 64 * 1024


def register(subparsers) -> None:
    parser = add_command(
        subparsers,
        "export",
        help="download a session's or a run's trajectory (JSON Lines)",
        description="Write the trajectory of a session (one line per turn) or of a run (one line) as JSON Lines, "
        "in the agentops.trajectory/1 format (docs/sessions.md), to FILE or to stdout.",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", type=int, metavar="ID", help="the interactive session to export")
    which.add_argument("--run", type=int, metavar="ID", help="the run to export")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (replaced once complete) instead of stdout"
    )
    parser.set_defaults(handler=run)


def run(args) -> int:
    try:
        client = make_client(args, prog="agentops")
    except ConfigError as exc:
        say(f"agentops export: {exc}")
        return app.EXIT_USAGE
    path = f"agent-sessions/{args.session}/trajectory/" if args.session is not None else f"runs/{args.run}/trajectory/"
    what = f"session {args.session}" if args.session is not None else f"run {args.run}"
    try:
        with client.open_stream(path, content_type=CONTENT_TYPE) as response:
            lines = _write(response, args.output)
    except ApiError as exc:
        say(f"agentops export: {what}: {exc.describe()}")
        return app.EXIT_USAGE if exc.status in (401, 403) else app.EXIT_REFUSED
    except ConfigError as exc:
        say(f"agentops export: {exc}")
        return app.EXIT_USAGE
    except (ClientError, requests.RequestException) as exc:
        say(f"agentops export: {what}: {short(exc)}")
        return app.EXIT_SERVER
    except OSError as exc:
        say(f"agentops export: cannot write {args.output}: {exc.strerror or exc}")
        return app.EXIT_USAGE
    say(f"agentops export: {what}: {lines} line{'s' if lines != 1 else ''} written to {args.output or 'stdout'}")
    return app.EXIT_OK


def _write(response: requests.Response, output: str | None) -> int:
    """Copy the body to ``output`` (``output.part``, renamed at the end) or stdout;
    returns the number of lines."""
    if output is None:
        return _copy(response, sys.stdout.buffer)
    target = Path(output)
    partial = target.with_name(target.name + ".part")
    try:
        with open(partial, "wb") as sink:
            lines = _copy(response, sink)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return lines


def _copy(response: requests.Response, sink) -> int:
    lines = 0
    for chunk in response.iter_content(chunk_size=CHUNK_BYTES):
        sink.write(chunk)
        lines += chunk.count(b"\n")
    sink.flush()
    return lines
