"""The chat page of a session in a real browser, against the real ASGI application
(uvicorn, the session's Server-Sent Events stream over the real Redis), a real Celery
worker executing each turn, and a local server speaking Mistral's API: a session
started from the page, answers streaming in, tool calls approved, edited, rejected and
approved for the whole session, a refused message shown, a turn interrupted, undone,
the conversation compacted, and reloads that show the same conversation and go on
following it."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from agentops.scoping import organization_scope
from runs.models import Run, Session
from runs.services.agents import agent_create
from runs.services.sessions import session_create
from tests.browser.conftest import chromium_page, wait_until
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in
from tests.fake_mistral import completion

pytestmark = pytest.mark.browser


def turn(number: int) -> str:
    return f"document.querySelector(\"#chat-turns > .chat-turn[data-turn='{number}']\")"


def state_is(page, number: int, state: str) -> None:
    wait_until(page, f"{turn(number)}.dataset.state === '{state}'", timeout=60_000)


def answer_of(page, number: int) -> str:
    return page.evaluate(
        f"Array.from({turn(number)}.querySelectorAll('.chat-answer')).map(a => a.textContent).join('|')"
    )


def send(page, text: str) -> None:
    page.fill("#chat-message", text)
    page.click("#chat-send")


def calls(call_id: str):
    return completion(tool_calls=[(call_id, "calculator", {"expression": "6 * 7"})])


def test_a_session_in_the_chat_page(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    fake_mistral,
    tenant,
    settings,
    artifacts_dir,
):
    story = " ".join(f"word{index}" for index in range(60)) + " <end>"
    fake_mistral.reply(completion(content=story), delay=1.0, chunk_delay=0.15)  # turn 1
    fake_mistral.reply(calls("c1"))  # turn 2: approved as asked
    fake_mistral.reply(completion(content="It is 42."))
    fake_mistral.reply(calls("c2"))  # turn 3: edited, then approved
    fake_mistral.reply(completion(content="Edited: 42."))
    fake_mistral.reply(calls("c3"))  # turn 4: rejected
    fake_mistral.reply(completion(content="Fine, in my head: 42."))
    fake_mistral.reply(calls("c4"))  # turn 5: approved for the whole session
    fake_mistral.reply(completion(content="All approved."))
    long_story = " ".join(f"slow{index}" for index in range(120))
    fake_mistral.reply(completion(content=long_story), chunk_delay=0.3)  # turn 6: interrupted, then undone
    summary = " ".join(f"part{index}" for index in range(90)) + " <done>"
    fake_mistral.reply(completion(content=summary), delay=0.5, chunk_delay=0.2)  # turn 7, after compaction
    with organization_scope(tenant.organization):
        fake_mistral.serve(tenant.organization)
        agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="calculating-writer",
            model="mistral-large-latest",
            tools=["calculator"],
            approval_tools=["calculator"],
        )

    base = f"{asgi_server}/o/acme/p/agent/runs/chat"
    with chromium_page() as page:
        page.on("dialog", lambda dialog: dialog.accept())
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{asgi_server}/o/acme/p/agent/")
        page.click("#nav-chat")
        page.wait_for_url(f"{base}/")
        page.select_option("#chat-new-agent", label="calculating-writer (version 1)")
        page.fill("#chat-new-title", "Arithmetic and stories")
        page.click("#chat-new-button")
        page.wait_for_url(f"{base}/*/")
        errors = _console_errors(page)  # a Content-Security-Policy violation is one too
        page.on("pageerror", lambda error: errors.append(f"script error: {error}"))
        page.evaluate("window.__not_reloaded = true")
        wait_until(page, "document.getElementById('chat-connection').dataset.state === 'open'")
        assert "Arithmetic and stories" in page.locator("#chat-session-list [aria-current=page]").inner_text()

        # Turn 1: the answer streams in as the model writes it.
        send(page, "Write sixty words.")
        wait_until(page, f"{turn(1)}.querySelector('.chat-answer').textContent.includes('word5 ')", timeout=30_000)
        assert "<end>" not in answer_of(page, 1), "part of the answer shows while the model writes"
        page.screenshot(path=str(artifacts_dir / "chat-streaming.png"), full_page=True)
        state_is(page, 1, "succeeded")
        wait_until(page, f"{turn(1)}.querySelector('.chat-answer').textContent.includes('<end>')")
        assert answer_of(page, 1).split() == story.split(), "the whole answer once, in order"
        assert page.evaluate("document.getElementById('chat-message').value") == "", "the composer is emptied"

        # Turn 2: a call that needs approval; the page is reloaded while it waits, then approved.
        send(page, "What is 6 * 7?")
        state_is(page, 2, "waiting")
        page.screenshot(path=str(artifacts_dir / "chat-approval.png"), full_page=True)
        page.reload()
        wait_until(page, "document.getElementById('chat-connection').dataset.state === 'open'")
        assert answer_of(page, 1).split() == story.split(), "the same conversation after the reload"
        assert page.locator("#chat-turns > .chat-turn[data-turn='2'] .chat-tool.is-pending").count() == 1
        page.locator("#chat-turns > .chat-turn[data-turn='2'] .chat-approve").click()
        state_is(page, 2, "succeeded")  # followed live after the reload
        second = page.locator("#chat-turns > .chat-turn[data-turn='2']")
        assert "Approved by member@acme.example.com" in second.locator(".chat-approval-state").inner_text()
        assert '"result": 42' in second.locator(".chat-tool-output").inner_text()
        assert answer_of(page, 2) == "It is 42."

        # Turn 3: the arguments edited, then approved.
        send(page, "Again, differently.")
        state_is(page, 3, "waiting")
        third = page.locator("#chat-turns > .chat-turn[data-turn='3']")
        third.locator(".chat-edit > summary").click()
        third.locator("textarea[name=arguments]").fill('{"expression": "2 * 21"}')
        third.locator(".chat-approve-edited").click()
        state_is(page, 3, "succeeded")
        assert "with edited arguments" in third.locator(".chat-approval-state").inner_text()
        assert "2 * 21" in third.locator(".chat-tool-arguments").inner_text()

        # Turn 4: rejected with a reason the model is told.
        send(page, "Once more.")
        state_is(page, 4, "waiting")
        fourth = page.locator("#chat-turns > .chat-turn[data-turn='4']")
        fourth.locator("input[name=reason]").fill("do it in your head")
        fourth.locator(".chat-reject-button").click()
        state_is(page, 4, "succeeded")
        assert "Rejected" in fourth.locator(".chat-approval-state").inner_text()
        assert "do it in your head" in fourth.locator(".chat-tool-reason").inner_text()

        # Turn 5: every calculator call of the session approved, then revoked.
        send(page, "And again.")
        state_is(page, 5, "waiting")
        page.locator("#chat-turns > .chat-turn[data-turn='5'] .chat-approve-tool").click()
        state_is(page, 5, "succeeded")
        assert "calculator" in page.locator("#chat-approve-all").inner_text()
        page.click("#chat-revoke-all")
        page.wait_for_selector("#chat-approve-every-tool")

        # Turn 6: interrupted while it streams; a message past the full queue is refused, in words.
        send(page, "Tell me a long story.")
        wait_until(page, f"{turn(6)}.querySelector('.chat-answer').textContent.includes('slow3 ')", timeout=30_000)
        settings.SESSION_MAX_QUEUED = 0
        send(page, "One more thing")
        wait_until(page, "!document.getElementById('chat-notice').hidden")
        assert "already wait" in page.locator("#chat-notice").inner_text()
        page.click("#chat-interrupt")
        state_is(page, 6, "interrupted")
        assert "slow119" not in answer_of(page, 6), "the answer stopped where it was"

        # Undo: the interrupted turn leaves the conversation.
        page.click("#chat-undo")
        wait_until(page, f"{turn(6)}.classList.contains('is-undone')")

        # Compact now: the next turn compacts first; the page is reloaded while it streams.
        page.click("#chat-compact")
        page.wait_for_selector("#chat-compact-requested")
        send(page, "Sum it all up.")
        wait_until(page, f"{turn(7)}.querySelector('.chat-note[data-kind=compacted]') !== null", timeout=30_000)
        wait_until(page, f"{turn(7)}.querySelector('.chat-answer').textContent.includes('part3 ')", timeout=30_000)
        before = page.evaluate("Array.from(document.querySelectorAll('.chat-turn')).map(t => t.dataset.state)")
        page.reload()
        wait_until(page, "document.getElementById('chat-connection').dataset.state === 'open'")
        after = page.evaluate("Array.from(document.querySelectorAll('.chat-turn')).map(t => t.dataset.state)")
        assert after[:6] == before[:6] == ["succeeded"] * 5 + ["interrupted"]
        assert page.locator("#chat-turns > .chat-turn.is-undone").count() == 1
        state_is(page, 7, "succeeded")
        wait_until(page, f"{turn(7)}.querySelector('.chat-answer').textContent.includes('<done>')")
        assert answer_of(page, 7).split() == summary.split(), "no piece missed or shown twice across the reload"
        page.screenshot(path=str(artifacts_dir / "chat-session.png"), full_page=True)

        # Each turn links its run page.
        page.locator("#chat-turns > .chat-turn[data-turn='2'] .chat-run-link").click()
        page.wait_for_selector("#run-header")
        assert "turn 2 of session" in page.locator("#run-chat-session").inner_text()
        refused = [error for error in errors if "status of 429" not in error]
        assert refused == [], "no script error (the refused message's 429 is the only failed request)"

    with organization_scope(tenant.organization):
        session = Session.objects.get(title="Arithmetic and stories")
        turns = list(Run.objects.filter(agent_session=session).order_by("turn").values_list("turn", "undone"))
    assert turns == [(1, False), (2, False), (3, False), (4, False), (5, False), (6, True), (7, False)]
    rejected = [
        message["content"]
        for request in fake_mistral.requests
        for message in request["body"].get("messages", [])
        if message.get("role") == "tool"
    ]
    assert any("a person rejected this call: do it in your head" in content for content in rejected)
    assert any(json.loads(content).get("result") == 42 for content in rejected if content.startswith("{"))


class RestartableServer:
    """The ASGI application under uvicorn on one loopback port, which a test can stop
    (its open streams cut, as when a web process dies) and start again on the same port."""

    def __init__(self):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = self.thread = None

    def start(self) -> None:
        import uvicorn

        from agentops.asgi import application

        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            lifespan="off",
            log_level="warning",
            timeout_graceful_shutdown=1,  # open event streams never end by themselves
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture
def restartable_server(transactional_db):
    server = RestartableServer()
    server.start()
    yield server
    server.stop()


def test_the_chat_resumes_after_its_connection_is_lost_mid_answer(
    restartable_server, celery_worker, fake_mistral, tenant
):
    answer = " ".join(f"part{index}" for index in range(90)) + " <done>"
    fake_mistral.reply(completion(content=answer), delay=0.5, chunk_delay=0.2)
    with organization_scope(tenant.organization):
        fake_mistral.serve(tenant.organization)
        agent = agent_create(project=tenant.project, actor=tenant.member, name="writer", model="mistral-large-latest")
        session = session_create(project=tenant.project, agent=agent, actor=tenant.member, title="Resumed")

    server = restartable_server
    with chromium_page() as page:
        _sign_in(page, server.url, tenant.member)
        page.goto(f"{server.url}/o/acme/p/agent/runs/chat/{session.pk}/")
        script_errors = []
        page.on("pageerror", lambda error: script_errors.append(str(error)))
        page.evaluate("window.__not_reloaded = true")
        wait_until(page, "document.getElementById('chat-connection').dataset.state === 'open'")
        send(page, "Write ninety words.")
        wait_until(page, f"{turn(1)}.querySelector('.chat-answer').textContent.includes('part3 ')", timeout=30_000)

        server.stop()  # the stream is cut while the model goes on writing
        wait_until(page, "document.getElementById('chat-connection').dataset.state === 'retrying'")
        server.start()
        wait_until(page, "document.getElementById('chat-connection').dataset.state === 'open'")

        state_is(page, 1, "succeeded")
        wait_until(page, f"{turn(1)}.querySelector('.chat-answer').textContent.includes('<done>')")
        assert answer_of(page, 1).split() == answer.split(), "nothing missed or shown twice across the cut"
        assert page.evaluate("window.__not_reloaded") is True, "the page resumed by itself"
        assert script_errors == []
