"""The runs pages in a real browser against the real ASGI application (uvicorn, Channels
over the real Redis layer): runs arriving live at the top of the list, a run's steps
arriving live, the step panel, and screenshots of each page for a person to look at."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.scoping import organization_scope
from runs.events import StepEvent
from runs.ingest import ingest
from runs.models import Run
from tests.agentops.factories import PASSWORD
from tests.browser.conftest import chromium_page, wait_until
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.runs.test_pages import BIG_PAYLOAD_MARKER, T0, big_run_batch, multi_agent_runs, store, support_run

pytestmark = pytest.mark.browser


@pytest.fixture
def server(asgi_server):  # noqa: F811 - asgi_server is the fixture imported above
    """The real ASGI application served by uvicorn (see test_live_updates)."""
    return asgi_server


def _in_another_thread(work) -> None:
    # Playwright's sync API runs an event loop in the test's thread, where Django
    # refuses ORM calls; agents send their traces from elsewhere anyway.
    errors = []

    def target():
        from django.db import connection

        try:
            work()
        except Exception as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(timeout=60)
    if errors:
        raise errors[0]


def _sign_in(page, server: str, user) -> None:
    page.goto(f"{server}/accounts/login/")
    page.fill("input[name=login]", user.email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]:has-text('Sign In')")
    page.wait_for_url(f"{server}/**")


def _wait_live(page) -> None:
    wait_until(page, "document.getElementById('live-status').dataset.state === 'open'")


def _console_errors(page) -> list[str]:
    """Collects the page's console errors from now on (htmx logs a fragment it could not place)."""
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    return errors


def test_a_new_run_appears_at_the_top_of_the_list_without_a_reload(server, tenant, artifacts_dir):
    project = tenant.project
    store(project, support_run("older-1", start=T0, question="Where is my parcel?"))
    store(project, support_run("older-2", start=T0 + timedelta(minutes=2), question="Change my address"))

    with chromium_page() as page:
        _sign_in(page, server, tenant.viewer)
        page.goto(f"{server}/o/acme/p/agent/runs/")
        _wait_live(page)
        assert page.locator("#runs-table > tbody").count() == 2
        page.evaluate("window.__not_reloaded = true")
        errors = _console_errors(page)

        _in_another_thread(
            lambda: store(
                project,
                support_run("brand-new", start=timezone.now(), question="Is the store open on Sunday?"),
                announce=True,
            )
        )

        wait_until(
            page, "document.querySelector('#runs-table > tbody').textContent.includes('Is the store open on Sunday')"
        )
        assert page.evaluate("window.__not_reloaded") is True
        assert page.locator("#runs-table > tbody").count() == 3
        assert errors == [], "pieces meant for other pages (a run page's refresh) are dropped quietly"
        page.screenshot(path=str(artifacts_dir / "runs-list-live.png"), full_page=True)

    new = Run.dangerously_unscoped_objects.get(trace_id="brand-new")
    assert new.status == Run.Status.SUCCEEDED


def test_the_first_run_of_a_project_replaces_the_empty_state_live(server, tenant, artifacts_dir):
    project = tenant.project

    with chromium_page() as page:
        _sign_in(page, server, tenant.viewer)
        page.goto(f"{server}/o/acme/p/agent/runs/")
        _wait_live(page)
        assert page.locator("#runs-empty").is_visible()
        assert page.locator("#runs-table").is_hidden()
        page.screenshot(path=str(artifacts_dir / "runs-empty.png"), full_page=True)

        _in_another_thread(
            lambda: store(project, support_run("first", start=timezone.now(), question="Hello?"), announce=True)
        )

        page.locator("#runs-table").wait_for(state="visible")
        assert page.locator("#runs-empty").is_hidden()
        assert page.locator("#send-traces").is_hidden()
        assert "support: Hello?" in page.locator("#runs-table > tbody").inner_text()


def test_a_filtered_list_offers_a_reload_instead_of_inserting_new_runs(server, tenant, artifacts_dir):
    project = tenant.project
    store(project, support_run("failed-one", start=T0, fail=True, question="Why did this fail?"))

    with chromium_page() as page:
        _sign_in(page, server, tenant.member)
        page.goto(f"{server}/o/acme/p/agent/runs/?status=failed&environment=production")
        _wait_live(page)
        assert page.locator("#runs-new-notice").is_hidden()

        _in_another_thread(
            lambda: store(project, support_run("fine-one", start=timezone.now(), question="All good?"), announce=True)
        )

        notice = page.locator("#runs-new-notice")
        notice.wait_for(state="visible")
        assert "New runs arrived" in notice.inner_text()
        assert page.locator("#runs-table > tbody").count() == 1, "a run the filters exclude is not inserted"
        page.screenshot(path=str(artifacts_dir / "runs-list-filtered.png"), full_page=True)


def test_clicking_a_step_opens_its_panel(server, tenant, artifacts_dir):
    project = tenant.project
    store(project, support_run("detail", start=T0, question="Where is my order #1042?"))
    run = Run.dangerously_unscoped_objects.get(trace_id="detail")

    with chromium_page() as page:
        _sign_in(page, server, tenant.viewer)
        page.goto(f"{server}/o/acme/p/agent/runs/{run.pk}/")
        page.locator(".trace-row", has_text="lookup_order").locator(".trace-link").click()

        panel = page.locator("#step-panel .step-detail")
        panel.wait_for()
        assert "lookup_order" in panel.locator("h2").inner_text()
        assert "shipped" in panel.inner_text()
        assert page.locator(".trace-row.is-selected").inner_text().count("lookup_order") == 1
        assert page.url.endswith(f"/runs/{run.pk}/"), "the panel opens in place, without navigating"
        page.screenshot(path=str(artifacts_dir / "run-detail-step.png"), full_page=True)

        page.click("#tab-transcript")
        page.locator("#transcript .chat-tool-call").wait_for()
        page.screenshot(path=str(artifacts_dir / "run-transcript.png"), full_page=True)
        page.click("#tab-memory")
        page.locator(".diff-table").first.wait_for()
        page.screenshot(path=str(artifacts_dir / "run-memory.png"), full_page=True)
        page.click("#tab-tools")
        page.locator("#tool-calls").wait_for()
        page.screenshot(path=str(artifacts_dir / "run-tools.png"), full_page=True)


def test_a_500_step_run_collapses_and_loads_a_long_payload_on_demand(server, tenant, artifacts_dir):
    batch, big_span = big_run_batch()
    store(tenant.project, batch)
    run = Run.dangerously_unscoped_objects.get(trace_id="big")

    with chromium_page() as page:
        _sign_in(page, server, tenant.viewer)
        page.goto(f"{server}/o/acme/p/agent/runs/{run.pk}/")
        rows = page.locator("#run-steps .trace-row")
        assert rows.count() == 500
        page.screenshot(path=str(artifacts_dir / "run-500-steps.png"))

        page.locator(".trace-row", has_text="chain 1").first.locator(".trace-toggle").click()
        assert page.locator("#run-steps .trace-row:visible").count() == 500 - 19
        page.click("[data-action=collapse-all]")
        assert page.locator("#run-steps .trace-row:visible").count() == 1
        page.click("[data-action=expand-all]")
        assert page.locator("#run-steps .trace-row:visible").count() == 500

        page.locator("#run-steps .trace-row[data-depth='2'] >> nth=0").locator(".trace-link").click()
        panel = page.locator("#step-panel .step-detail")
        panel.wait_for()
        assert BIG_PAYLOAD_MARKER not in panel.inner_text()
        page.screenshot(path=str(artifacts_dir / "run-500-steps-panel.png"))
        panel.locator(".step-section", has_text="Input").get_by_text("Show all").click()
        wait_until(page, f"document.getElementById('step-panel').textContent.includes('{BIG_PAYLOAD_MARKER}')")
    assert big_span == "chain-0-0"


def test_steps_of_a_running_run_appear_live_on_its_page(server, tenant, artifacts_dir):
    project = tenant.project
    started = timezone.now() - timedelta(seconds=5)
    with organization_scope(project.organization):
        result = ingest(
            project=project,
            steps=[
                StepEvent(trace_id="live-run", span_id="root", kind="agent", name="research agent", started_at=started),
                StepEvent(
                    trace_id="live-run",
                    span_id="plan",
                    parent_span_id="root",
                    kind="llm",
                    name="plan",
                    model="mistral-small-2603",
                    started_at=started,
                    ended_at=started + timedelta(seconds=1),
                    input_tokens=300,
                    output_tokens=50,
                ),
            ],
            announce=False,
        )
    run_id = result.runs_created[0]

    with chromium_page() as page:
        _sign_in(page, server, tenant.member)
        page.goto(f"{server}/o/acme/p/agent/runs/{run_id}/")
        _wait_live(page)
        assert page.locator("#run-steps .trace-row").count() == 2
        page.locator(".trace-row", has_text="plan").locator(".trace-link").click()
        page.locator("#step-panel .step-detail").wait_for()

        errors = _console_errors(page)

        def more_steps():
            with organization_scope(project.organization):
                ingest(
                    project=project,
                    steps=[
                        # Another run starts in the same batch: its row is for the list, not this page.
                        StepEvent(trace_id="other-run", span_id="root", kind="agent", started_at=started),
                        StepEvent(
                            trace_id="live-run",
                            span_id="search",
                            parent_span_id="root",
                            kind="retrieval",
                            name="search the web",
                            started_at=started + timedelta(seconds=1),
                            ended_at=started + timedelta(seconds=3),
                        ),
                    ],
                )

        _in_another_thread(more_steps)

        wait_until(page, "document.querySelectorAll('#run-steps .trace-row').length === 3")
        assert page.locator("#run-steps-count").inner_text() == "3"
        assert page.locator("#tab-trace .tab-count").inner_text() == "3"
        assert "plan" in page.locator(".trace-row.is-selected").inner_text(), "the selection survives"
        assert page.locator("#step-panel .step-detail").count() == 1, "the open step panel stays"
        assert errors == []
        page.screenshot(path=str(artifacts_dir / "run-detail-live.png"), full_page=True)


def test_sessions_multi_agent_tree_and_dashboard_render(server, tenant, artifacts_dir):
    project = tenant.project
    for index in range(6):
        store(
            project,
            support_run(
                f"conversation-{index}",
                start=timezone.now() - timedelta(hours=20 - index * 3),
                session_id="conv-42" if index < 3 else f"conv-{index}",
                fail=index == 4,
                model="mistral-small-2603" if index % 2 else "mistral-large-2512",
                seconds=2 + index,
            ),
        )
    parent_id = multi_agent_runs(project)

    with chromium_page() as page:
        _sign_in(page, server, tenant.viewer)
        page.goto(f"{server}/o/acme/p/agent/runs/dashboard/")
        page.locator("#chart-runs .main-svg").first.wait_for()
        page.locator("#chart-latency .main-svg").first.wait_for()
        page.screenshot(path=str(artifacts_dir / "runs-dashboard.png"), full_page=True)

        page.goto(f"{server}/o/acme/p/agent/runs/sessions/")
        page.screenshot(path=str(artifacts_dir / "runs-sessions.png"), full_page=True)
        page.click("text=conv-42")
        page.locator("#session-runs .session-turn").first.wait_for()
        assert page.locator("#session-runs .session-turn").count() == 3
        page.screenshot(path=str(artifacts_dir / "runs-session.png"), full_page=True)

        page.goto(f"{server}/o/acme/p/agent/runs/{parent_id}/")
        assert page.locator("#run-family .family-row").count() == 3
        page.screenshot(path=str(artifacts_dir / "run-multi-agent.png"), full_page=True)

        page.goto(f"{server}/o/acme/p/agent/runs/")
        page.screenshot(path=str(artifacts_dir / "runs-list.png"), full_page=True)

        page.goto(f"{server}/o/acme/p/agent/")
        page.click(".tiles >> text=Dashboard")
        page.wait_for_url(f"{server}/o/acme/p/agent/runs/dashboard/")
        page.click("#range-picker summary")
        page.screenshot(path=str(artifacts_dir / "runs-dashboard-custom.png"))


def test_a_running_runs_duration_advances_between_live_updates(server, tenant, artifacts_dir):
    """A model may write for seconds with no live update: the header's "so far" keeps
    counting meanwhile, instead of showing the figure of the last update."""
    project = tenant.project
    started = timezone.now() - timedelta(seconds=3)
    with organization_scope(project.organization):
        result = ingest(
            project=project,
            steps=[StepEvent(trace_id="slow-run", span_id="root", kind="agent", name="writer", started_at=started)],
            announce=False,
        )
    run_id = result.runs_created[0]

    with chromium_page() as page:
        _sign_in(page, server, tenant.member)
        page.goto(f"{server}/o/acme/p/agent/runs/{run_id}/")
        errors = _console_errors(page)
        # The header is fetched again when the socket (re)opens: from now on those fetches
        # get an empty answer, so the header can only change in the page itself.
        _wait_live(page)
        page.wait_for_load_state("networkidle")
        page.route("**/runs/*/live/**", lambda route: route.fulfill(status=204, body=""))
        duration = page.locator("#run-duration")
        assert "so far" in duration.inner_text()
        first = duration.locator(".run-duration-value").inner_text()

        changed = "document.querySelector('#run-duration .run-duration-value').textContent !== {}"
        wait_until(page, changed.format(json.dumps(first)))
        wait_until(page, changed.format(json.dumps(duration.locator(".run-duration-value").inner_text())))

        def seconds(text: str) -> float:
            value, unit = text.split()
            return float(value) / (1000 if unit == "ms" else 1)

        later = duration.locator(".run-duration-value").inner_text()
        assert seconds(later) > seconds(first) >= 3, (first, later)
        assert "so far" in duration.inner_text()
        assert errors == []
        page.screenshot(path=str(artifacts_dir / "run-detail-duration.png"))
