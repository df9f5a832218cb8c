"""Runs as billing's usage source (runs/usage.py)."""

from billing.usage import usage_source
from runs.usage import RunsUsageSource


def test_runs_registers_its_source_when_ready():
    assert isinstance(usage_source(), RunsUsageSource)
