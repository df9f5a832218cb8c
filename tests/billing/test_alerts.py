"""Alerts: one per threshold and period, delivered in-app, by email and by webhook;
spend spikes by the documented rule."""

import json
import threading
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from agentops import live
from agentops.scoping import organization_scope
from billing.alerts import evaluate_alerts, spike_detected
from billing.budgets import utc_today
from billing.models import BudgetAlert
from billing.tasks import refresh_ledger
from tests.billing.test_budgets import org_budget, spend
from tests.billing.test_ledger import ingest_and_mark, llm_step


@pytest.fixture
def announced(monkeypatch):
    calls = []
    monkeypatch.setattr(live, "announce", lambda **kwargs: calls.append(kwargs))
    return calls


@pytest.fixture
def webhook_server():
    """A Slack-like webhook on 127.0.0.1 that records the JSON bodies it receives."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()


def alerts(tenant):
    with organization_scope(tenant.organization):
        return list(BudgetAlert.objects.order_by("threshold", "id"))


def test_each_threshold_alerts_once_per_period(tenant, announced):
    budget = org_budget(tenant, amount="10", thresholds=[50, 80, 100])
    spend(tenant.project, "5.00")
    assert [a.threshold for a in evaluate_alerts(tenant.organization.pk)] == [50]
    assert evaluate_alerts(tenant.organization.pk) == []
    spend(tenant.project, "1.00", model="b")
    assert evaluate_alerts(tenant.organization.pk) == []  # 60%: nothing new
    spend(tenant.project, "5.00", model="c")
    assert [a.threshold for a in evaluate_alerts(tenant.organization.pk)] == [80, 100]
    for _ in range(3):
        assert evaluate_alerts(tenant.organization.pk) == []
    assert [(a.budget_id, a.threshold, a.kind) for a in alerts(tenant)] == [
        (budget.pk, 50, "threshold"),
        (budget.pk, 80, "threshold"),
        (budget.pk, 100, "threshold"),
    ]
    # The 80% alert was raised with the 100% one: only the highest was sent.
    assert alerts(tenant)[1].deliveries == {"skipped": "superseded by the 100% alert raised with it"}
    assert len(mail.outbox) == 2
    assert len(announced) == 2


def test_a_new_period_alerts_again(tenant, announced):
    org_budget(tenant, amount="1", period="daily", thresholds=[100])
    yesterday = utc_today() - timedelta(days=1)
    spend(tenant.project, "1", day=yesterday)
    spend(tenant.project, "1")
    assert len(evaluate_alerts(tenant.organization.pk, today=yesterday)) == 1
    assert len(evaluate_alerts(tenant.organization.pk)) == 1
    assert sorted(a.period_start for a in alerts(tenant)) == [yesterday, utc_today()]


def test_alert_is_delivered_in_app_by_email_and_by_webhook(tenant, announced, webhook_server):
    url, received = webhook_server
    org_budget(
        tenant,
        name="Team cap",
        amount="10",
        thresholds=[50],
        notify_emails=["finance@acme.example.com"],
        webhook_url=url,
    )
    spend(tenant.project, "7.5")
    (alert,) = evaluate_alerts(tenant.organization.pk)
    assert "Team cap" in alert.message and "50%" in alert.message and "$7.50 of $10.00" in alert.message
    assert alert.deliveries == {"in_app": "sent", "email": "sent to 1", "webhook": "sent (HTTP 200)"}
    assert received == [{"text": alert.message}]
    (email,) = mail.outbox
    assert email.to == ["finance@acme.example.com"] and alert.message in email.body
    (call,) = announced
    assert call["organization"] == tenant.organization and call["event"] == "billing.alert"
    assert "Team cap" in call["html"] and call["data"]["threshold"] == 50


def test_email_goes_to_owners_and_admins_by_default(tenant, announced):
    org_budget(tenant, amount="1", thresholds=[100])
    spend(tenant.project, "1")
    evaluate_alerts(tenant.organization.pk)
    (email,) = mail.outbox
    assert email.to == [tenant.admin.email, tenant.owner.email]


def test_failed_channels_are_recorded_never_raised(tenant, announced, settings, monkeypatch):
    org_budget(tenant, amount="1", thresholds=[100], webhook_url="http://127.0.0.1:9/refused")

    def broken_mail(*args, **kwargs):
        raise ConnectionRefusedError("no SMTP server")

    monkeypatch.setattr("billing.alerts.send_mail", broken_mail)
    spend(tenant.project, "1")
    (alert,) = evaluate_alerts(tenant.organization.pk)
    assert alert.deliveries["email"] == "failed: ConnectionRefusedError"
    assert alert.deliveries["webhook"].startswith("failed: ConnectionError")


def test_a_webhook_answer_is_not_read_only_its_status(tenant, announced):
    """A webhook answering an endless body (64 MiB here) is hung up on after its status,
    instead of being read to the end while the alerts' worker waits."""
    written, done = [], threading.Event()

    class Endless(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(64 * 2**20))
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b"x" * 2**20)
                written.append("all of it")
            except (BrokenPipeError, ConnectionResetError):
                written.append("hung up on")
            finally:
                done.set()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        org_budget(tenant, amount="1", thresholds=[100], webhook_url=f"http://127.0.0.1:{server.server_address[1]}/")
        spend(tenant.project, "1")
        (alert,) = evaluate_alerts(tenant.organization.pk)
        assert alert.deliveries["webhook"] == "sent (HTTP 200)"
        assert done.wait(timeout=60) and written == ["hung up on"]
    finally:
        server.shutdown()


def test_webhook_is_checked_again_when_called(tenant, announced, webhook_server, settings):
    url, received = webhook_server
    org_budget(tenant, amount="1", thresholds=[100], webhook_url=url)
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False  # e.g. DNS now points the host inside
    spend(tenant.project, "1")
    (alert,) = evaluate_alerts(tenant.organization.pk)
    assert alert.deliveries["webhook"].startswith("failed: UnsafeUrlError")
    assert received == []


def test_a_webhook_whose_host_rebinds_to_a_private_address_is_not_called(tenant, announced, rebinding, settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = True  # saved while the name still answers a public address
    org_budget(tenant, amount="1", thresholds=[100], webhook_url=f"{rebinding.url}/hook")
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    spend(tenant.project, "1")
    (alert,) = evaluate_alerts(tenant.organization.pk)
    assert alert.deliveries["webhook"].startswith("failed: UnsafeUrlError")
    assert "private or reserved" in alert.deliveries["webhook"]
    assert rebinding.received == []


@pytest.mark.parametrize("status", [302, 307])
def test_a_webhook_that_redirects_is_not_followed(tenant, announced, redirect_trap, status):
    redirect_trap.status = status
    org_budget(tenant, amount="1", thresholds=[100], webhook_url=f"{redirect_trap.url}/hook")
    spend(tenant.project, "1")
    (alert,) = evaluate_alerts(tenant.organization.pk)
    assert alert.deliveries["webhook"] == f"failed: HTTP {status}"
    assert len(redirect_trap.redirected) == 1 and redirect_trap.elsewhere == []


def test_the_ledger_task_raises_alerts_of_the_organizations_it_touched(tenant, announced):
    org_budget(tenant, amount="0.01", thresholds=[100])
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", _now(), tokens=1_000_000)])
    refresh_ledger()
    assert [a.threshold for a in alerts(tenant)] == [100]


def _now():
    from django.utils import timezone

    return timezone.now()


def _history(tenant, today, amounts):
    """Spend on the days before ``today``: amounts[0] is yesterday."""
    for days_ago, dollars in enumerate(amounts, start=1):
        if dollars:
            spend(tenant.project, dollars, day=today - timedelta(days=days_ago))


def test_spend_spike_alerts_once_a_day(tenant, announced):
    today = utc_today()
    _history(tenant, today, ["1", "1", "1", "0", "0", "1", "1"])  # mean 5/7
    spend(tenant.project, "3")
    (spike,) = evaluate_alerts(tenant.organization.pk)
    assert (spike.kind, spike.budget, spike.period_start, spike.spend) == ("spike", None, today, Decimal("3"))
    assert "spend spike" in spike.message
    assert spike.deliveries["email"] == "sent to 2" and spike.deliveries["in_app"] == "sent"
    spend(tenant.project, "10", model="b")
    assert evaluate_alerts(tenant.organization.pk) == []


@pytest.mark.parametrize(
    "history, today_spend",
    [
        (["1", "1", "1", "1", "1", "1", "1"], "3"),  # 3x the mean is not above it
        (["0.1", "0.1", "0.1", "0.1", "0.1", "0.1", "0.1"], "1.05"),  # 10x, but under $1 above the mean
        (["1", "1", "0", "0", "0", "0", "0"], "50"),  # only 2 days of history
        ([], "50"),  # a new organization
    ],
)
def test_no_spike_without_a_baseline_or_a_big_enough_jump(tenant, announced, history, today_spend):
    today = utc_today()
    _history(tenant, today, history)
    spend(tenant.project, today_spend)
    assert evaluate_alerts(tenant.organization.pk) == []


def test_spike_rule_counts_days_without_usage_as_zero():
    today = utc_today()
    history = {today - timedelta(days=n): Decimal("2") for n in (1, 2, 3)}  # mean 6/7
    assert spike_detected({**history, today: Decimal("2.58")}, today)[0]
    assert not spike_detected({**history, today: Decimal("2.57")}, today)[0]


@pytest.mark.django_db(transaction=True)
async def test_budget_alerts_reach_open_billing_pages_of_admins_and_never_a_viewers_socket(tenant, client_for):
    """Viewers and members get 403 on the billing page; their sockets never hear of an
    alert either, even when they ask for the billing topic."""
    from asgiref.sync import sync_to_async
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator
    from django.db import connections
    from django.utils.html import escape

    from agentops.routing import websocket_urlpatterns

    async def billing_page_socket(user):
        socket = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/o/acme/?topics=billing")
        socket.scope["user"] = user
        assert (await socket.connect())[0]
        return socket

    sockets = {role: await billing_page_socket(tenant.user(role)) for role in ("owner", "admin", "member", "viewer")}

    def billing_page_status(role):
        return client_for(tenant.user(role)).get("/o/acme/billing/").status_code

    pages = {role: await sync_to_async(billing_page_status)(role) for role in sockets}
    assert pages == {"owner": 200, "admin": 200, "member": 403, "viewer": 403}

    def raise_alert():
        org_budget(tenant, name="Team cap", amount="10", thresholds=[50])
        spend(tenant.project, "7.5")
        return evaluate_alerts(tenant.organization.pk)

    (alert,) = await sync_to_async(raise_alert)()
    for role in ("owner", "admin"):
        html = await sockets[role].receive_from(timeout=5)
        assert 'hx-swap-oob="afterend:#alerts > h2"' in html, "under the heading of the page's Alerts card"
        assert escape(alert.message) in html
    for role in ("member", "viewer"):
        assert await sockets[role].receive_nothing(timeout=0.5), role
    for socket in sockets.values():
        await socket.disconnect()
    await sync_to_async(connections.close_all)()


def test_the_billing_topic_needs_what_the_billing_page_needs():
    from billing.views import BillingIndexPage

    assert live.TOPICS["billing"].permission == BillingIndexPage.permissions["GET"].permission
