"""Weights & Biases logging of an ended experiment, through the real wandb SDK in
offline mode (it writes the run to disk exactly as it would send it)."""

import time

import pytest

from agentops.scoping import organization_scope
from agentops.services.secrets import provider_secret_set
from evals.services.experiments import experiment_start
from evals.services.wandb_export import log_experiment, wandb_payload
from runs.services.agents import agent_create
from tests.evals.factories import drive, make_dataset, make_evaluator


@pytest.fixture
def ended(tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
        dataset = make_dataset(
            tenant.project, [{"key": f"k{i}", "input": f"q{i}", "expected": f"q{i}"} for i in range(4)]
        )
        evaluator = make_evaluator(tenant.project, "mentions", "contains")
        experiment = experiment_start(
            project=tenant.project, actor=tenant.member, dataset=dataset, agent=agent, evaluators=[evaluator]
        )
        return drive(experiment)


def test_nothing_is_logged_without_a_key(tenant, ended):
    with organization_scope(tenant.organization):
        assert log_experiment(experiment_id=ended.pk) is False


def test_metrics_go_to_wandb_when_a_key_is_saved(tenant, ended, settings, tmp_path):
    settings.WANDB_MODE = "offline"
    settings.WANDB_DIR = tmp_path
    with organization_scope(tenant.organization):
        provider_secret_set(organization=tenant.organization, actor=tenant.owner, provider="wandb", api_key="w" * 40)
        config, summary = wandb_payload(ended)
        assert log_experiment(experiment_id=ended.pk) is True
    assert summary["mentions/mean"] == 1.0 and summary["mentions/pass_rate"] == 1.0 and summary["items"] == 4
    assert config["dataset"] == "qa" and config["agent"] == "echo" and config["evaluators"] == ["mentions"]
    records = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(records) == 1
    # wandb's own service process writes the run file; under load its last writes can
    # land a moment after finish() returns.
    expected = (b"mentions/mean", b"mentions/ci_low", b"latency_ms/p50", ended.name.encode(), b"evaluation")
    deadline = time.monotonic() + 30
    written = records[0].read_bytes()
    while not all(part in written for part in expected) and time.monotonic() < deadline:
        time.sleep(0.2)
        written = records[0].read_bytes()
    for part in expected:
        assert part in written, part


def test_a_default_install_has_the_wandb_sdk():
    """`make run` installs requirements.txt only: a saved W&B key must not meet a worker
    that lacks the SDK (it used to log "wandb package is not installed" and nothing else)."""
    from importlib.metadata import version
    from pathlib import Path

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[2]
    lines = (root / "requirements.txt").read_text().splitlines()
    pins = {
        Requirement(line).name.lower(): Requirement(line).specifier
        for line in (line.split("#")[0].strip() for line in lines)
        if line and not line.startswith("-")
    }
    assert "wandb" in pins, "wandb is not in requirements.txt"
    assert version("wandb") in pins["wandb"]
