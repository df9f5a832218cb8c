"""``agentops chat`` (cli/agentops_eval/chat.py): end to end in a pseudo-terminal against
the real ASGI application (uvicorn), a real Celery worker and the fake Mistral server;
and its command dispatch and approval answers at unit level."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

import pytest

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
if str(CLI_DIR) not in sys.path:
    sys.path.insert(0, str(CLI_DIR))

from agentops_eval import chat as chat_module  # noqa: E402
from agentops_eval.client import ApiError  # noqa: E402
from agentops_eval.sse import Event  # noqa: E402

from tests import fake_mistral as fake_mistral_module  # noqa: E402
from tests.browser.test_live_updates import asgi_server  # noqa: E402, F401 - the uvicorn fixture, reused
from tests.cli.terminal import Terminal, console_script  # noqa: E402
from tests.fake_mistral import completion  # noqa: E402

MODEL = "mistral-small-latest"


# -- end to end -----------------------------------------------------------------------------------


@pytest.fixture
def gated_streams(monkeypatch):
    """Answers scripted with a ``_gate`` (a threading.Event) stream their first piece of
    text, then wait for the gate: the test sees the answer while it is being written."""
    original = fake_mistral_module.stream_chunks

    def stream_chunks(body):
        gate = body.pop("_gate", None)
        chunks = original(body)
        if gate is None:
            yield from chunks
            return
        yield from chunks[:2]  # the role, then the first words
        assert gate.wait(120), "the test never opened the gate"
        yield from chunks[2:]

    monkeypatch.setattr(fake_mistral_module, "stream_chunks", stream_chunks)


def _gated(body: dict) -> tuple[dict, threading.Event]:
    gate = threading.Event()
    return {**body, "_gate": gate}, gate


def _turn(session_id: int, number: int):
    from runs.models import Run

    return Run.dangerously_unscoped_objects.get(agent_session_id=session_id, turn=number)


def _wait_for(condition, what: str):
    import time

    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_a_chat_in_a_terminal_streams_decides_interrupts_undoes_compacts_and_resumes(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    fake_mistral,
    gated_streams,
    tenant,
    make_api_key,
    tmp_path,
):
    from agentops.scoping import organization_scope
    from runs.models import Approval, Run
    from runs.services.agents import agent_create

    fake_mistral.serve(tenant.organization)
    with organization_scope(tenant.organization):
        agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="helper",
            model=MODEL,
            tools=["calculator"],
            approval_tools=["calculator"],
        )
    _key, raw_key = make_api_key(tenant.project)
    env = {"AGENTOPS_URL": asgi_server, "AGENTOPS_PROJECT": "acme/agent", "AGENTOPS_API_KEY": raw_key}
    agentops = console_script("agentops", tmp_path)

    hello, hello_gate = _gated(completion(content="Hello there, I am writing this answer in several pieces."))
    story, story_gate = _gated(
        completion(content="Once upon a time there was", tool_calls=[("c5", "calculator", {"expression": "1+2"})])
    )
    for body in (
        hello,  # turn 1: streamed
        completion(tool_calls=[("c2", "calculator", {"expression": "6*7"})]),  # turn 2: approved with y
        completion(content="It is 42."),
        completion(tool_calls=[("c3", "calculator", {"expression": "2+2"})]),  # turn 3: rejected with n
        completion(content="Fine, no arithmetic then."),
        completion(tool_calls=[("c4", "calculator", {"expression": "1+1"})]),  # turn 4: edited with e
        completion(content="It is 100."),
        story,  # turn 5: interrupted with Ctrl-C
        completion(tool_calls=[("c6", "calculator", {"expression": "3*3"})]),  # turn 6: approve-all with a
        completion(tool_calls=[("c7", "calculator", {"expression": "4*4"})]),
        completion(content="9 and 16."),
        completion(content="You are welcome."),  # turn 7 (turn 6 undone; compacted first)
    ):
        fake_mistral.reply(body)

    terminal = Terminal([str(agentops), "chat", "--agent", "helper"], env)
    try:
        session_id = int(terminal.expect(r"Started session (\d+) with helper v1")[1])
        terminal.expect("you> ")

        # Turn 1: the answer shows while the model is still writing it.
        terminal.line("Say hello")
        terminal.expect(r"agent> Hello there, I ")
        assert _turn(session_id, 1).status == Run.Status.RUNNING, "the answer showed before its turn ended"
        assert "several pieces" not in terminal.text
        hello_gate.set()
        terminal.expect(r"answer in several pieces\.\n")
        terminal.expect("you> ")

        # Turn 2: approve with y.
        terminal.line("What is 6*7?")
        terminal.expect(re.escape('[approval] calculator wants to run with {"expression": "6*7"}'))
        terminal.expect(re.escape("approve? [y]es / [n]o / [e]dit / [a]ll: "))
        terminal.line("y")
        terminal.expect(r'\[tool\] calculator -> .*"result": 42\}')
        terminal.expect(r"agent> It is 42\.")
        terminal.expect("you> ")

        # Turn 3: reject with n and a reason, which the model reads.
        terminal.line("And 2+2?")
        terminal.expect(re.escape("approve? [y]es / [n]o / [e]dit / [a]ll: "))
        terminal.line("n")
        terminal.expect(re.escape("reason (told to the model): "))
        terminal.line("no more arithmetic today")
        terminal.expect(r"\[approval\] calculator rejected.*: no more arithmetic today")
        terminal.expect(r"agent> Fine, no arithmetic then\.")
        terminal.expect("you> ")

        # Turn 4: edit the arguments, then it runs with them.
        terminal.line("What is 1+1?")
        terminal.expect(re.escape("approve? [y]es / [n]o / [e]dit / [a]ll: "))
        terminal.line("e")
        terminal.expect(re.escape("new arguments (a JSON object; empty keeps them): "))
        terminal.line("[1, 2]")
        terminal.expect("must be a JSON object")
        terminal.line('{"expression": "10*10"}')
        terminal.expect(r'\[tool\] calculator -> .*"result": 100\}')
        terminal.expect(r"agent> It is 100\.")
        terminal.expect("you> ")

        # Turn 5: Ctrl-C while the answer is being written interrupts the turn.
        terminal.line("Tell me a long story")
        terminal.expect("agent> Once upon a")
        terminal.ctrl_c()
        terminal.expect(re.escape("^C interrupting the turn (Ctrl-C again to leave)"))
        _wait_for(lambda: _turn(session_id, 5).cancel_requested, "the interrupt reached the server")
        story_gate.set()
        terminal.expect(r"\[interrupted\] the turn stopped")
        terminal.expect("you> ")
        assert _turn(session_id, 5).status == Run.Status.CANCELLED

        # Turn 6: approve-all with a; the second call of the tool is not asked about.
        terminal.line("Now 3*3 and 4*4")
        terminal.expect(re.escape("approve? [y]es / [n]o / [e]dit / [a]ll: "))
        terminal.line("a")
        terminal.expect(r"\[approve-all\] calculator")
        terminal.expect(r'\[tool\] calculator -> .*"result": 9\}')
        terminal.expect(r'\[tool\] calculator -> .*"result": 16\}')
        terminal.expect(r"agent> 9 and 16\.")
        after_turn_6 = terminal.expect("you> ").end()
        assert terminal.text.count("approve? [y]es") == 4, "the approve-all call was not asked about"

        # /undo, /compact, then a turn that compacts; /sessions; /exit.
        terminal.line("/undo")
        terminal.expect(r"\[undone\] turn 6 left the conversation")
        terminal.expect("you> ")
        terminal.line("/compact")
        terminal.expect("The next turn compacts the conversation")
        terminal.expect("you> ")
        terminal.line("Thanks")
        terminal.expect(r"\[compacted\] the conversation: \d+ messages -> \d+")
        terminal.expect(r"agent> You are welcome\.")
        terminal.expect("you> ")
        terminal.line("/sessions")
        terminal.expect(rf"\* +{session_id} +open +helper v1")
        terminal.expect("you> ")
        terminal.line("/exit")
        terminal.expect(f"Session {session_id} stays open: agentops chat --session {session_id}")
        assert terminal.wait() == 0
        assert "approve?" not in terminal.text[after_turn_6:], "no approval asked after approve-all"
    finally:
        hello_gate.set(), story_gate.set()  # never leave the worker waiting
        terminal.close()

    turns = {run.turn: run for run in Run.dangerously_unscoped_objects.filter(agent_session_id=session_id)}
    assert {n: (r.status, r.undone) for n, r in turns.items()} == {
        1: ("succeeded", False),
        2: ("succeeded", False),
        3: ("succeeded", False),
        4: ("succeeded", False),
        5: ("cancelled", False),
        6: ("succeeded", True),
        7: ("succeeded", False),
    }
    decided = Approval.dangerously_unscoped_objects.filter(run__agent_session_id=session_id).order_by("id")
    assert [(a.status, a.approved_arguments) for a in decided if a.run.turn in (2, 3, 4)] == [
        ("approved", {"expression": "6*7"}),
        ("rejected", None),
        ("approved", {"expression": "10*10"}),
    ]
    told = [m for r in fake_mistral.requests for m in r["body"].get("messages", []) if m.get("role") == "tool"]
    assert any("no more arithmetic today" in str(m.get("content")) for m in told), "the model read the reason"

    # Resume: the conversation so far shows; Ctrl-C at the prompt leaves (130).
    resumed = Terminal([str(agentops), "chat", "--session", str(session_id)], env)
    try:
        resumed.expect(rf"Resumed session {session_id} with helper v1 \(open\)")
        resumed.expect("you> Say hello\n")
        resumed.expect(r"agent> Hello there, I am writing this answer in several pieces\.")
        resumed.expect(r"you> Now 3\*3 and 4\*4  \(undone\)")
        resumed.expect(r"you> Thanks\nagent> You are welcome\.")
        resumed.expect("you> ")
        resumed.ctrl_c()
        resumed.expect(f"Session {session_id} stays open")
        assert resumed.wait() == 130
    finally:
        resumed.close()


@pytest.mark.django_db(transaction=True)
def test_resuming_a_turn_that_waits_for_approval_shows_it_so_far_and_asks(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    fake_mistral,
    tenant,
    make_api_key,
    tmp_path,
):
    from agentops.scoping import organization_scope
    from runs.models import Approval, Run
    from runs.services.agents import agent_create
    from runs.services.sessions import session_create, session_send

    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(
        completion(content="Let me compute that.", tool_calls=[("c1", "calculator", {"expression": "6*7"})])
    )
    fake_mistral.reply(completion(content="It is 42."))
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="helper",
            model=MODEL,
            tools=["calculator"],
            approval_tools=["calculator"],
        )
        session = session_create(project=tenant.project, agent=agent, actor=tenant.member, title="From the page")
        session_send(session=session, actor=tenant.member, content="What is 6*7?")
    pending = Approval.dangerously_unscoped_objects.filter(run__agent_session=session, status="pending")
    _wait_for(pending.exists, "the turn waits for an approval")
    _key, raw_key = make_api_key(tenant.project)
    env = {"AGENTOPS_URL": asgi_server, "AGENTOPS_PROJECT": "acme/agent", "AGENTOPS_API_KEY": raw_key}

    terminal = Terminal([str(console_script("agentops", tmp_path)), "chat", "--session", str(session.pk)], env)
    try:
        terminal.expect(rf'Resumed session {session.pk} "From the page" with helper v1')
        terminal.expect(r"you> What is 6\*7\?\n")
        terminal.expect(r"agent> Let me compute that\.")  # the turn so far, from its first event
        terminal.expect(re.escape('[approval] calculator wants to run with {"expression": "6*7"}'))
        terminal.expect(re.escape("approve? [y]es / [n]o / [e]dit / [a]ll: "))
        terminal.line("y")
        terminal.expect(r'\[tool\] calculator -> .*"result": 42\}')
        terminal.expect(r"agent> It is 42\.")
        terminal.expect("you> ")
        terminal.line("/exit")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert Run.dangerously_unscoped_objects.get(agent_session=session, turn=1).status == Run.Status.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_unknown_agent_or_session_and_a_refused_key_exit_2_with_the_servers_message(
    asgi_server,  # noqa: F811 - the fixture imported above
    tenant,
    make_api_key,
    tmp_path,
):
    _key, raw_key = make_api_key(tenant.project)
    env = {"AGENTOPS_URL": asgi_server, "AGENTOPS_PROJECT": "acme/agent", "AGENTOPS_API_KEY": raw_key}
    agentops = console_script("agentops", tmp_path)
    for argv, env_changes, message in (
        (["chat", "--agent", "nobody"], {}, "this project has no agent named 'nobody'"),
        (["chat", "--session", "999999"], {}, r"session not found \(HTTP 404\)"),
        (["chat", "--session", "1"], {"AGENTOPS_API_KEY": "ao_wrong"}, r"\(HTTP 401\)"),
    ):
        terminal = Terminal([str(agentops), *argv], {**env, **env_changes})
        try:
            terminal.expect(message)
            assert terminal.wait() == 2
        finally:
            terminal.close()


# -- unit level -----------------------------------------------------------------------------------


class RecordingApi:
    """The calls a chat makes, recorded; ``refuse`` maps an operation to the ApiError it raises."""

    def __init__(self, refuse=None):
        self.calls: list[tuple] = []
        self.refuse = refuse or {}

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if name in self.refuse:
                raise self.refuse[name]
            return [] if name == "list" else {}

        return call


class Script:
    """Lines typed at the prompts, in order; the prompts are recorded."""

    def __init__(self, *lines):
        self.lines = list(lines)
        self.prompts: list[str] = []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        if not self.lines:
            raise EOFError
        line = self.lines.pop(0)
        if isinstance(line, BaseException):
            raise line
        return line


class Output:
    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def _chat(api, *lines, clock=None, **session):
    out = Output()
    script = Script(*lines)
    chat = chat_module.Chat(
        api, {"id": 7, "approve_all": [], **session}, read=script, out=out, clock=clock or (lambda: 0.0)
    )
    return chat, out, script


@pytest.mark.parametrize(
    ("line", "operation"),
    [("/undo", "undo"), ("/compact", "compact"), ("/sessions", "list"), ("/close", "close"), ("/UNDO", "undo")],
)
def test_each_command_calls_its_operation(line, operation, monkeypatch):
    monkeypatch.setattr(chat_module, "COMMAND_EVENT_WAIT", 0)
    api = RecordingApi()
    chat, _out, _script = _chat(api)
    chat.command(line)
    assert [name for name, _args, _kwargs in api.calls] == [operation]


def test_an_unknown_command_says_so_and_calls_nothing():
    api = RecordingApi()
    chat, out, _script = _chat(api)
    chat.command("/frobnicate")
    assert api.calls == [] and "unknown command /frobnicate: /help lists them" in out.text


def test_exit_and_end_of_input_leave_with_0_and_ctrl_c_at_the_prompt_with_130():
    for lines, code in ((["/exit"], 0), ([], 0), ([KeyboardInterrupt()], 130)):
        chat, _out, _script = _chat(RecordingApi(), *lines)
        with pytest.raises(chat_module.Leave) as left:
            chat.loop()
        assert left.value.code == code


def test_a_refused_message_prints_the_servers_message_and_the_chat_goes_on():
    conflict = ApiError(409, "conflict", "this session is closed: open a new one to go on")
    throttled = ApiError(429, "throttled", "5 messages already wait for the running turn")
    for refusal in (conflict, throttled):
        api = RecordingApi(refuse={"send": refusal})
        chat, out, _script = _chat(api, "hello", "/exit")
        with pytest.raises(chat_module.Leave) as left:
            chat.loop()
        assert left.value.code == 0
        assert f"error: {refusal.message} (HTTP {refusal.status})" in out.text


def test_a_deleted_session_or_a_revoked_key_ends_the_chat():
    for status, code in ((404, 1), (401, 2), (403, 2)):
        api = RecordingApi(refuse={"undo": ApiError(status, "x", "gone")})
        chat, _out, _script = _chat(api, "/undo")
        with pytest.raises(chat_module.Leave) as left:
            chat.loop()
        assert left.value.code == code


def _approval_event(event_id=5, tool="calculator"):
    data = {"run": 3, "approval": 11, "call_id": "c1", "tool": tool, "arguments": {"expression": "6*7"}}
    return Event(type="approval_required", data=json.dumps(data), id=str(event_id))


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["y"], [("decide", (7, 11), {"approve": True})]),
        (["", "maybe", "yes"], [("decide", (7, 11), {"approve": True})]),
        (["n", "too risky"], [("decide", (7, 11), {"approve": False, "reason": "too risky"})]),
        (
            ["e", "{not json", '{"expression": "2*21"}'],
            [("decide", (7, 11), {"approve": True, "arguments": {"expression": "2*21"}})],
        ),
        (["e", ""], [("decide", (7, 11), {"approve": True, "arguments": {"expression": "6*7"}})]),
        (["a"], [("approve_all", (7, ["calculator"]), {})]),
    ],
)
def test_approval_answers_become_decisions(answers, expected):
    api = RecordingApi()
    chat, out, script = _chat(api, *answers)
    chat.show(_approval_event())
    assert api.calls == expected
    assert script.prompts[0] == "  approve? [y]es / [n]o / [e]dit / [a]ll: "


def test_after_approve_all_a_tools_calls_are_not_asked_about():
    api = RecordingApi()
    chat, _out, script = _chat(api, "a")
    chat.show(_approval_event(5))
    chat.show(_approval_event(9))
    assert len(script.prompts) == 1 and [c[0] for c in api.calls] == ["approve_all"]


def test_a_resumed_chat_asks_only_about_approvals_still_pending():
    api = RecordingApi()
    chat, _out, script = _chat(api, "y")
    chat.replay_until, chat.pending_at_start = 20, {12}
    chat.show(_approval_event(5))  # approval 11: decided before we came
    assert script.prompts == [] and api.calls == []


def test_ctrl_c_interrupts_the_turn_and_a_second_one_soon_after_leaves():
    now = [100.0]
    api = RecordingApi()
    chat, out, _script = _chat(api, clock=lambda: now[0])
    chat.ctrl_c()
    assert [c[0] for c in api.calls] == ["interrupt"]
    now[0] += chat_module.INTERRUPT_WINDOW + 1  # a while later: interrupts again
    chat.ctrl_c()
    now[0] += chat_module.INTERRUPT_WINDOW / 2
    with pytest.raises(chat_module.Leave) as left:
        chat.ctrl_c()
    assert left.value.code == 130 and [c[0] for c in api.calls] == ["interrupt", "interrupt"]


def test_following_a_turn_ends_when_the_session_is_ready_again():
    chat, out, _script = _chat(RecordingApi())
    frames = [
        ("ready", {"session": 7}),  # the session opened: no turn yet, keep going
        ("processing", {"run": 3, "turn": 1}),
        ("assistant_chunk", {"run": 3, "step": 1, "text": "Hel"}),
        ("assistant_chunk", {"run": 3, "step": 1, "text": "lo"}),
        ("tool_call", {"run": 3, "call_id": "c", "tool": "calculator", "arguments": {"expression": "1"}}),
        ("tool_output", {"run": 3, "call_id": "c", "tool": "calculator", "result": "1", "error": ""}),
        ("turn_complete", {"run": 3, "turn": 1, "status": "succeeded", "output": "Hello"}),
        ("ready", {"session": 7}),
        ("processing", {"run": 4, "turn": 2}),  # after the end: not shown by this follow
    ]
    for number, (kind, data) in enumerate(frames, 1):
        chat.events.put(Event(type=kind, data=json.dumps(data), id=str(number)))
    chat.follow()
    assert out.text == 'agent> Hello\n  [tool] calculator {"expression": "1"}\n  [tool] calculator -> 1\n'
    assert chat.events.qsize() == 1


def test_terminal_escapes_in_what_the_agent_or_a_tool_sends_are_never_written_raw():
    """A model's answer or a tool's result (a fetched page, a webhook's answer) is text
    someone else chose: an escape sequence in it could clear the screen, retitle the
    window or draw a fake approval line above the real prompt. Control characters other
    than line breaks and tabs are written as "?"."""
    chat, out, _script = _chat(RecordingApi())
    hostile = "\x1b[2J\x1b]0;pwned\x07ok\r  [approval] calculator approved\x9b31m"
    frames = [
        ("processing", {"run": 3, "turn": 1}),
        ("assistant_chunk", {"run": 3, "step": 1, "text": f"line one\n{hostile}\tend"}),
        ("tool_output", {"run": 3, "call_id": "c", "tool": "http_fetch\x1b[8m", "result": hostile, "error": ""}),
        ("error", {"run": 3, "turn": 1, "error": hostile}),
        ("ready", {"session": 7}),
    ]
    for number, (kind, data) in enumerate(frames, 1):
        chat.events.put(Event(type=kind, data=json.dumps(data), id=str(number)))
    chat.follow()
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out.text), repr(out.text)
    assert "line one\n?[2J?]0;pwned?ok?  [approval] calculator approved?31m\tend" in out.text
