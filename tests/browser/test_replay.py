"""A replay started from a run's page in a real browser (uvicorn, Channels, a real Celery
worker, the real mistralai SDK against a local Mistral-speaking server), then its diff
with the original read on the compare page."""

from __future__ import annotations

import pytest

from agentops.scoping import organization_scope
from runs.execution import run_execute, run_start
from runs.models import Run
from runs.services.agents import agent_create
from tests.browser.conftest import chromium_page
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in
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
        run_execute(run_id=source.pk)
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
        page.wait_for_function(
            "document.querySelector('#run-header .run-status').textContent.trim() === 'Succeeded'", timeout=30_000
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
