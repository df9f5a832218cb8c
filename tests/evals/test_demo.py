"""Evaluation demo data: a dataset, evaluators and two ended experiments, added once."""

from django.core.management import call_command

from agentops.scoping import organization_scope
from evals.models import Dataset, Experiment


def test_demo_evals_are_seeded_once_after_the_demo_agent(tenant, capsys):
    call_command("seed_demo_evals", "acme/agent")
    assert "no demo agent" in capsys.readouterr().out
    call_command("seed_demo_runs", "acme/agent")
    call_command("seed_demo_evals", "acme/agent")
    assert "2 experiments" in capsys.readouterr().out
    call_command("seed_demo_evals", "acme/agent")
    assert "already has the demo dataset" in capsys.readouterr().out
    with organization_scope(tenant.organization):
        dataset = Dataset.objects.get()
        experiments = list(Experiment.objects.order_by("id"))
    assert dataset.latest_version == 1
    assert [e.status for e in experiments] == ["succeeded", "succeeded"]
    assert [e.branch for e in experiments] == ["main", "feature-demo"]
    for experiment in experiments:
        assert experiment.completed_count == 8 and experiment.error_count == 0
        correct = experiment.summary["metrics"]["correct"]
        assert correct["n"] == 8 and 0 < correct["mean"] <= 1
        assert experiment.summary["metrics"]["used-calculator"]["mean"] == 1.0
