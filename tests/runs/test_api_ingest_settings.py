"""The project's redaction rules, retention and W&B logging choice over the API."""

from agentops.models import AuditEvent
from agentops.scoping import organization_scope
from runs.models import IngestSettings

URL = "/api/v1/projects/acme/agent/ingest-settings/"


def test_admin_sets_rules_and_members_read_them(tenant, client_for):
    body = {"redact": ["email", "card"], "custom_patterns": [r"ticket-\d+"], "retention_days": 30}
    response = client_for(tenant.admin).put(URL, body, format="json")
    assert response.status_code == 200
    assert response.json() == {
        "redact": ["card", "email"],
        "custom_patterns": [r"ticket-\d+"],
        "retention_days": 30,
        "wandb_logging": "experiments",
    }
    assert client_for(tenant.viewer).get(URL).json()["retention_days"] == 30
    with organization_scope(tenant.organization):
        assert AuditEvent.objects.filter(action="project.ingest_settings").count() == 1


def test_member_cannot_change_rules(tenant, client_for):
    response = client_for(tenant.member).put(URL, {"redact": []}, format="json")
    assert response.status_code == 403


def test_bad_rules_are_400_with_the_reason(tenant, client_for):
    client = client_for(tenant.admin)
    bad_regex = client.put(URL, {"redact": [], "custom_patterns": ["(oops"]}, format="json")
    assert bad_regex.status_code == 400
    assert "invalid regular expression" in bad_regex.json()["error"]["message"]
    unknown = client.put(URL, {"redact": ["dna"]}, format="json")
    assert unknown.status_code == 400 and unknown.json()["error"]["message"].startswith("redact")
    retention = client.put(URL, {"redact": [], "retention_days": 0}, format="json")
    assert retention.status_code == 400


def test_defaults_before_anything_is_saved(tenant, client_for):
    assert client_for(tenant.viewer).get(URL).json() == {
        "redact": [],
        "custom_patterns": [],
        "retention_days": None,
        "wandb_logging": "experiments",
    }


def test_other_organizations_settings_are_not_found(tenant, other_tenant, client_for, key_client):
    foreign = "/api/v1/projects/globex/agent/ingest-settings/"
    assert client_for(tenant.owner).get(foreign).status_code == 404
    assert client_for(tenant.owner).put(foreign, {"redact": ["email"]}, format="json").status_code == 404
    assert key_client(tenant.project, ["read"]).get(foreign).status_code == 404
    with organization_scope(other_tenant.organization):
        assert not AuditEvent.objects.filter(action="project.ingest_settings").exists()


def test_viewers_read_the_wandb_setting_and_admins_change_it(tenant, client_for):
    assert client_for(tenant.viewer).get(URL).json()["wandb_logging"] == "experiments"
    refused = client_for(tenant.member).put(URL, {"redact": [], "wandb_logging": "runs"}, format="json")
    assert refused.status_code == 403
    saved = client_for(tenant.admin).put(URL, {"redact": [], "wandb_logging": "runs"}, format="json")
    assert saved.status_code == 200 and saved.json()["wandb_logging"] == "runs"
    # Left out of a later change: unchanged.
    kept = client_for(tenant.admin).put(URL, {"redact": ["email"]}, format="json")
    assert kept.json()["wandb_logging"] == "runs"
    assert client_for(tenant.viewer).get(URL).json()["wandb_logging"] == "runs"


def test_an_unknown_wandb_setting_is_a_400_naming_it(tenant, client_for):
    response = client_for(tenant.admin).put(URL, {"redact": [], "wandb_logging": "all"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("wandb_logging")
    with organization_scope(tenant.organization):
        assert not IngestSettings.objects.exists()


def test_another_organizations_wandb_setting_is_not_found(tenant, other_tenant, client_for):
    foreign = "/api/v1/projects/globex/agent/ingest-settings/"
    assert (
        client_for(tenant.owner).put(foreign, {"redact": [], "wandb_logging": "runs"}, format="json").status_code == 404
    )
    with organization_scope(other_tenant.organization):
        assert not IngestSettings.objects.exists()
