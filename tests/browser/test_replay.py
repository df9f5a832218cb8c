"""A replay started from a run's page in a real browser (uvicorn, Channels, a real Celery
worker, the real mistralai SDK against a local Mistral-speaking server), then its diff
with the original read on the compare page."""

from __future__ import annotations

import time

import pytest

from agentops.scoping import organization_scope
from runs.execution import run_execute, run_start
from runs.models import Run
from runs.services.agents import agent_create
from tests.browser.conftest import chromium_page, wait_until
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in, _wait_live
from tests.fake_mistral import completion

pytestmark = pytest.mark.browser


def test_member_replays_a_run_from_its_page_and_reads_the_diff(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    fake_mistral,
    tenant,
    artifacts_dir,
):
    # The original: the calculator, then an answer.
    fake_mistral.reply(completion(tool_calls=[("call_1", "calculator", {"expression": "6*7"})]))
    fake_mistral.reply(completion(content="The answer is 42, computed with the calculator."))
    with organization_scope(tenant.organization):
        fake_mistral.serve(tenant.organization)
        agent = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="calc",
            model="mistral-large-latest",
            tools=["calculator"],
        )
        source = run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6*7?")
        # Executed here, unless the worker (up for the replay) claimed it first: then its end
        # is awaited (a hang guard, not a pace).
        run_execute(run_id=source.pk)
        deadline = time.monotonic() + 60
        while Run.objects.get(pk=source.pk).status not in Run.ENDED and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Run.objects.get(pk=source.pk).status == "succeeded"
    # The replay, with a hotter model: the same tool call (served from the recording), another answer.
    fake_mistral.reply(completion(tool_calls=[("x", "calculator", {"expression": "6*7"})]))
    fake_mistral.reply(completion(content="It is 42."))

    base = f"{asgi_server}/o/acme/p/agent/runs"
    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{base}/{source.pk}/")
        errors = _console_errors(page)
        page.locator("#replay-start > summary").click()
        page.fill("#replay_temperature", "1.2")
        page.fill("#replay_random_seed", "7")
        assert page.locator("#replay_tool_mode_0").is_checked(), "recorded tools by default"
        page.screenshot(path=str(artifacts_dir / "replay-form.png"), full_page=True)
        page.click("#replay-button")

        # The replay's page opens; it runs on the worker and ends without a reload.
        page.wait_for_url(f"{base}/*/")
        assert f"/{source.pk}/" not in page.url
        assert "Replay of" in page.locator("#replay-source").inner_text()
        wait_until(
            page, "document.querySelector('#run-header .run-status').textContent.trim() === 'Succeeded'", timeout=30_000
        )

        page.click("#compare-with-source")
        page.wait_for_selector("#compare-steps")
        # The first model call and the calculator are the same, the answer changed.
        summary = page.locator("#compare-steps-summary").inner_text().lower()
        assert "2 same" in summary and "1 changed" in summary and "0 added" in summary, summary
        assert page.locator("#pair-3 .diff-kind").first.inner_text().lower() == "changed"
        inline = page.locator("#compare-output-inline")
        assert inline.locator("del").count() > 0 and inline.locator("ins").count() > 0
        assert "It" in " ".join(inline.locator("ins").all_inner_texts())
        assert page.locator("#metric-step_count").count() == 1
        assert errors == []
        page.screenshot(path=str(artifacts_dir / "replay-compare.png"), full_page=True)

    with organization_scope(tenant.organization):
        replay = Run.objects.get(replay_of=source)
    assert replay.status == "succeeded" and replay.output == "It is 42."
    bodies = [request["body"] for request in fake_mistral.requests[2:]]
    assert [body["temperature"] for body in bodies] == [1.2, 1.2] and bodies[0]["random_seed"] == 7


@pytest.fixture
def gated_offline_model(monkeypatch):
    """The offline model, answering only once the test opens the gate: the run is
    certainly still going when its page opens, however fast the machine."""
    import threading

    from agentops.llm.offline import OfflineProvider

    gate = threading.Event()
    answer = OfflineProvider.chat

    def gated_chat(self, **kwargs):
        assert gate.wait(60), "the test never let the model answer"
        return answer(self, **kwargs)

    # The worker runs in a thread of this process (tests/conftest.py), so the patch reaches it.
    monkeypatch.setattr(OfflineProvider, "chat", gated_chat)
    yield gate
    gate.set()


def test_the_replay_form_appears_when_the_run_ends_while_its_page_is_open(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    gated_offline_model,
    tenant,
    artifacts_dir,
):
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project, actor=tenant.member, name="calc", model="offline", tools=["calculator"]
        )
        run = run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6*7?")

    base = f"{asgi_server}/o/acme/p/agent/runs"
    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{base}/{run.pk}/")
        errors = _console_errors(page)
        _wait_live(page)
        page.evaluate("window.__not_reloaded = true")
        assert page.locator("#run-header .run-status").inner_text().strip() in ("Queued", "Running")
        assert page.locator("#replay-start").count() == 0, "no replay of a run still going"

        gated_offline_model.set()

        wait_until(page, "document.querySelector('#run-header .run-status').textContent.trim() === 'Succeeded'", 30_000)
        page.locator("#replay-start").wait_for()
        assert page.evaluate("window.__not_reloaded") is True
        # The form that arrived works: a replay starts from it.
        page.locator("#replay-start > summary").click()
        assert page.locator("#replay_model").input_value() == "offline"
        page.screenshot(path=str(artifacts_dir / "replay-form-live.png"), full_page=True)
        page.click("#replay-button")
        page.wait_for_url(f"{base}/*/")
        assert f"/{run.pk}/" not in page.url
        assert "Replay of" in page.locator("#replay-source").inner_text()
        assert errors == []

    with organization_scope(tenant.organization):
        assert Run.objects.filter(replay_of=run).count() == 1
