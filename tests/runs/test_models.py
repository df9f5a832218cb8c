"""What a run's status means: ``Run.ENDED`` and ``Run.COMPLETED`` are the one definition
of each (docs/architecture.md, "Names"), and no other module spells them out."""

import re
from pathlib import Path

import pytest

from runs.models import Run

ROOT = Path(__file__).resolve().parent.parent.parent
APPS = ("agentops", "billing", "runs", "evals", "bench")

# Two or more ended statuses listed together: in Python (``Run.Status.SUCCEEDED,
# Run.Status.FAILED``), as strings ("succeeded", "failed") or in SQL ('succeeded', 'failed').
_LISTED = re.compile(
    r"Run\.Status\.(?:SUCCEEDED|FAILED|CANCELLED)\s*,\s*Run\.Status\.(?:SUCCEEDED|FAILED|CANCELLED)"
    r"|[\"'](?:succeeded|failed|cancelled)[\"']\s*,\s*[\"'](?:succeeded|failed|cancelled)[\"']"
)
# The not-ended statuses spelled out instead (a template's "queued or running or waiting").
_UNFINISHED = re.compile(
    r"Run\.Status\.(?:QUEUED|RUNNING|WAITING)\s*,\s*Run\.Status\.(?:QUEUED|RUNNING|WAITING)\s*,"
    r"|run\.status == \"(?:queued|running|waiting)\" or run\.status == \"(?:queued|running|waiting)\""
)


@pytest.mark.parametrize("status", list(Run.Status))
def test_a_run_has_ended_once_it_succeeded_failed_or_was_cancelled(status):
    ended = status in ("succeeded", "failed", "cancelled")
    assert (status in Run.ENDED) is ended
    assert Run(status=status).ended is ended


def test_a_completed_run_ran_to_its_end_and_a_cancelled_one_did_not():
    assert Run.COMPLETED == {"succeeded", "failed"}
    assert Run.COMPLETED < Run.ENDED


def test_no_module_outside_the_model_lists_the_ended_statuses_of_a_run():
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*")):
            if path.suffix not in (".py", ".html") or "migrations" in path.parts or path.name == "models.py":
                continue
            text = path.read_text()
            found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in _LISTED.finditer(text)]
            found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in _UNFINISHED.finditer(text)]
    for template in sorted((ROOT / "templates").rglob("*.html")):
        found += [f"{template.relative_to(ROOT)}: {m.group(0)}" for m in _UNFINISHED.finditer(template.read_text())]
    assert found == []
