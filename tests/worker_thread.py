"""A real Celery worker in a thread of the test process, consuming from the test run's
Redis queue (the ``celery_worker`` fixture, and tests that restart a worker).

Celery's ``start_worker`` stops its worker by setting ``celery.worker.state.should_terminate``
and waiting for the thread; when the thread is still inside a task at the deadline it
raises, and leaves that flag set, so the next worker it starts ends before it is ready
while ``start_worker`` waits for it without a timeout: every test after it hung. Here a
worker that does not stop fails its own test with the stack it was stuck in, and the next
worker first waits for it to finish, or fails at once if it never does.
"""

from __future__ import annotations

import sys
import threading
import traceback
from contextlib import contextmanager

import pytest

# How long a worker may take, once its test has ended, to finish the task it is in.
SHUTDOWN_TIMEOUT = 60
# How long the next worker waits for one that was late to finish that task.
LATE_WORKER_TIMEOUT = 120

_left_running: list[threading.Thread] = []


@contextmanager
def worker_thread():
    """Start a solo-pool worker in a thread; yields the Celery app."""
    from celery.contrib.testing.worker import start_worker
    from celery.worker import state

    from agentops.celery import app

    _wait_for_earlier_workers(state)
    before = set(threading.enumerate())
    started: set[threading.Thread] = set()
    try:
        with start_worker(
            app,
            pool="solo",
            concurrency=1,
            perform_ping_check=False,
            loglevel="WARNING",
            shutdown_timeout=SHUTDOWN_TIMEOUT,
        ):
            started = set(threading.enumerate()) - before  # the worker's thread, ready
            yield app
    except RuntimeError as exc:
        running = [thread for thread in started if thread.is_alive()]
        if not running:
            raise
        _left_running.extend(running)
        raise RuntimeError(
            f"the Celery worker was still running a task {SHUTDOWN_TIMEOUT} s after its test ended "
            f"(a test must wait for the work it starts); where it was:\n{_stacks(running)}"
        ) from exc


def _wait_for_earlier_workers(state) -> None:
    while _left_running:
        thread = _left_running[0]
        thread.join(LATE_WORKER_TIMEOUT)
        if thread.is_alive():
            pytest.fail(
                f"a Celery worker of an earlier test is still running a task {LATE_WORKER_TIMEOUT} s later; "
                f"where it is:\n{_stacks([thread])}",
                pytrace=False,
            )
        _left_running.pop(0)
    # Left set by a worker that stopped late: a worker started with it set ends at once.
    state.should_terminate = None


def _stacks(threads: list[threading.Thread]) -> str:
    frames = sys._current_frames()
    return "\n".join(
        f"{thread.name}:\n{''.join(traceback.format_stack(frames[thread.ident]))}"
        for thread in threads
        if thread.ident in frames
    )
