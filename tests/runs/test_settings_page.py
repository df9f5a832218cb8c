"""The ingestion settings page: members read, admins change, outsiders get 404."""

import re

from agentops.scoping import organization_scope
from runs.events import StepEvent
from runs.ingest import ingest
from runs.models import IngestSettings, Step

BASE = "/o/acme/p/agent/runs"
URL = f"{BASE}/settings/"


def test_admin_saves_rules_that_apply_to_the_next_ingest(tenant, client):
    client.force_login(tenant.admin)
    response = client.post(URL, {"redact": ["email"], "custom_patterns": "ticket-\\d+\n", "retention_days": "14"})
    assert response.status_code == 302
    with organization_scope(tenant.organization):
        settings = IngestSettings.objects.get(project=tenant.project)
        assert (settings.redact, settings.custom_patterns, settings.retention_days) == (["email"], ["ticket-\\d+"], 14)
        ingest(
            project=tenant.project,
            steps=[StepEvent(trace_id="t", span_id="s", input="a@b.co ticket-9")],
            announce=False,
        )
        assert Step.objects.get().input == "[REDACTED] [REDACTED]"
    page = client.get(URL).content.decode()
    assert re.search(r'<input[^>]*value="email"[^>]*checked', page)
    assert not re.search(r'<input[^>]*value="card"[^>]*checked', page)


def test_viewer_reads_but_cannot_change(tenant, client):
    client.force_login(tenant.viewer)
    page = client.get(URL)
    assert page.status_code == 200 and "Only owners and admins change these." in page.content.decode()
    refused = client.post(URL, {"redact": ["email"]})
    assert refused.status_code == 403
    with organization_scope(tenant.organization):
        assert not IngestSettings.objects.exists()


def test_bad_pattern_is_shown_not_saved(tenant, client):
    client.force_login(tenant.owner)
    response = client.post(URL, {"custom_patterns": "(unclosed"})
    assert response.status_code == 400
    assert "invalid regular expression" in response.content.decode().lower()


def test_outsider_gets_404(tenant, other_tenant, client):
    client.force_login(other_tenant.owner)
    assert client.get(URL).status_code == 404
    assert client.post(URL, {"redact": ["email"]}).status_code == 404


def test_a_custom_pattern_with_catastrophic_backtracking_is_refused(signed_in, tenant):
    # `(a+)+$` on "aaaa…a!" takes 2^n steps: an admin of any organization (sign-up is
    # open) can freeze an ingest worker for every tenant with one pattern and one event.
    response = signed_in(tenant.admin).post(f"{BASE}/settings/", {"custom_patterns": "(a+)+$"})
    assert response.status_code == 400
    assert "catastrophic backtracking" in response.content.decode()


def test_the_settings_page_sets_wandb_logging_and_viewers_see_it(tenant, client):
    client.force_login(tenant.admin)
    assert 'name="wandb_logging"' in client.get(URL).content.decode()
    assert client.post(URL, {"redact": [], "wandb_logging": "runs"}).status_code == 302
    with organization_scope(tenant.organization):
        assert IngestSettings.objects.get(project=tenant.project).wandb_logging == "runs"
    client.force_login(tenant.viewer)
    page = client.get(URL).content.decode()
    assert "Log to Weights &amp; Biases" in page and "Runs and experiments" in page
    assert client.post(URL, {"redact": [], "wandb_logging": "off"}).status_code == 403
