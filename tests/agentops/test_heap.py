"""The garbage collector of the web and worker processes is settled once their code is
loaded (agentops.heap): what start-up loaded is frozen, and the young generation is
collected less often. Checked in real processes: as uvicorn imports the ASGI app, and as
`celery worker` starts before its pool forks."""

import subprocess
import sys

import pytest

from agentops.heap import YOUNG_THRESHOLD
from tests.worker_process import ROOT, worker_environment

# To the real stdout: a Celery worker sends sys.stdout to its log.
REPORT = "import gc, sys; print(gc.get_freeze_count(), gc.get_threshold()[0], gc.get_count()[2], file=sys.__stdout__)"


def _run(code: str) -> tuple[int, int, int]:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=worker_environment(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    frozen, young, oldest = map(int, result.stdout.split()[-3:])
    return frozen, young, oldest


@pytest.mark.django_db
def test_the_web_process_freezes_what_it_loaded():
    frozen, young, oldest = _run(f"import agentops.asgi; {REPORT}")
    # Django, the apps, their libraries and the URLconf: far more than a bare interpreter.
    assert frozen > 50_000
    assert young == YOUNG_THRESHOLD
    assert oldest == 0  # nothing left for a full collection to walk


@pytest.mark.django_db
def test_a_celery_worker_freezes_what_it_loaded_before_its_pool_starts():
    bare, default_young, _ = _run("from agentops.celery import app; app.loader.import_default_modules(); " + REPORT)
    assert (bare, default_young) == (0, 700)  # importing the app settles nothing
    frozen, young, _ = _run(
        "from agentops.celery import app\n"
        "worker = app.Worker(pool_cls='solo', quiet=True, hostname='heap-test@%h')\n"
        "worker.on_start()  # what `celery worker` runs before its pool and consumer start\n" + REPORT
    )
    assert frozen > 50_000
    assert young == YOUNG_THRESHOLD
