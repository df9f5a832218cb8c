"""The tests' in-process Celery worker: a worker still inside a task when its test ends
fails that test with where it was stuck, and the next worker still starts (with Celery's
``start_worker`` alone, every later test waited for ever)."""

from __future__ import annotations

import threading
import time

import pytest

from agentops.celery import app
from tests import worker_thread as worker_thread_module
from tests.worker_thread import worker_thread

napping, napped = threading.Event(), threading.Event()


@app.task(name="tests.nap")
def nap(seconds: float) -> float:
    napping.set()
    time.sleep(seconds)
    napped.set()
    return seconds


def test_a_worker_still_in_a_task_fails_its_test_and_the_next_worker_starts(monkeypatch):
    napping.clear()
    napped.clear()
    with monkeypatch.context() as patched:
        patched.setattr(worker_thread_module, "SHUTDOWN_TIMEOUT", 1)
        with pytest.raises(RuntimeError, match=r"still running a task 1 s after its test ended(.|\n)*in nap"):
            with worker_thread():
                nap.delay(4)
                assert napping.wait(30), "the worker never started the task"

    with worker_thread():
        assert napped.is_set()  # it waited for the first worker to finish its task
        assert nap.delay(0).get(timeout=30) == 0
    assert not worker_thread_module._left_running
