"""The connection configuration every command of the package shares (``agentops-eval``
and ``agentops``): the platform's address, the project and the API key, from the
command line or the environment (AGENTOPS_URL, AGENTOPS_PROJECT, AGENTOPS_API_KEY)."""

from __future__ import annotations

import argparse
import os
import sys

from agentops_eval.client import Client

ENV_URL = "AGENTOPS_URL"
ENV_PROJECT = "AGENTOPS_PROJECT"
ENV_API_KEY = "AGENTOPS_API_KEY"


def connection_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """--url, --project, --api-key. Added to the top parser (``suppress=False``) and to each
    command's (``suppress=True``), so they are accepted before and after the command."""
    default = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--url", default=default, help=f"the platform's address, e.g. https://agentops.example.com (env {ENV_URL})"
    )
    group.add_argument("--project", default=default, help=f"ORG/PROJECT, the slugs in the URL (env {ENV_PROJECT})")
    group.add_argument(
        "--api-key",
        default=default,
        help=f"a project API key with the read and execute scopes; prefer the env var {ENV_API_KEY}, "
        "command lines show up in process lists and logs",
    )


def make_client(args, *, prog: str, env=None) -> Client:
    """A Client from the options, falling back on the environment. Raises ConfigError."""
    env = os.environ if env is None else env
    url = getattr(args, "url", None) or env.get(ENV_URL, "")
    project = getattr(args, "project", None) or env.get(ENV_PROJECT, "")
    api_key = getattr(args, "api_key", None) or env.get(ENV_API_KEY, "")
    return Client(url, project, api_key, log=lambda message: say(f"{prog}: {message}"))


def say(message: str) -> None:
    """A line on stderr (diagnostics; stdout is the command's output)."""
    print(message, file=sys.stderr, flush=True)
