"""The connection configuration every command of the package shares (``agentops-eval``
and ``agentops``): the platform's address, the project and the API key, from the
command line or the environment (AGENTOPS_URL, AGENTOPS_PROJECT, AGENTOPS_API_KEY)."""

from __future__ import annotations

import argparse
import os
import sys

from agentops_eval import __version__
from agentops_eval.client import Client
from agentops_eval.report import printable

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


def program_parser(prog: str, *, description: str, epilog: str):
    """A program's parser (``--version``, the connection options) and its commands'
    subparsers: ``(parser, subparsers)``. The epilog is shown as written."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"{prog} {__version__}")
    connection_options(parser, suppress=False)
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND", required=True)


def add_command(subparsers, name: str, **kwargs) -> argparse.ArgumentParser:
    """A command's parser (``add_parser(name, **kwargs)``) taking the connection options
    after the command too."""
    parser = subparsers.add_parser(name, **kwargs)
    connection_options(parser, suppress=True)
    return parser


def parse_command_line(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code when argparse ended the program (0 after
    --help or --version, 2 for a usage error). First makes stdout and stderr replace what
    they cannot encode: names and model output may hold any character, and a terminal or
    CI log whose encoding cannot show one must not fail the command."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (ValueError, OSError):
                pass
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def make_client(args, *, prog: str, env=None) -> Client:
    """A Client from the options, falling back on the environment. Raises ConfigError."""
    env = os.environ if env is None else env
    url = getattr(args, "url", None) or env.get(ENV_URL, "")
    project = getattr(args, "project", None) or env.get(ENV_PROJECT, "")
    api_key = getattr(args, "api_key", None) or env.get(ENV_API_KEY, "")
    return Client(url, project, api_key, log=lambda message: say(f"{prog}: {message}"))


def say(message: str) -> None:
    """A line on stderr (diagnostics; stdout is the command's output). It often quotes
    the server, so terminal escapes are written as "?" (``report.printable``)."""
    print(printable(message), file=sys.stderr, flush=True)
