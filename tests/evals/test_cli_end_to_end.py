"""End to end: the CI client, as its own process, against a running server with a real
Celery worker: a 20-item experiment of the offline model, a gate it fails (exit 1,
JUnit and Markdown written), then one it passes (exit 0)."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentops.scoping import organization_scope
from evals.models import Experiment
from runs.services.agents import agent_create
from tests.evals.factories import make_dataset, make_evaluator

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agentops_eval", *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.django_db(transaction=True)
def test_the_cli_runs_an_experiment_and_fails_the_gate(live_server, celery_worker, tenant, make_api_key, tmp_path):
    with organization_scope(tenant.organization):
        agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
    # The offline model echoes the question: 14 of 20 items hold their expected words.
    items = [
        {"key": f"q{i:02}", "input": f"question {i}", "expected": f"question {i}" if i < 14 else "another answer"}
        for i in range(20)
    ]
    make_dataset(tenant.project, items, name="support-qa")
    make_evaluator(tenant.project, "mentions", "contains")
    _, raw_key = make_api_key(tenant.project, scopes=("read", "execute"))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_"))},
        "PYTHONPATH": str(CLI_DIR),
        "AGENTOPS_URL": live_server.url,
        "AGENTOPS_PROJECT": f"{tenant.organization.slug}/{tenant.project.slug}",
        "AGENTOPS_API_KEY": raw_key,
    }
    common = ["run", "--dataset", "support-qa", "--agent", "echo", "--evaluator", "mentions", "--poll", "0.3"]

    failed = _cli(
        [
            *common,
            "--branch",
            "feature",
            "--gate",
            "mentions>=0.8",
            "--junit",
            str(tmp_path / "gate.xml"),
            "--markdown",
            str(tmp_path / "summary.md"),
        ],
        env,
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "FAIL" in failed.stdout and "mentions" in failed.stdout
    suite = ET.parse(tmp_path / "gate.xml").getroot()
    cases = suite.findall(".//testcase")
    failures = suite.findall(".//failure")
    assert len(cases) >= 1 and len(failures) == 1
    assert "0.7" in failures[0].get("message", "") + (failures[0].text or "")
    summary = (tmp_path / "summary.md").read_text()
    assert "FAILED" in summary and "mentions" in summary

    with organization_scope(tenant.organization):
        experiment = Experiment.objects.get()
    assert experiment.status == "succeeded" and experiment.item_count == 20 and experiment.completed_count == 20
    assert experiment.summary["metrics"]["mentions"]["mean"] == 0.7
    assert experiment.branch == "feature"

    passed = _cli([*common, "--gate", "mentions>=0.6", "--gate", "error_rate<=0"], env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
