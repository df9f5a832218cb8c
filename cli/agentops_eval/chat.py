"""``agentops chat``: an interactive session with an agent (docs/sessions.md)."""

from __future__ import annotations

from agentops_eval.config import connection_options


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "chat",
        help="talk with an agent: start a session, or resume one",
        description="Start an interactive session with AGENT (or resume one with --session) and talk with it.",
    )
    connection_options(parser, suppress=True)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--agent", metavar="NAME", help="the agent to talk with (a new session)")
    which.add_argument("--session", type=int, metavar="ID", help="resume this session")
    parser.set_defaults(handler=run)


def run(args) -> int:
    raise NotImplementedError("agentops chat is being written")
