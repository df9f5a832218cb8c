"""Streaming: an executed run asks the model for a streamed answer (the real mistralai
SDK reading server-sent events from a local Mistral-speaking server), stores the whole
answer as its llm step, and sends the text to the run's open pages as it is written."""

import html
import re

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connections

from agentops.llm.mistral import MistralProvider
from agentops.llm.offline import OfflineProvider
from agentops.routing import websocket_urlpatterns
from agentops.scoping import organization_scope
from runs.execution import run_execute, run_start
from runs.models import Run, Step
from runs.services.agents import agent_create
from tests.fake_mistral import completion

ANSWER = "The answer is <b>42</b> & that is final, said the model in many small pieces."


def _provider(fake_mistral):
    return MistralProvider(api_key="sk-test", base_url=fake_mistral.url, retry_max_elapsed_ms=2000)


def _chat(provider, on_text=None):
    return provider.chat(
        model="mistral-large-latest",
        messages=[{"role": "user", "content": "hi"}],
        tools=[],
        parameters={"temperature": 0.2},
        timeout_ms=5000,
        on_text=on_text,
    )


def test_a_streamed_answer_is_put_together_as_a_complete_one(fake_mistral):
    body = completion(content=ANSWER, prompt_tokens=33, completion_tokens=17)
    fake_mistral.reply(body)
    fake_mistral.reply(body)
    pieces: list[str] = []
    streamed = _chat(_provider(fake_mistral), on_text=pieces.append)
    whole = _chat(_provider(fake_mistral))
    assert fake_mistral.requests[0]["body"]["stream"] is True
    assert not fake_mistral.requests[1]["body"].get("stream")
    assert len(pieces) > 3 and "".join(pieces) == ANSWER
    for field in ("content", "tool_calls", "finish_reason", "model", "input_tokens", "output_tokens"):
        assert getattr(streamed, field) == getattr(whole, field), field
    assert streamed.raw["usage"]["prompt_tokens"] == 33 and streamed.raw["streamed"] is True


def test_streamed_tool_calls_arrive_with_their_arguments(fake_mistral):
    fake_mistral.reply(
        completion(
            content="Let me compute.",
            tool_calls=[("c1", "calculator", {"expression": "6*7"}), ("c2", "current_time", {"timezone": "UTC"})],
        )
    )
    pieces: list[str] = []
    result = _chat(_provider(fake_mistral), on_text=pieces.append)
    assert result.tool_calls == [
        {"id": "c1", "name": "calculator", "arguments": {"expression": "6*7"}},
        {"id": "c2", "name": "current_time", "arguments": {"timezone": "UTC"}},
    ]
    assert result.finish_reason == "tool_calls" and "".join(pieces) == "Let me compute."


def test_a_stream_slower_than_the_call_time_limit_fails_the_call(fake_mistral):
    from agentops.llm.base import ProviderError

    fake_mistral.reply(completion(content=ANSWER), chunk_delay=0.3)
    provider = _provider(fake_mistral)
    with pytest.raises(ProviderError, match="longer than the call's time limit"):
        provider.chat(
            model="mistral-large-latest",
            messages=[{"role": "user", "content": "hi"}],
            tools=[],
            parameters={},
            timeout_ms=700,
            on_text=lambda piece: None,
        )


def test_the_offline_model_streams_its_answer_too():
    pieces: list[str] = []
    result = OfflineProvider().chat(
        model="offline", messages=[{"role": "user", "content": "hello there"}], tools=[], parameters={}, timeout_ms=1
    )
    streamed = OfflineProvider().chat(
        model="offline",
        messages=[{"role": "user", "content": "hello there"}],
        tools=[],
        parameters={},
        timeout_ms=1,
        on_text=pieces.append,
    )
    assert streamed.content == result.content and "".join(pieces) == result.content and len(pieces) >= 2


@pytest.fixture
async def _close_worker_thread_connections():
    yield
    await sync_to_async(connections.close_all)()


def _start_streaming_run(tenant, fake_mistral) -> Run:
    fake_mistral.reply(completion(content=ANSWER), chunk_delay=0.02)
    with organization_scope(tenant.organization):
        fake_mistral.serve(tenant.organization)
        agent = agent_create(project=tenant.project, actor=tenant.member, name="talker", model="mistral-large-latest")
        return run_start(project=tenant.project, agent=agent, actor=tenant.member, input="Say something.")


def _execute(run: Run) -> Run:
    with organization_scope(run.organization_id):
        run_execute(run_id=run.pk)
        return Run.objects.get(pk=run.pk)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_close_worker_thread_connections")
async def test_the_run_page_receives_the_answer_as_it_is_written(tenant, fake_mistral):
    run = await sync_to_async(_start_streaming_run)(tenant, fake_mistral)
    page = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/o/acme/p/{tenant.project.slug}/?topics=run:{run.pk}"
    )
    page.scope["user"] = tenant.viewer
    connected, _ = await page.connect()
    assert connected
    finished = await sync_to_async(_execute)(run)
    assert finished.status == "succeeded" and finished.output == ANSWER

    stream_messages = []
    while not await page.receive_nothing(timeout=0.5):
        message = await page.receive_from()
        if f"run-stream-text-{run.pk}" in message or f"run-stream-state-{run.pk}" in message:
            stream_messages.append(message)
    await page.disconnect()

    # The first message opens the box, later ones append to it (or, now and then, hold all
    # the text so far), and the last says the model answered.
    assert f'id="run-stream-{run.pk}" hx-swap-oob="true"' in stream_messages[0]
    assert any('hx-swap-oob="beforeend"' in message for message in stream_messages[1:-1])
    assert "answered (step 1)" in stream_messages[-1]
    shown = _page_text(run.pk, stream_messages[:-1])
    # The text arrives whole and in order, escaped (the model's text never becomes markup).
    assert "<b>" not in shown and "&lt;b&gt;42&lt;/b&gt;" in shown
    assert html.unescape(shown) == ANSWER


def _page_text(run_id: int, messages: list[str]) -> str:
    """The text a run page shows after ``messages``, swapped as htmx does: a box
    replaces what was shown, a ``beforeend`` piece is appended to it."""
    shown = None
    for message in messages:
        pieces = "".join(re.findall(r"<span>(.*?)</span>", message, re.S))
        if f'id="run-stream-{run_id}" hx-swap-oob="true"' in message:
            shown = pieces
        elif shown is not None:  # a piece with no box to append to is dropped, as htmx does
            shown += pieces
    return shown or ""


def test_a_page_opened_mid_answer_catches_up_with_the_next_whole_box(tenant, monkeypatch):
    from agentops import live
    from runs.live import TextStream

    sent: list[str] = []
    monkeypatch.setattr(live, "has_listeners", lambda **kwargs: True)
    monkeypatch.setattr(live, "announce", lambda **kwargs: sent.append(kwargs["html"]))
    run = Run(pk=7, project=tenant.project)
    clock = iter(float(second) for second in range(100))
    monkeypatch.setattr("runs.live.time.monotonic", lambda: next(clock) / 4)  # a quarter second a piece
    stream = TextStream(run=run, step=2, model="m", interval=0, snapshot_every=1.0)
    words = ["One ", "two ", "three ", "four ", "five ", "six ", "<seven>"]
    for word in words:
        stream.write(word)
    stream.close()
    boxes = [index for index, message in enumerate(sent) if 'id="run-stream-7" hx-swap-oob="true"' in message]
    assert boxes[0] == 0 and len(boxes) >= 2, "a whole box again after a second"
    # A page that missed everything before the second box still ends with the whole text.
    assert html.unescape(_page_text(7, sent[boxes[1] : -1])) == "".join(words)
    assert html.unescape(_page_text(7, sent[:-1])) == "".join(words)
    assert "&lt;seven&gt;" in sent[-2] and "answered (step 2)" in sent[-1]


@pytest.mark.django_db(transaction=True)
def test_with_no_page_open_nothing_is_streamed_but_the_answer_is_stored(tenant, fake_mistral, monkeypatch):
    from agentops import live

    sent = []
    monkeypatch.setattr(live, "announce", lambda **kwargs: sent.append(kwargs["event"]))
    run = _start_streaming_run(tenant, fake_mistral)
    finished = _execute(run)
    assert finished.status == "succeeded" and finished.output == ANSWER
    assert "runs.stream" not in sent
    with organization_scope(tenant.organization):
        llm = Step.objects.get(run=run, kind="llm")
    assert llm.output["choices"][0]["message"]["content"] == ANSWER
    assert fake_mistral.requests[0]["body"]["stream"] is True


def test_a_page_opened_after_the_answer_began_still_gets_it(tenant, monkeypatch):
    from agentops import live
    from runs.live import TextStream

    sent: list[str] = []
    open_pages = {"count": 0}
    monkeypatch.setattr(live, "has_listeners", lambda **kwargs: open_pages["count"] > 0)
    monkeypatch.setattr(live, "announce", lambda **kwargs: sent.append(kwargs["html"]))
    clock = iter(float(second) for second in range(100))
    monkeypatch.setattr("runs.live.time.monotonic", lambda: next(clock) / 4)
    stream = TextStream(run=Run(pk=8, project=tenant.project), step=1, model="m", interval=0, snapshot_every=1.0)
    stream.write("Before ")
    stream.write("the page ")
    assert sent == [], "nobody is watching"
    open_pages["count"] = 1
    for word in ("opened, ", "and ", "after."):
        stream.write(word)
    stream.close()
    assert sent and 'id="run-stream-8" hx-swap-oob="true"' in sent[0]
    assert html.unescape(_page_text(8, sent[:-1])) == "Before the page opened, and after."
