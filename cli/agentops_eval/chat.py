"""``agentops chat``: an interactive session with an agent (docs/sessions.md).

One thread follows the session's event stream (agentops_eval.sse.Subscription) and puts
its events on a queue; the main thread does everything else: it reads the person's
lines, calls the API, and prints the events, so nothing is written over the prompt.
After a message it shows the turn's events (the answer as it is written, tool calls and
their outputs, approvals to decide) until the session is ready again.

Ctrl-C during a turn interrupts it; a second Ctrl-C within INTERRUPT_WINDOW seconds, or
Ctrl-C (or Ctrl-D) at the prompt, leaves. The session stays open on the platform:
``agentops chat --session ID`` resumes it.

Exit codes:
  0    left with /exit or Ctrl-D
  1    the session went away while in use (deleted: 404) or its stream was refused
  2    usage or configuration error, or the server refused to start or resume
       (unknown agent or session, 401, 403)
  4    server or network error after every retry, at start
  130  left with Ctrl-C
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time

from agentops_eval.client import ApiError, ClientError, ConfigError, ServerError
from agentops_eval.config import add_command, make_client, say
from agentops_eval.report import printable
from agentops_eval.sessions import SessionsApi
from agentops_eval.sse import Event, StreamRefused, Subscription

EXIT_OK = 0
EXIT_GONE = 1
EXIT_USAGE = 2
EXIT_SERVER = 4
EXIT_INTERRUPTED = 130

#: A second Ctrl-C within this many seconds of the first leaves instead of interrupting.
INTERRUPT_WINDOW = 2.0
#: How long a command waits for the event that shows its effect (then the event shows later).
COMMAND_EVENT_WAIT = 10.0
#: Longest tool output shown, in characters.
MAX_OUTPUT = 500
#: Attempts after the first for an API call from the keyboard (a person is waiting).
INTERACTIVE_RETRIES = 2

TURN_EVENTS = frozenset({"processing", "turn_complete", "error", "interrupted"})
ACTIVE_STATUSES = frozenset({"queued", "running", "waiting"})

HELP = """Commands:
  /undo                 the last turn leaves the conversation (its run is kept)
  /compact              the next turn compacts the conversation first
  /sessions             list the project's sessions
  /approve-all off      stop approving tool calls without asking
  /close                close this session (no more messages)
  /help                 this list
  /exit                 leave (the session stays open: agentops chat --session ID)
Ctrl-C interrupts the running turn; twice, or at the prompt, leaves.
On an approval: y approves, n rejects (with a reason told to the model),
e edits the arguments (JSON) and approves, a approves this call and every later
call of the same tool in this session."""


class Leave(Exception):
    """Leave the chat with this exit code."""

    def __init__(self, code: int, message: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message


def register(subparsers) -> None:
    parser = add_command(
        subparsers,
        "chat",
        help="talk with an agent: start a session, or resume one",
        description="Start an interactive session with an agent (--agent) or resume one (--session),\n"
        "and talk with it: its answer streams as it is written, tool calls that need approval\n"
        "ask [y]es / [n]o / [e]dit / [a]ll, Ctrl-C interrupts a turn. /help in the chat lists\n"
        "its commands. Documentation: docs/sessions.md (terminal client).",
        epilog="exit codes:\n"
        "  0    left with /exit or Ctrl-D\n"
        "  1    the session went away while in use (deleted) or its event stream was refused\n"
        "  2    usage or configuration error, or the server refused to start or resume\n"
        "       (unknown agent or session, API key refused: 401, 403)\n"
        "  4    server or network error after every retry, at start\n"
        "  130  left with Ctrl-C\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--agent", metavar="NAME", help="the agent to talk with, by name (starts a new session)")
    which.add_argument("--session", type=_session_id, metavar="ID", help="resume this session")
    parser.add_argument(
        "--agent-version", type=_session_id, metavar="N", help="the agent's version for a new session (default: latest)"
    )
    parser.add_argument("--title", default="", help="the new session's title")
    parser.set_defaults(handler=run)


def _session_id(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an id (a whole number from 1)")
    return int(text)


def run(args) -> int:
    try:
        client = make_client(args, prog="agentops")
    except ConfigError as exc:
        say(f"agentops: error: {exc}")
        return EXIT_USAGE
    client.retries = INTERACTIVE_RETRIES
    api = SessionsApi(client)
    try:
        if args.agent:
            agent = api.agent_by_name(args.agent)
            session = api.create(agent["id"], version=args.agent_version, title=args.title)
        else:
            session = api.get(args.session)
    except (ApiError, ConfigError) as exc:
        say(f"agentops: error: {_describe(exc)}")
        return EXIT_USAGE
    except ServerError as exc:
        say(f"agentops: error: {exc}")
        return EXIT_SERVER
    chat = Chat(api, session)
    return chat.start(resumed=not args.agent)


def _describe(exc: ClientError) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.message} (HTTP {exc.status})"
    return str(exc)


class Chat:
    """The conversation loop. ``read(prompt)`` reads a line (``input``); ``out`` is where
    it writes; ``clock`` measures the time between two Ctrl-C."""

    def __init__(self, api: SessionsApi, session: dict, *, read=None, out=None, clock=time.monotonic):
        self.api = api
        self.session = session
        self.session_id = session["id"]
        self.read = read or _input
        self.out = out or sys.stdout
        self.clock = clock
        self.events: queue.Queue = queue.Queue()
        self.approve_all: set[str] = set(session.get("approve_all") or [])
        self.subscription: Subscription | None = None
        self.mid_line = False
        self.answering: tuple | None = None  # (run, step) of the answer text being written
        self.streamed: set = set()  # runs whose answer text was shown
        self.last_ctrl_c: float | None = None
        self.replay_until = 0  # events up to this id were there before we came (resuming)
        self.pending_at_start: set[int] = set()

    # -- the loop ----------------------------------------------------------------------------

    def start(self, *, resumed: bool) -> int:
        _line_editing()
        running = self._introduce(resumed)
        self.subscription = Subscription(
            self.api.client.session,
            self.api.events_url(self.session_id),
            deliver=lambda event: self.events.put(event),
            fail=lambda refused: self.events.put(refused),
            last_id=self._start_after(running),
            log=lambda message: None,
        ).start()
        try:
            if running is not None:
                self.follow()
            return self.loop()
        except Leave as leave:
            if leave.message:
                self.say(leave.message)
            if leave.code in (EXIT_OK, EXIT_INTERRUPTED):
                self.say(f"Session {self.session_id} stays open: agentops chat --session {self.session_id}")
            return leave.code
        finally:
            self.subscription.stop()

    def loop(self) -> int:
        while True:
            try:
                self.drain()
                line = self.read("you> ")
            except EOFError:
                self.end_line(force=True)
                raise Leave(EXIT_OK) from None
            except KeyboardInterrupt:
                self.end_line(force=True)
                raise Leave(EXIT_INTERRUPTED) from None
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                self.command(line)
            else:
                self.send(line)

    def send(self, text: str) -> None:
        try:
            self.api.send(self.session_id, text)
        except ClientError as exc:
            self.failed(exc)
            return
        self.follow()

    def follow(self, *, until: frozenset | None = None, timeout: float | None = None) -> None:
        """Show the events until the session is ready again after a turn (or, with
        ``until``, until one of those events came, at most ``timeout`` seconds)."""
        turn_seen = False
        deadline = None if timeout is None else self.clock() + timeout
        while True:
            try:
                if deadline is not None and self.clock() >= deadline:
                    return
                try:
                    item = self.events.get(timeout=0.2)
                except queue.Empty:
                    continue
                if isinstance(item, StreamRefused):
                    self._refused(item)
                self.show(item)
                if until is not None:
                    if item.type in until:
                        return
                    continue
                turn_seen = turn_seen or item.type in TURN_EVENTS
                if item.type == "closed" or (item.type == "ready" and turn_seen):
                    self.end_line()
                    return
            except KeyboardInterrupt:
                self.ctrl_c()

    def drain(self) -> None:
        """Show what came while nobody was following (another tab's doings)."""
        while True:
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                self.end_line()
                return
            if isinstance(item, StreamRefused):
                self._refused(item)
            self.show(item)

    def ctrl_c(self) -> None:
        now = self.clock()
        if self.last_ctrl_c is not None and now - self.last_ctrl_c <= INTERRUPT_WINDOW:
            self.end_line(force=True)
            raise Leave(EXIT_INTERRUPTED)
        self.last_ctrl_c = now
        self.say("^C interrupting the turn (Ctrl-C again to leave)")
        try:
            self.api.interrupt(self.session_id)
        except ClientError as exc:
            self.failed(exc)

    # -- commands ----------------------------------------------------------------------------

    def command(self, line: str) -> None:
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        handler = COMMANDS.get(name.lower())
        if handler is None:
            self.say(f"unknown command {name}: /help lists them")
            return
        try:
            handler(self, rest)
        except ClientError as exc:
            self.failed(exc)

    def do_help(self, rest: str) -> None:
        self.say(HELP)

    def do_exit(self, rest: str) -> None:
        raise Leave(EXIT_OK)

    def do_undo(self, rest: str) -> None:
        self.api.undo(self.session_id)
        self.follow(until=frozenset({"undone"}), timeout=COMMAND_EVENT_WAIT)

    def do_compact(self, rest: str) -> None:
        self.api.compact(self.session_id)
        self.say("The next turn compacts the conversation before its first model call.")

    def do_close(self, rest: str) -> None:
        self.api.close(self.session_id)
        self.follow(until=frozenset({"closed"}), timeout=COMMAND_EVENT_WAIT)

    def do_approve_all(self, rest: str) -> None:
        if rest.lower() not in ("off", "none"):
            self.say("/approve-all off revokes it; to approve a tool's calls without asking, answer 'a' to one")
            return
        self.api.approve_all(self.session_id, [])
        self.follow(until=frozenset({"approve_all"}), timeout=COMMAND_EVENT_WAIT)

    def do_sessions(self, rest: str) -> None:
        sessions = self.api.list()
        if not sessions:
            self.say("No sessions.")
            return
        for row in sessions:
            mark = "*" if row.get("id") == self.session_id else " "
            title = f"  {row['title']}" if row.get("title") else ""
            self.say(
                f"{mark} {row.get('id'):>6}  {row.get('status', '?'):<6}  {row.get('agent', '?')} "
                f"v{row.get('version', '?')}  {str(row.get('updated_at', ''))[:19].replace('T', ' ')}{title}"
            )
        self.say("(* this one; agentops chat --session ID resumes another)")

    # -- events --------------------------------------------------------------------------------

    def show(self, event: Event) -> None:
        data = event.json()
        if not isinstance(data, dict):
            return
        kind = event.type
        if kind == "assistant_chunk":
            self.write_answer(data)
        elif kind == "tool_call":
            self.say(f"  [tool] {data.get('tool')} {_compact_json(data.get('arguments'))}")
        elif kind == "tool_output":
            if data.get("error"):
                self.say(f"  [tool] {data.get('tool')} failed: {_short(data.get('error'))}")
            else:
                self.say(f"  [tool] {data.get('tool')} -> {_short(_text(data.get('result')))}")
        elif kind == "approval_required":
            self.ask_approval(event, data)
        elif kind == "approval_decided":
            by = f" by {data['by']}" if data.get("by") else ""
            reason = f": {data['reason']}" if data.get("reason") and data.get("decision") == "rejected" else ""
            self.say(f"  [approval] {data.get('tool')} {data.get('decision')}{by}{reason}")
        elif kind == "approve_all":
            self.approve_all = set(data.get("tools") or [])
            tools = ", ".join(sorted(self.approve_all)) or "off"
            self.say(f"  [approve-all] {tools.replace('*', 'every tool')}")
        elif kind == "queued":
            self.say(f"  [queued] your message waits for the running turn ({data.get('position', 0)} before it)")
        elif kind == "repeated_action":
            self.say(f"  [warning] {data.get('message') or 'the same call came again'}")
        elif kind == "compacted":
            self.say(
                f"  [compacted] the conversation: {data.get('messages_before')} messages -> "
                f"{data.get('messages_after')}"
            )
        elif kind == "turn_complete":
            if data.get("run") not in self.streamed and data.get("output"):
                self.write_answer({"run": data.get("run"), "step": None, "text": _text(data.get("output"))})
            self.end_line()
        elif kind == "error":
            self.say(f"[error] {data.get('error') or 'the turn failed'}")
        elif kind == "interrupted":
            self.say("[interrupted] the turn stopped; what it did so far is kept")
        elif kind == "undone":
            self.say(f"[undone] turn {data.get('turn')} left the conversation (its run {data.get('run')} is kept)")
        elif kind == "closed":
            self.say("[closed] this session is closed: it takes no more messages")

    def write_answer(self, data: dict) -> None:
        text = data.get("text") or ""
        if not text:
            return
        where = (data.get("run"), data.get("step"))
        if self.answering != where:
            self.end_line()
            self.write("agent> ")
            self.answering = where
        self.streamed.add(data.get("run"))
        self.write(text)
        self.mid_line = not text.endswith("\n")

    def ask_approval(self, event: Event, data: dict) -> None:
        approval, tool, arguments = data.get("approval"), data.get("tool"), data.get("arguments")
        replayed = event.number is not None and event.number <= self.replay_until
        if replayed and approval not in self.pending_at_start:
            return  # decided before we came
        if tool in self.approve_all or "*" in self.approve_all:
            return  # the session approves it without asking
        self.say(f"  [approval] {tool} wants to run with {_compact_json(arguments)}")
        while True:
            answer = self.read("  approve? [y]es / [n]o / [e]dit / [a]ll: ").strip().lower()
            decision = None
            try:
                if answer in ("y", "yes"):
                    decision = self.api.decide(self.session_id, approval, approve=True)
                elif answer in ("n", "no"):
                    reason = self.read("  reason (told to the model): ").strip()
                    decision = self.api.decide(self.session_id, approval, approve=False, reason=reason)
                elif answer in ("e", "edit"):
                    edited = self.edit_arguments(arguments)
                    decision = self.api.decide(self.session_id, approval, approve=True, arguments=edited)
                elif answer in ("a", "all"):
                    tools = sorted(self.approve_all | {tool})
                    self.api.approve_all(self.session_id, tools)
                    self.approve_all = set(tools)
                    decision = {}
                else:
                    self.say("  answer y, n, e or a (Ctrl-C interrupts the turn)")
                    continue
            except ClientError as exc:
                self.failed(exc)  # e.g. 409: decided elsewhere, expired, or the turn was interrupted
                return
            if decision is not None:
                return

    def edit_arguments(self, arguments) -> dict:
        self.say(f"  arguments now: {_compact_json(arguments)}")
        while True:
            text = self.read("  new arguments (a JSON object; empty keeps them): ").strip()
            if not text:
                return arguments if isinstance(arguments, dict) else {}
            try:
                value = json.loads(text)
            except ValueError as exc:
                self.say(f"  that is not JSON ({exc}); try again")
                continue
            if not isinstance(value, dict):
                self.say("  the arguments must be a JSON object ({...}); try again")
                continue
            return value

    # -- start ---------------------------------------------------------------------------------

    def _introduce(self, resumed: bool) -> dict | None:
        """Print who we talk with (and, resuming, the conversation so far). Returns the
        turn still going, if any."""
        session = self.session
        title = f' "{session["title"]}"' if session.get("title") else ""
        verb = "Resumed" if resumed else "Started"
        self.say(
            f"{verb} session {session['id']}{title} with {session.get('agent')} "
            f"v{session.get('version')} ({session.get('status')}). /help lists the commands."
        )
        running = None
        for turn in session.get("turns") or []:
            if turn.get("status") in ACTIVE_STATUSES:
                running = turn
            undone = "  (undone)" if turn.get("undone") else ""
            self.say(f"you> {_text(turn.get('input'))}{undone}")
            if turn is running:
                continue
            if turn.get("output"):
                self.say(f"agent> {_text(turn.get('output'))}")
            elif turn.get("error"):
                self.say(f"[{turn.get('status')}] {turn.get('error')}")
        for message in session.get("queued") or []:
            self.say(f"you> {message.get('content')}  (queued)")
        if session.get("status") == "closed":
            self.say("[closed] this session is closed: it takes no more messages")
        self.pending_at_start = {a.get("id") for a in session.get("pending_approvals") or []}
        self.replay_until = int(session.get("last_event_id") or 0)
        return running

    def _start_after(self, running: dict | None) -> int:
        """Follow from the session's last event; when a turn is going, from its first
        event, so its answer so far and its pending approval show."""
        last = int(self.session.get("last_event_id") or 0)
        if running is None:
            return last
        first = self.api.first_event_id(running["run"])
        return min(last, first - 1) if first else last

    # -- output --------------------------------------------------------------------------------

    def write(self, text: str) -> None:
        # Most of what is written is text the model, a tool or the server chose.
        self.out.write(printable(text))
        self.out.flush()

    def end_line(self, *, force: bool = False) -> None:
        if self.mid_line or force:
            self.write("\n")
        self.mid_line = False
        self.answering = None

    def say(self, text: str) -> None:
        self.end_line()
        self.write(text + "\n")

    def failed(self, exc: ClientError) -> None:
        """A refused call: say the server's message; leave when the session is gone or the key is refused."""
        if isinstance(exc, ApiError) and exc.status in (401, 403):
            raise Leave(EXIT_USAGE, f"error: {_describe(exc)}")
        if isinstance(exc, ApiError) and exc.status == 404:
            raise Leave(EXIT_GONE, f"error: {_describe(exc)}")
        self.say(f"error: {_describe(exc)}")

    def _refused(self, refused: StreamRefused) -> None:
        code = EXIT_USAGE if refused.status in (401, 403) else EXIT_GONE
        raise Leave(code, f"error: the event stream was refused: {refused.message} (HTTP {refused.status})")


COMMANDS = {
    "/help": Chat.do_help,
    "/exit": Chat.do_exit,
    "/quit": Chat.do_exit,
    "/undo": Chat.do_undo,
    "/compact": Chat.do_compact,
    "/close": Chat.do_close,
    "/approve-all": Chat.do_approve_all,
    "/sessions": Chat.do_sessions,
}


def _input(prompt: str) -> str:
    return input(prompt)


def _line_editing() -> None:
    """Arrow keys and history at the prompt, where the standard library has readline."""
    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401 - importing it is what turns line editing on for input()
        except ImportError:
            pass


def _text(value) -> str:
    if isinstance(value, str):
        return value
    return _compact_json(value)


def _compact_json(value) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _short(text) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_OUTPUT else text[: MAX_OUTPUT - 3] + "..."
