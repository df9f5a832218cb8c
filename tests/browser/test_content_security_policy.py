"""The Content-Security-Policy in a real browser: the platform's main pages run under it
with no violation and no script error, and still work: Plotly draws the charts, live
updates connect over the WebSocket, Swagger UI renders with every request outside the
platform refused (offline), and a form's confirmation question still asks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.scoping import organization_scope
from billing.ledger import ledger_refresh
from runs.models import Run
from tests.browser.conftest import chromium_page
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _sign_in, _wait_live
from tests.evals.factories import make_dataset
from tests.evals.test_experiment_pages import constructed, url
from tests.runs.test_pages import store, support_run

pytestmark = pytest.mark.browser

# Reports each violation to the console, where the test collects it (Chromium also logs
# its own "Refused to ..." line; either one fails the test).
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (event) {
  console.error("CSP violation: " + event.violatedDirective + " blocked " + event.blockedURI
                + " at " + event.sourceFile + ":" + event.lineNumber);
});
"""


def _watch(page, server: str) -> list[str]:
    """Refuses every request outside the platform (the pages must work offline) and
    collects CSP violations and uncaught script errors from now on."""
    problems: list[str] = []

    def on_console(message):
        text = message.text
        if message.type == "error" and ("Content Security Policy" in text or "CSP violation" in text):
            problems.append(text)

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.add_init_script(REPORT_VIOLATIONS)
    page.route(
        "**/*",
        lambda route: route.continue_() if route.request.url.startswith(server) else route.abort(),
    )
    return problems


@pytest.fixture
def content(tenant, make_api_key):
    """Runs for the lists, the dashboard and the billing chart; an ended experiment on a
    leaderboard; an API key to revoke."""
    now = timezone.now()
    for day in range(3):
        store(tenant.project, support_run(f"csp-{day}", start=now - timedelta(days=day, minutes=5)))
    while ledger_refresh():
        pass
    with organization_scope(tenant.organization):
        run = Run.objects.filter(trace_id="csp-0").get()
    dataset = make_dataset(tenant.project, [{"key": f"q{i}", "input": f"question {i}"} for i in range(4)])
    first = constructed(tenant.project, dataset, name="first", scores={"accuracy": [1.0, 0.0, 1.0, 1.0]})
    constructed(tenant.project, dataset, name="second", scores={"accuracy": [1.0, 1.0, 1.0, 0.0]}, cost="0.002")
    key, _plaintext = make_api_key(tenant.project, name="to revoke")
    return {"run": run, "experiment": first, "dataset": dataset, "key": key}


def test_the_main_pages_run_under_the_policy_and_still_work(
    asgi_server,  # noqa: F811 - the fixture imported above
    tenant,
    content,
):
    project = "/o/acme/p/agent"
    with chromium_page() as page:
        problems = _watch(page, asgi_server)
        _sign_in(page, asgi_server, tenant.owner)

        response = page.goto(f"{asgi_server}{project}/runs/dashboard/")
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_selector("#chart-runs .main-svg")

        page.goto(f"{asgi_server}{project}/runs/")
        _wait_live(page)  # the WebSocket is allowed by connect-src
        assert page.locator("#runs-table > tbody").count() == 3

        page.goto(f"{asgi_server}{project}/runs/{content['run'].pk}/")
        _wait_live(page)

        page.goto(f"{asgi_server}/o/acme/billing/")
        page.wait_for_selector("#chart-spend .main-svg")

        page.goto(f"{asgi_server}{url('experiment', experiment_id=content['experiment'].pk)}")
        page.wait_for_selector("h1:has-text('first')")
        _wait_live(page)

        page.goto(f"{asgi_server}{url('leaderboard', dataset_id=content['dataset'].pk)}")
        page.wait_for_selector("#chart-score-cost .main-svg")
        page.wait_for_selector("#chart-score-time .main-svg")

        # The evaluators page shows the chosen kind's example configuration (evals.js).
        page.goto(f"{asgi_server}{url('evaluators')}")
        examples = page.evaluate("JSON.parse(document.getElementById('evaluator-examples').textContent)")
        chosen = next(kind for kind, text in examples.items() if text.strip() != page.input_value("#id_config").strip())
        page.select_option("#id_kind", chosen)
        assert page.input_value("#id_config").strip() == examples[chosen].strip()

        # A form's confirmation question (data-confirm, no inline handler) still asks:
        # "no" sends nothing, "yes" sends the form once.
        page.goto(f"{asgi_server}{project}/api-keys/")
        questions, posts = [], []
        page.on("request", lambda request: posts.append(request.url) if request.method == "POST" else None)
        revoke = f"form[action$='/api-keys/{content['key'].pk}/revoke/'] button[type=submit]"

        def answer(dialog, accept: bool):
            questions.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        page.once("dialog", lambda dialog: answer(dialog, False))
        page.click(revoke)
        page.once("dialog", lambda dialog: answer(dialog, True))
        with page.expect_navigation():
            page.click(revoke)
        assert len(questions) == 2 and all(question.startswith("Revoke ") for question in questions)
        assert len(posts) == 1

        # Swagger UI from the platform's own files, every other origin refused.
        page.goto(f"{asgi_server}/api/docs/")
        page.wait_for_selector(".swagger-ui .info .title:has-text('AgentOps Studio API')")
        page.wait_for_selector(".swagger-ui .opblock")

    assert problems == []
    content["key"].refresh_from_db()
    assert content["key"].revoked_at is not None
