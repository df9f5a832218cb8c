"""An agent created and run from the pages, in a real browser against the real ASGI
application (uvicorn, Channels over the real Redis layer) with a real Celery worker
executing the run: its steps and its answer appear on the run's page without a reload."""

from __future__ import annotations

import time

import pytest

from agentops.llm.offline import OfflineProvider
from agentops.scoping import organization_scope
from runs.models import Agent, Run, Step
from tests.browser.conftest import chromium_page, wait_until
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in, _wait_live

pytestmark = pytest.mark.browser

# The offline model answers in about a millisecond: the whole run would be over before
# its page opened. Slowed to this per call, the run is still going when the page loads,
# so what the test sees arrive can only have arrived live.
MODEL_CALL_SECONDS = 1.0


@pytest.fixture
def slow_offline_model(monkeypatch):
    answer = OfflineProvider.chat

    def slow_chat(self, **kwargs):
        time.sleep(MODEL_CALL_SECONDS)
        return answer(self, **kwargs)

    # The worker runs in a thread of this process (tests/conftest.py), so the patch reaches it.
    monkeypatch.setattr(OfflineProvider, "chat", slow_chat)


def test_member_creates_an_agent_starts_a_run_and_watches_it_live(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    slow_offline_model,
    tenant,
    artifacts_dir,
):
    base = f"{asgi_server}/o/acme/p/agent/runs"
    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)

        # A new agent, through the form: the offline model and the calculator.
        page.goto(f"{base}/agents/")
        page.fill("input[name=name]", "calculator-bot")
        page.fill("textarea[name=description]", "Answers arithmetic questions with the calculator.")
        page.fill("input[name=model]", "offline")
        page.fill("textarea[name=system_prompt]", "Use the calculator for any arithmetic.")
        page.check("input[name=tools][value=calculator]")
        page.screenshot(path=str(artifacts_dir / "agents-new.png"), full_page=True)
        page.click("button:has-text('Create agent')")
        page.wait_for_url(f"{base}/agents/*/")
        assert "was created (version 1)" in page.locator("#messages").inner_text()
        assert "calculator" in page.locator("#configuration").inner_text()
        page.screenshot(path=str(artifacts_dir / "agent-detail.png"), full_page=True)

        # Start a run from the agent's page: its page opens.
        page.fill("#run_input", "What is 6 * 7?")
        page.click("#start-run-button")
        page.wait_for_url(f"{base}/*/")
        page.evaluate("window.__not_reloaded = true")
        errors = _console_errors(page)
        steps_at_load = page.locator(".trace-row").count()
        status_at_load = page.locator("#run-header .run-status").inner_text()
        _wait_live(page)

        # Steps arrive as the worker stores them: a model call, then the calculator.
        page.wait_for_selector(".trace-row[data-kind='llm']")
        page.screenshot(path=str(artifacts_dir / "agent-run-live-running.png"), full_page=True)
        page.wait_for_selector(".trace-row[data-kind='tool']")
        wait_until(
            page, "document.querySelector('#run-header .run-status').textContent.trim() === 'Succeeded'", timeout=30_000
        )
        wait_until(page, "document.querySelector('#run-header .run-io').textContent.includes('42')")

        assert page.evaluate("window.__not_reloaded") is True
        assert status_at_load in ("Queued", "Running"), "the run had not ended when its page opened"
        steps_now = page.locator(".trace-row").count()
        assert steps_now > steps_at_load, "steps arrived after the page loaded"
        assert page.locator(".trace-row[data-kind='llm']").count() == 2
        assert page.locator(".trace-row[data-kind='tool']").count() == 1
        assert page.locator("#run-cancel").count() == 0, "a finished run offers no Cancel"
        assert "version 1" in page.locator("#run-agent-version").inner_text()
        assert errors == []
        page.locator("#run-header .run-io > summary").click()
        page.screenshot(path=str(artifacts_dir / "agent-run-live-done.png"), full_page=True)

        # The agent's page lists the run among its recent runs.
        page.locator("#run-agent-version").click()
        page.wait_for_selector("#agent-runs-table")
        page.evaluate("window.scrollTo(0, 0)")  # the link opens the version's comparison, further down
        assert "Succeeded" in page.locator("#agent-runs-table").inner_text()
        page.screenshot(path=str(artifacts_dir / "agent-detail-with-run.png"), full_page=True)

    with organization_scope(tenant.organization):
        agent = Agent.objects.get(project=tenant.project, name="calculator-bot")
        run = Run.objects.get(project=tenant.project, executed_version__agent=agent)
        kinds = list(Step.objects.filter(run=run).order_by("started_at", "id").values_list("kind", flat=True))
    assert run.status == Run.Status.SUCCEEDED and "42" in run.output
    assert kinds == ["agent", "llm", "tool", "llm"]


def test_webhook_tool_secret_and_a_version_comparison_in_the_browser(
    asgi_server,  # noqa: F811 - the fixture imported above
    tenant,
    artifacts_dir,
):
    from runs.services.agents import agent_create, agent_version_create

    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="support-bot",
            model="offline",
            system_prompt="You answer order questions.\nBe brief.",
            tools=["calculator"],
        )
        agent_version_create(
            agent=agent,
            actor=tenant.member,
            model="mistral-small-latest",
            system_prompt="You answer order questions.\nBe brief and polite.\nNever guess an order status.",
            tools=["calculator", "memory_set"],
            approval_tools=["memory_set"],
            parameters={"temperature": 0.2},
        )

    base = f"{asgi_server}/o/acme/p/agent/runs"
    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)

        page.goto(f"{base}/agents/tools/")
        page.fill("input[name=name]", "lookup_order")
        page.fill("input[name=url]", "https://tools.example.com/lookup-order")
        page.fill("textarea[name=description]", "Looks an order up by its id.")
        page.click("button:has-text('Add tool')")
        secret = page.locator("#tool-secret").inner_text()
        assert secret.startswith("whsec_")
        assert page.locator("#tool-created").is_visible()
        page.screenshot(path=str(artifacts_dir / "webhook-tool-created.png"), full_page=True)
        page.goto(f"{base}/agents/tools/")
        assert secret not in page.content()
        assert "lookup_order" in page.locator("#tools-table").inner_text()

        page.goto(f"{base}/agents/")
        page.locator("#new-agent > summary").click()  # closed: the project has an agent already
        assert "webhook" in page.locator("#new-agent").inner_text()
        page.screenshot(path=str(artifacts_dir / "agents-list.png"), full_page=True)

        page.goto(f"{base}/agents/{agent.pk}/")
        changes = page.locator("#version-changes")
        assert "changed" in changes.locator("[data-field=model]").inner_text().lower()
        assert "+ Never guess an order status." in changes.locator("[data-field=system_prompt]").inner_text()
        page.locator("#edit-agent summary").click()
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(artifacts_dir / "agent-versions.png"), full_page=True)


def test_a_run_page_re_renders_from_the_database_when_its_socket_opens(
    asgi_server,  # noqa: F811 - the fixture imported above
    tenant,
    artifacts_dir,
):
    """Steps stored while the page had no socket (before it opened, or while it was
    dropped) were announced to nobody: the page fetches the run again on every open."""
    from django.utils import timezone

    from runs.events import RunEvent, StepEvent
    from runs.execution import run_start
    from runs.ingest import ingest
    from runs.services.agents import agent_create
    from tests.browser.test_runs_pages import _in_another_thread

    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="calc", model="offline")
        run = run_start(project=tenant.project, agent=agent, actor=tenant.member, input="2 + 2")  # no worker

    def store_unannounced():
        with organization_scope(tenant.organization):
            now = timezone.now()
            ingest(
                project=tenant.project,
                runs=[RunEvent(trace_id=run.trace_id, fields={"status": "running"})],
                steps=[
                    StepEvent(trace_id=run.trace_id, span_id="root", kind="agent", name="calc", started_at=now),
                    StepEvent(
                        trace_id=run.trace_id,
                        span_id="llm-1",
                        parent_span_id="root",
                        kind="llm",
                        name="chat offline",
                        model="offline",
                        started_at=now,
                        ended_at=now,
                        status="ok",
                    ),
                ],
                announce=False,
            )

    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{asgi_server}/o/acme/p/agent/runs/{run.pk}/")
        _wait_live(page)
        page.evaluate("window.__not_reloaded = true")
        assert page.locator(".trace-row").count() == 0
        assert page.locator("#run-cancel").is_visible()

        _in_another_thread(store_unannounced)
        page.wait_for_timeout(500)
        assert page.locator(".trace-row").count() == 0, "nothing was announced"

        # What the ws extension does when the socket (re)opens.
        page.evaluate(
            "document.getElementById('content').dispatchEvent(new CustomEvent('htmx:wsOpen', {bubbles: true}))"
        )
        page.wait_for_selector(".trace-row[data-kind='llm']")
        assert page.locator("#run-header .run-status").inner_text() == "Running"
        assert page.evaluate("window.__not_reloaded") is True


def test_the_answer_streams_onto_the_run_page_as_the_model_writes_it(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    fake_mistral,
    tenant,
    artifacts_dir,
):
    from runs.services.agents import agent_create
    from tests.fake_mistral import completion

    answer = " ".join(f"word{index}" for index in range(60)) + " <end>"
    # The model starts after a second and writes for about two: whether the page is open
    # by then or opens while it writes, it shows the text as it comes.
    fake_mistral.reply(completion(content=answer), delay=1.0, chunk_delay=0.1)
    with organization_scope(tenant.organization):
        fake_mistral.serve(tenant.organization)
        agent = agent_create(project=tenant.project, actor=tenant.member, name="writer", model="mistral-large-latest")

    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{asgi_server}/o/acme/p/agent/runs/agents/{agent.pk}/")
        page.fill("#run_input", "Write sixty words.")
        page.click("#start-run-button")
        page.wait_for_url(f"{asgi_server}/o/acme/p/agent/runs/*/")
        page.evaluate("window.__not_reloaded = true")
        errors = _console_errors(page)
        _wait_live(page)
        run_id = page.locator(".run-page").get_attribute("data-run-id")
        text = page.locator(f"#run-stream-text-{run_id}")

        # Part of the answer is on the page while the model is still writing.
        wait_until(
            page,
            f"(document.getElementById('run-stream-text-{run_id}') || {{textContent: ''}})"
            ".textContent.includes('word5 ')",
            timeout=15_000,
        )
        partial = text.inner_text()
        assert "<end>" not in partial and page.locator("#run-header .run-status").inner_text() != "Succeeded"
        assert "is writing" in page.locator(f"#run-stream-{run_id}").inner_text()
        page.screenshot(path=str(artifacts_dir / "agent-run-streaming.png"), full_page=True)

        wait_until(
            page, "document.querySelector('#run-header .run-status').textContent.trim() === 'Succeeded'", timeout=30_000
        )
        wait_until(page, f"document.getElementById('run-stream-text-{run_id}').textContent.includes('<end>')")
        assert text.inner_text().split() == answer.split(), "the whole answer, in order, as text (never markup)"
        assert "answered (step 1)" in page.locator(f"#run-stream-{run_id}").inner_text()
        assert page.evaluate("window.__not_reloaded") is True
        assert errors == []
        page.screenshot(path=str(artifacts_dir / "agent-run-streamed.png"), full_page=True)
