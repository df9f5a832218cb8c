"""Ask about this run, in a real browser against the real ASGI application with a real
Celery worker answering on the offline analyst: the answer streams in from the answer
run's event stream, then shows with its step links, and is there again after a reload."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command

from agentops.scoping import organization_scope
from assistant.analyst.offline import OfflineAnalyst
from runs.models import Run, Step
from tests.browser.conftest import chromium_page, wait_until
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in

pytestmark = pytest.mark.browser

# The offline analyst writes its answer at once. Here its first piece goes out, then the
# rest waits until the test has seen that piece on the page: the text seen before the end
# can only have streamed in, whatever the machine's speed.


@pytest.fixture
def slow_offline_analyst(monkeypatch):
    answer = OfflineAnalyst.chat
    first_piece_seen = threading.Event()

    def slow_chat(self, *, on_text=None, **kwargs):
        pieces = 0

        def held(piece):
            nonlocal pieces
            on_text(piece)
            pieces += 1
            if pieces == 1:
                first_piece_seen.wait(timeout=120)  # a hang guard, not a pace

        return answer(self, on_text=held if on_text else None, **kwargs)

    # The worker runs in a thread of this process (tests/conftest.py), so the patch reaches it.
    monkeypatch.setattr(OfflineAnalyst, "chat", slow_chat)
    yield first_piece_seen
    first_piece_seen.set()


def test_a_member_asks_about_a_run_and_the_answer_streams_in_with_step_links(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    slow_offline_analyst,
    tenant,
    artifacts_dir,
):
    with organization_scope(tenant.organization):
        call_command("seed_demo_runs", "acme/agent", verbosity=0)
        run = Run.objects.get(project=tenant.project, status="failed", executed=False)
        failed_step = Step.objects.get(run=run, kind="tool", status="error")
    run_page = f"{asgi_server}/o/acme/p/agent/runs/{run.pk}/"
    panel = f"#run-analyst-{run.pk}"

    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)
        errors = _console_errors(page)
        page.goto(run_page)
        page.wait_for_selector(f"{panel} textarea[name=question]")
        page.fill(f"{panel} textarea[name=question]", "Why did this run fail?")
        page.click(f"{panel} button:has-text('Ask')")

        # Streaming: part of the answer is on the page while the panel still follows the stream.
        wait_until(
            page,
            "document.querySelector('[data-stream-text]') && "
            "document.querySelector('[data-stream-text]').textContent.includes('Offline analyst')",
        )
        assert page.locator(f"{panel} [data-event-stream]").count() == 1
        page.screenshot(path=str(artifacts_dir / "analyst-streaming.png"), full_page=True)
        slow_offline_analyst.set()  # the rest of the answer may come

        # Ended: the panel comes again, the answer in full with its citations as links.
        link = f"{panel} a.analyst-cite[href$='#step-row-{failed_step.pk}']"
        page.wait_for_selector(link)
        assert page.locator(f"{panel} [data-event-stream]").count() == 0
        assert "[step:" not in page.locator(panel).inner_text()
        page.screenshot(path=str(artifacts_dir / "analyst-answered.png"), full_page=True)

        # The link goes to the step on the run page.
        href = page.locator(link).first.get_attribute("href")
        page.goto(href if href.startswith("http") else f"{asgi_server}{href}")
        page.wait_for_selector(f"#step-row-{failed_step.pk}.is-selected")
        # ... and stays selected when something on the page is swapped (a live update, the
        # analyst's panel), which re-renders the tree's selection.
        page.evaluate("document.body.dispatchEvent(new CustomEvent('htmx:afterSettle', {bubbles: true}))")
        assert page.locator(f"#step-row-{failed_step.pk}.is-selected").count() == 1

        # And the question stays on the run.
        page.goto(run_page)
        page.wait_for_selector(link)
        assert "Why did this run fail?" in page.locator(panel).inner_text()
        assert errors == []
