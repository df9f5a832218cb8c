"""Redaction (runs/services/redaction.py): the built-in rules find what they name and
leave dates, timestamps and ids alone; custom patterns apply each on its own (their
flags, group numbers and names intact) and never stop a project's ingest; hostile text
and slow patterns cost linear time."""

from __future__ import annotations

import pytest

from agentops.scoping import organization_scope
from runs.events import StepEvent
from runs.ingest import ingest
from runs.models import IngestSettings, Run, Step
from runs.services.redaction import REPLACEMENT, Redactor
from runs.services.settings import ingest_settings_update

BASE = "/o/acme/p/agent/runs"


def test_custom_pattern_with_an_inline_flag_does_not_stop_ingestion(tenant):
    """ "(?i)secret" compiles alone (so the settings accept it) but not inside the
    combined alternation: every ingest of the project used to fail with re.error."""
    project = tenant.project
    with organization_scope(project.organization):
        ingest_settings_update(
            project=project, actor=tenant.owner, redact=["email"], custom_patterns=["(?i)secret"], retention_days=None
        )
        ingest(
            project=project,
            steps=[StepEvent(trace_id="t", span_id="r", input="SECRET sauce for bob@example.com")],
            announce=False,
        )
        step = Step.objects.get(project=project)
    assert step.input == f"{REPLACEMENT} sauce for {REPLACEMENT}"


def test_custom_patterns_keep_their_own_group_numbers():
    # Combined into one alternation, the second pattern's \1 pointed at the first one's group.
    redactor = Redactor([], [r"(a)\1", r"(b)\1"])
    assert redactor.apply("aa bb") == f"{REPLACEMENT} {REPLACEMENT}"


def test_a_pattern_that_can_match_empty_text_does_not_salt_every_string():
    redactor = Redactor([], ["x*"])
    assert redactor.apply("hello") == "hello"
    assert redactor.apply("a xx b") == f"a {REPLACEMENT} b"


def test_redaction_covers_object_keys():
    # Memory and tool results are often keyed by the customer's e-mail address.
    redactor = Redactor(["email"], [])
    assert redactor.apply({"alice@example.com": {"plan": "pro"}}) == {REPLACEMENT: {"plan": "pro"}}


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-20",
        "at 2026-11-20 12:00:00 UTC",
        "20.11.2026 12:00",
        "epoch 1732104000",
        "order 12345678",
        "id 123e4567-e89b-12d3-a456-426614174000",
        "host 192.168.100.200",
        "https://example.com/orders/987654321/items",
        "ts 1732104000127",  # milliseconds; passes the Luhn check
    ],
)
def test_phone_and_card_rules_leave_dates_timestamps_and_ids_alone(text):
    assert Redactor(["phone", "card"], []).apply(text) == text


@pytest.mark.parametrize(
    "phone",
    [
        "+33 6 12 34 56 78",
        "+14155552671",
        "(555) 123-4567",
        "555-123-4567",
        "415.555.2671",
        "06 12 34 56 78",
        "0612345678",
        "4155552671",
    ],
)
def test_phone_rule_still_finds_phone_numbers(phone):
    assert Redactor(["phone"], []).apply(f"call me at {phone} today") == f"call me at {REPLACEMENT} today"
    # A full stop after the number used to hide it (it was taken for a decimal point).
    assert Redactor(["phone"], []).apply(f"Call {phone}.") == f"Call {REPLACEMENT}."


def test_card_rule_still_finds_card_numbers():
    assert Redactor(["card"], []).apply("card 4111 1111 1111 1111 ok") == f"card {REPLACEMENT} ok"


@pytest.mark.parametrize(
    ("patterns", "secrets"),
    [
        (["(?P<ticket>T-\\d+)", "(?P<ticket>INC-\\d+)"], ["T-1", "INC-2"]),  # one group name twice
        (["secret", "(?i)token"], ["secret", "TOKEN"]),  # a global flag, not at the start once joined
    ],
)
def test_custom_patterns_that_compile_alone_never_stop_the_projects_ingest(
    signed_in, key_client, tenant, patterns, secrets
):
    # Each pattern compiled alone, so they were saved; joined into one expression at
    # ingest they did not, and every ingest of the project answered 500 (nothing stored).
    signed_in(tenant.admin).post(f"{BASE}/settings/", {"redact": ["email"], "custom_patterns": "\n".join(patterns)})

    ingest = key_client(tenant.project, ["ingest"]).post(
        "/api/v1/ingest", {"events": [{"type": "run", "id": "after", "input": " ".join(secrets)}]}, format="json"
    )

    assert ingest.status_code == 207 and ingest.json()["results"][0]["status"] == 201
    with organization_scope(tenant.organization):
        saved = IngestSettings.objects.filter(project=tenant.project, custom_patterns=patterns).exists()
        stored = Run.objects.get(trace_id="after").input
    if saved:  # refusing the patterns would be a fix too; saved, they must all apply
        assert not any(secret in stored for secret in secrets), stored


def test_email_redaction_takes_linear_time_on_a_long_string():
    # The e-mail rule used to rescan the rest of a run of letters from every position:
    # 40,000 letters took 1.6 s and 256 KiB (one batch event) about a minute, holding
    # the worker (and the GIL) for every tenant. A key of any project with the rule on
    # could send that.
    from runs.services.redaction import Redactor

    redactor = Redactor(["email"], [])
    # No clock here (CI must not depend on the machine's speed): at this size the old
    # rescanning rule ran for hours, so a return to it hangs the suite instead.
    hostile = "a" * 200_000 + " " + "b" * 200_000 + "@" + "c" * 100_000
    assert redactor.apply(hostile) == hostile  # no address in it: nothing redacted


@pytest.mark.parametrize(
    ("text_in", "text_out"),
    [
        ("mail john.doe+tag@example.co.uk now", "mail [REDACTED] now"),
        ("a@b.io,c_d@e-f.org", "[REDACTED],[REDACTED]"),
        ("x@a.com-y@b.org", "[REDACTED][REDACTED]"),
        ("no address here @ all", "no address here @ all"),
    ],
)
def test_email_redaction_still_finds_addresses(text_in, text_out):
    from runs.services.redaction import Redactor

    assert Redactor(["email"], []).apply(text_in) == text_out


def test_a_slow_custom_pattern_that_slipped_past_the_probes_redacts_the_whole_value(tenant):
    from runs.services.redaction import REPLACEMENT, Redactor

    # Saved before the probe existed, or slow only on text the probes do not try. On 5,000
    # characters it would run for ages: the time limit always stops it.
    redactor = Redactor([], [r"(x+x+)+y"])
    assert redactor.apply({"note": "x" * 5000}) == {"note": REPLACEMENT}
    assert redactor.apply("ticket xxy") == "ticket [REDACTED]"


def test_the_redactor_is_the_settings_as_saved_read_in_the_organization_in_scope(
    tenant, other_tenant, django_assert_num_queries
):
    """Read for every batch and every executed run by one statement: a rule saved applies
    to the next read, a rule removed stops applying, and another organization's scope
    (or none) does not read this project's rules."""
    from agentops.scoping import UnscopedQueryError
    from runs.services.redaction import NO_REDACTION, redactor_for

    project = tenant.project

    def save(redact, custom):
        ingest_settings_update(
            project=project, actor=tenant.owner, redact=redact, custom_patterns=custom, retention_days=None
        )

    with organization_scope(project.organization):
        assert redactor_for(project) is NO_REDACTION  # never saved
        save(["email"], [])
        with django_assert_num_queries(1):
            redactor = redactor_for(project)
        assert redactor.apply("mail bob@example.com") == f"mail {REPLACEMENT}"
        save([], ["secret"])
        assert redactor_for(project).apply("a secret for bob@example.com") == f"a {REPLACEMENT} for bob@example.com"
        save(["email"], [])
        assert redactor_for(project) is redactor  # the same rules: compiled once
        save([], [])
        assert redactor_for(project) is NO_REDACTION
        save(["email"], [])
    with organization_scope(other_tenant.organization):
        assert redactor_for(project) is NO_REDACTION
    with pytest.raises(UnscopedQueryError):
        redactor_for(project)
