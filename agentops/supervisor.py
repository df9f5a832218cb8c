"""Keep the platform's processes running: ``serve`` starts the web server, a Celery
worker and Celery beat through a Supervisor, which restarts any of them that exits
(crash, out-of-memory kill, SIGKILL) and says so, until it is told to stop (Ctrl-C or
SIGTERM to ``serve``); then it stops them all.

A child that keeps failing is restarted after a delay that doubles from
``Backoff.initial`` to ``Backoff.maximum`` (1 s to 30 s), so a broken setting does not
spin the machine; once a child has stayed up ``Backoff.stable_after`` seconds, its next
failure starts again from the initial delay. Nothing here imports Django.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial: float = 1.0
    maximum: float = 30.0
    stable_after: float = 60.0

    def delay(self, failures: int) -> float:
        """The wait before restarting a child that has failed ``failures`` times in a row."""
        return min(self.maximum, self.initial * 2 ** max(0, failures - 1))


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


class _Child:
    def __init__(self, name: str, argv: list[str]):
        self.name, self.argv = name, argv
        self.process: subprocess.Popen | None = None
        self.started_at = 0.0
        self.failures = 0
        self.restart_at: float | None = None


class Supervisor:
    """Run ``commands`` (name -> argv) and keep them running until ``stop()``."""

    def __init__(
        self,
        commands: dict[str, list[str]],
        *,
        say: Callable[[str], None],
        backoff: Backoff = Backoff(),
        poll_interval: float = 0.2,
        grace_seconds: float = 20.0,
    ):
        self.children = {name: _Child(name, argv) for name, argv in commands.items()}
        self.say = say
        self.backoff = backoff
        self.poll_interval = poll_interval
        self.grace_seconds = grace_seconds
        self._stopping = threading.Event()

    def stop(self, *_signal_args) -> None:
        """Ask ``run`` to stop every child and return (safe in a signal handler)."""
        self._stopping.set()

    def pid(self, name: str) -> int | None:
        process = self.children[name].process
        return process.pid if process is not None and process.poll() is None else None

    def _spawn(self, child: _Child) -> None:
        child.process = subprocess.Popen(child.argv)
        child.started_at = time.monotonic()
        child.restart_at = None

    def _check(self, child: _Child, now: float) -> None:
        if child.process is not None:
            returncode = child.process.poll()
            if returncode is None:
                return
            uptime = now - child.started_at
            child.failures = 1 if uptime >= self.backoff.stable_after else child.failures + 1
            delay = self.backoff.delay(child.failures)
            child.process, child.restart_at = None, now + delay
            self.say(
                f"{child.name} {describe_exit(returncode)} after {uptime:.0f} s; "
                f"restarting it in {delay:g} s (failure {child.failures} in a row)"
            )
        elif child.restart_at is not None and now >= child.restart_at and not self._stopping.is_set():
            self._spawn(child)
            self.say(f"{child.name} restarted (pid {child.process.pid})")

    def run(self) -> None:
        """Start every child, restart those that exit, and stop them all once ``stop``
        is called."""
        for child in self.children.values():
            self._spawn(child)
        try:
            while not self._stopping.wait(self.poll_interval):
                now = time.monotonic()
                for child in self.children.values():
                    self._check(child, now)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        running = [c.process for c in self.children.values() if c.process is not None and c.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_seconds
        for child in self.children.values():
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{child.name} did not stop within {self.grace_seconds:g} s; killing it")
                child.process.kill()
                child.process.wait()
