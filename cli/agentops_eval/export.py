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
import time
from pathlib import Path
from urllib.parse import urljoin

import requests

from agentops_eval import app
from agentops_eval.client import (
    REQUEST_TIMEOUT,
    ApiError,
    ClientError,
    ConfigError,
    ServerError,
    _api_error,
    _retry_after,
    _short,
)
from agentops_eval.config import connection_options, make_client, say

CONTENT_TYPE = "application/x-ndjson"
CHUNK_BYTES = 64 * 1024


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="download a session's or a run's trajectory (JSON Lines)",
        description="Write the trajectory of a session (one line per turn) or of a run (one line) as JSON Lines, "
        "in the agentops.trajectory/1 format (docs/sessions.md), to FILE or to stdout.",
    )
    connection_options(parser, suppress=True)
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
        response = open_download(client, path)
        with response:
            lines = _write(response, args.output)
    except ApiError as exc:
        say(f"agentops export: {what}: {exc.describe()}")
        return app.EXIT_USAGE if exc.status in (401, 403) else app.EXIT_REFUSED
    except ConfigError as exc:
        say(f"agentops export: {exc}")
        return app.EXIT_USAGE
    except (ClientError, requests.RequestException) as exc:
        say(f"agentops export: {what}: {_short(exc)}")
        return app.EXIT_SERVER
    except OSError as exc:
        say(f"agentops export: cannot write {args.output}: {exc.strerror or exc}")
        return app.EXIT_USAGE
    say(f"agentops export: {what}: {lines} line{'s' if lines != 1 else ''} written to {args.output or 'stdout'}")
    return app.EXIT_OK


def open_download(client, path: str) -> requests.Response:
    """The streamed answer of ``GET path``, its body not read yet, retried as the client
    retries every call until the server starts answering 200. Raises ApiError (4xx),
    ConfigError (a redirect), ServerError (every attempt failed)."""
    url = urljoin(client.base, path)
    attempt = 0
    while True:
        delay = client._delay(attempt)
        try:
            response = client.session.get(
                url,
                headers={"Accept": f"{CONTENT_TYPE}, application/json"},
                timeout=REQUEST_TIMEOUT,
                allow_redirects=False,
                stream=True,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            problem = f"GET {url}: {type(exc).__name__}: {_short(exc)}"
        else:
            status = response.status_code
            if status == 200:
                content_type = response.headers.get("Content-Type", "").split(";")[0].strip()
                if content_type != CONTENT_TYPE:
                    response.close()
                    raise ServerError(f"GET {url} answered {content_type or 'no content type'}, not JSON Lines")
                return response
            if 300 <= status < 400:
                response.close()
                raise ConfigError(
                    f"GET {url} was redirected ({status}) to {response.headers.get('Location', '?')}: "
                    "give the platform's final address in --url / AGENTOPS_URL"
                )
            error = _api_error(response)
            response.close()
            if status == 429 or status >= 500:
                problem = f"GET {url}: {error.describe()}"
                delay = max(delay, _retry_after(response, default=delay))
            else:
                raise error
        if attempt >= client.retries:
            raise ServerError(f"{problem} (gave up after {attempt + 1} attempts)")
        attempt += 1
        client.log(f"{problem}; retrying in {delay:.1f} s (attempt {attempt + 1} of {client.retries + 1})")
        time.sleep(delay)


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
