"""A job submitted from the New job page in a real browser, against the real ASGI
application (uvicorn, Channels over the real Redis layer), run by the real local backend
(a subprocess on this host) and followed by the real poller on a real Celery worker: its
log lines arrive on the open job page one after another, then its status becomes
succeeded, without a reload."""

from __future__ import annotations

import shlex

import pytest

from agentops.scoping import organization_scope
from jobs.models import Job, JobEvent, JobLogLine
from jobs.services import backend_create
from tests.browser.conftest import chromium_page, wait_until
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in, _wait_live

pytestmark = pytest.mark.browser

LINES = 6
# One line every 1.5 s: the first lines are on the page when it opens, the last ones are not.
PROGRAM = f"import time\nfor i in range({LINES}):\n    print(f'line {{i}}', flush=True)\n    time.sleep(1.5)\n"


@pytest.fixture
def local_backend(tenant, tmp_path):
    with organization_scope(tenant.organization):
        return backend_create(
            organization=tenant.organization,
            actor=None,  # the platform (only platform staff add local backends)
            name="this box",
            kind="local",
            config={"work_dir": str(tmp_path / "jobs")},
        )


def test_a_local_job_submitted_from_the_page_shows_its_log_lines_live(
    asgi_server,  # noqa: F811 - the fixture imported above
    celery_worker,
    tenant,
    local_backend,
    artifacts_dir,
):
    command = shlex.join(["python3", "-c", PROGRAM])  # the host's python3: the job's user runs it
    base = f"{asgi_server}/o/acme/p/agent/jobs"
    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{base}/")
        page.click("#new-job")
        page.wait_for_url(f"{base}/new/")

        # The estimate follows the form: this host has no a100 (no nvidia-smi here), and
        # the estimate says what it offers; cpu-basic for 30 minutes is at most $0.03.
        page.select_option("select[name=hardware]", "a100")
        page.fill("input[name=time_limit_minutes]", "30")
        page.locator("input[name=time_limit_minutes]").dispatch_event("change")
        page.wait_for_selector("#job-estimate-note:has-text('does not offer a100; it offers: cpu-basic')")
        page.select_option("select[name=hardware]", "cpu-basic")
        page.wait_for_selector("#job-estimate-amount[data-amount='0.025000000']")

        page.fill("input[name=name]", "count to six")
        page.fill("textarea[name=command]", command)
        page.fill("textarea[name=env]", "GREETING=hello")
        page.screenshot(path=str(artifacts_dir / "job-new.png"), full_page=True)
        page.click("#job-submit")
        page.wait_for_url(f"{base}/*/")
        page.evaluate("window.__not_reloaded = true")
        errors = _console_errors(page)
        job_id = page.locator(".job-page").get_attribute("data-job-id")
        log = f"#job-{job_id}-log"
        status = f"#job-{job_id}-status"
        assert page.locator("#job-cancel").count() == 1
        _wait_live(page)

        # The lines arrive one by one on the open page.
        page.wait_for_selector(f"{log} [data-number='1']")
        assert "line 0" in page.locator(log).inner_text()
        lines_seen_early = page.locator(f"{log} .log-line").count()
        wait_until(page, f"document.querySelector('{status}').dataset.status === 'running'")
        page.screenshot(path=str(artifacts_dir / "job-live-running.png"), full_page=True)
        # The jobs list, opened by a viewer while the job runs, follows its row.
        listing = page.context.browser.new_page(viewport={"width": 1280, "height": 860})
        _sign_in(listing, asgi_server, tenant.viewer)
        listing.goto(f"{base}/")
        _wait_live(listing)
        row = f"#job-row-{job_id}"
        assert listing.locator(row).get_attribute("data-status") == "running"
        page.wait_for_selector(f"{log} [data-number='{LINES}']")
        wait_until(page, f"document.querySelector('{status}').dataset.status === 'succeeded'")
        wait_until(listing, f"document.querySelector('{row}').dataset.status === 'succeeded'")
        assert "$" in listing.locator(f"{row} td").nth(6).inner_text(), "the row shows the job's cost"
        listing.close()

        assert page.evaluate("window.__not_reloaded") is True
        assert lines_seen_early < LINES, "the job had not printed every line when its first line was shown"
        numbers = page.eval_on_selector_all(f"{log} .log-line", "lines => lines.map(line => line.dataset.number)")
        assert numbers == [str(number) for number in range(1, LINES + 1)], "each line once, in order"
        texts = page.eval_on_selector_all(
            f"{log} .log-line",
            "lines => lines.map(line => line.textContent.slice(line.querySelector('.log-number').textContent.length))",
        )
        assert [text.strip() for text in texts] == [f"line {i}" for i in range(LINES)]
        timeline = page.eval_on_selector_all(
            f"{status} .timeline li", "items => items.map(item => item.dataset.status)"
        )
        assert timeline == ["queued", "submitted", "running", "succeeded"]
        assert "exit code 0" in page.locator(status).inner_text()
        assert page.locator("#job-cancel").is_hidden(), "an ended job offers no Cancel"
        assert [error for error in errors if f"job-{job_id}" in error] == []
        page.screenshot(path=str(artifacts_dir / "job-live-done.png"), full_page=True)

        # The full log, as plain text.
        full = page.request.get(f"{base}/{job_id}/log/")
        assert full.ok and full.text().splitlines() == [f"line {i}" for i in range(LINES)]

    with organization_scope(tenant.organization):
        job = Job.objects.get(pk=job_id)
        statuses = list(JobEvent.objects.filter(job=job).values_list("status", flat=True))
        lines = list(JobLogLine.objects.filter(job=job).values_list("text", flat=True))
    assert job.status == "succeeded" and job.exit_code == 0 and job.env == {"GREETING": "hello"}
    assert statuses == ["queued", "submitted", "running", "succeeded"]
    assert lines == [f"line {i}" for i in range(LINES)]
