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

from agentops_eval import __version__, chat, export
from agentops_eval.config import connection_options

#: The commands of ``agentops``: modules exposing ``register(subparsers)``.
COMMANDS = (chat, export)

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_SERVER = 4
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentops",
        description="Work with AgentOps Studio from a terminal.",
        epilog="exit codes:\n"
        "  0    done\n"
        "  1    the command could not go on (e.g. its session was deleted meanwhile)\n"
        "  2    usage or configuration error, or the server refused the request (unknown name or id, 401, 403)\n"
        "  4    server or network error after every retry\n"
        "  130  left with Ctrl-C\n\n"
        "The connection options are also accepted after the command. Documentation: docs/sessions.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"agentops {__version__}")
    connection_options(parser, suppress=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def _tolerant_output() -> None:
    """Model output may hold any character: never fail on a terminal that cannot show one."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (ValueError, OSError):
                pass


def main(argv: list[str] | None = None) -> int:
    _tolerant_output()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (argparse exits with 2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
