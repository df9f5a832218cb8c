"""agentops: the interactive command of AgentOps Studio's client package.

Each command is a module of this package exposing ``register(subparsers)``, which adds its
parser and sets ``handler`` (a function of the parsed arguments returning the exit code).
They are listed in COMMANDS, the one place a new command is added. The connection options
(--url, --project, --api-key, or AGENTOPS_URL, AGENTOPS_PROJECT, AGENTOPS_API_KEY) are the
ones ``agentops-eval`` takes (agentops_eval.config).

Exit codes (each command's help details its own):
  0    done
  1    the command could not go on (e.g. its session was deleted meanwhile)
  2    usage or configuration error, or the server refused the request (unknown name or id, 401, 403)
  4    server or network error after every retry
  130  left with Ctrl-C
"""

from __future__ import annotations

import argparse
import sys

from agentops_eval import chat, export
from agentops_eval.config import parse_command_line, program_parser

#: The commands of ``agentops``: modules exposing ``register(subparsers)``.
COMMANDS = (chat, export)

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_SERVER = 4
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser, subparsers = program_parser(
        "agentops",
        description="Work with AgentOps Studio from a terminal.",
        epilog="exit codes:\n"
        "  0    done\n"
        "  1    the command could not go on (e.g. its session was deleted meanwhile)\n"
        "  2    usage or configuration error, or the server refused the request (unknown name or id, 401, 403)\n"
        "  4    server or network error after every retry\n"
        "  130  left with Ctrl-C\n\n"
        "The connection options are also accepted after the command. Documentation: docs/sessions.md",
    )
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse_command_line(build_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
