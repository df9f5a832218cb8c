"""The supervisor behind `serve` (`make run`), with real child processes: a child that
dies is restarted with a growing delay and the output says so; stopping stops all."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from agentops.supervisor import Backoff, Supervisor

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
FAILS_AT_ONCE = [sys.executable, "-c", "raise SystemExit(3)"]
FAILS_AFTER_A_SECOND = [sys.executable, "-c", "import time; time.sleep(1); raise SystemExit(4)"]


class Running:
    """A Supervisor run in a thread (``serve`` runs it in its main thread), with what it
    said."""

    def __init__(self, commands, **options):
        self.lines: list[str] = []
        self.supervisor = Supervisor(commands, say=self.lines.append, poll_interval=0.05, **options)
        self.thread = threading.Thread(target=self.supervisor.run, daemon=True)

    def wait_for(self, condition, what: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(0.05)
        pytest.fail(f"{what} did not happen within {timeout} s; the supervisor said: {self.lines}")


@pytest.fixture
def running():
    started: list[Running] = []

    def start(commands, **options) -> Running:
        run = Running(commands, **options)
        started.append(run)
        run.thread.start()
        return run

    yield start
    for run in started:
        run.supervisor.stop()
        run.thread.join(timeout=60)


def test_a_killed_child_is_restarted_and_the_output_says_so(running):
    run = running({"web": SLEEPER, "worker": SLEEPER})
    first = run.wait_for(lambda: run.supervisor.pid("worker"), "the worker starting")
    web = run.supervisor.pid("web")

    os.kill(first, signal.SIGKILL)

    second = run.wait_for(
        lambda: (pid := run.supervisor.pid("worker")) and pid != first and pid, "the worker restarting"
    )
    assert run.lines[0].startswith("worker was killed by SIGKILL after ")
    assert run.lines[0].endswith("restarting it in 1 s (failure 1 in a row)")
    assert run.lines[1] == f"worker restarted (pid {second})"
    assert run.supervisor.pid("web") == web  # the others were left alone


def test_stop_ends_every_child_and_restarts_none(running):
    run = running({"web": SLEEPER, "worker": SLEEPER, "beat": SLEEPER})
    run.wait_for(lambda: all(run.supervisor.pid(name) for name in ("web", "worker", "beat")), "all starting")
    processes = [child.process for child in run.supervisor.children.values()]

    run.supervisor.stop()
    run.thread.join(timeout=60)

    assert not run.thread.is_alive()
    assert [process.returncode for process in processes] == [-signal.SIGTERM] * 3
    assert run.lines == []


def test_a_child_that_keeps_failing_waits_longer_each_time(running):
    run = running({"worker": FAILS_AT_ONCE}, backoff=Backoff(initial=0.05, maximum=0.2, stable_after=600))

    run.wait_for(lambda: sum("exited with code 3" in line for line in run.lines) >= 4, "four failures")

    delays = [line.split("restarting it in ")[1].split(" s")[0] for line in run.lines if "exited" in line][:4]
    assert delays == ["0.05", "0.1", "0.2", "0.2"]


def test_a_child_that_stayed_up_starts_again_from_the_shortest_delay(running):
    run = running({"worker": FAILS_AFTER_A_SECOND}, backoff=Backoff(initial=0.05, maximum=10, stable_after=0.5))

    run.wait_for(lambda: sum("exited with code 4" in line for line in run.lines) >= 3, "three failures")

    failures = [line for line in run.lines if "exited" in line][:3]
    assert all(line.endswith("restarting it in 0.05 s (failure 1 in a row)") for line in failures), failures


def test_backoff_doubles_from_one_second_to_thirty():
    assert [Backoff().delay(failures) for failures in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
