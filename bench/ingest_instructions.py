"""Benchmark: the web's Python work per ingested span, counted in instructions.

Wall-clock and CPU-time figures on a shared or throttled machine move by tens of percent
between runs of the same code (bench/ingest_otlp.py's CPU per span did, on 2026-11-29,
between 416 and 506 us with nothing else running). A change of a few percent in the
ingestion's Python cannot be seen that way. Valgrind's callgrind counts the
instructions a process executes: the same code on the same input gives the same count
to within about 1%, whatever the machine is doing.

This runs the ingestion's web side in-process, exactly as the OTLP receiver does for a
request of bench/ingest_otlp.py's traces (512 spans, protobuf): decode, map spans to
events, ``ingest()``; under ``valgrind --tool=callgrind`` with instrumentation switched
on only for the measured requests (the setup and two warm-up requests run
uninstrumented). It prints instructions per span. PostgreSQL's work is in its own
processes and not counted (bench/ingest_otlp.py gives its CPU).

Compare two versions of the code by running it in each checkout, one after the other:

    .venv/bin/python bench/ingest_instructions.py [--requests 2]

Needs valgrind (Debian's package ``valgrind``: ``valgrind`` and ``callgrind_control``).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from io import StringIO
from pathlib import Path

from _platform import ROOT, private_platform

SPANS_PER_REQUEST = 512
WARM_UP_REQUESTS = 2


def child(requests: int, signals: Path) -> None:
    """Under valgrind: set up, warm up, tell the parent (``ready``), wait for it to switch
    the instrumentation on (``go``), ingest ``requests`` requests, tell it (``done``)."""
    from ingest_otlp import TRACES_PER_REQUEST, build_request

    with private_platform(ALLOWED_HOSTS="127.0.0.1"):
        from django.core.management import call_command

        from agentops.heap import settle_heap
        from agentops.models import Project
        from agentops.scoping import dangerously_unscoped, organization_scope
        from runs.api.otlp import store
        from runs.otlp import decode, map_traces

        call_command("create_organization", "bench", "--owner", "bench@example.com", stdout=StringIO())
        call_command("create_project", "bench/agent", stdout=StringIO())
        with dangerously_unscoped("benchmark set-up"):
            project = Project.objects.get(organization__slug="bench", slug="agent")
        rng = random.Random(7)
        bodies = [build_request(i, i * TRACES_PER_REQUEST, rng) for i in range(WARM_UP_REQUESTS + requests)]

        def receive(body: bytes) -> None:
            batch = map_traces(decode.decode_traces(body, decode.PROTOBUF))
            with organization_scope(project.organization):
                store(project, batch)

        for body in bodies[:WARM_UP_REQUESTS]:
            receive(body)
        settle_heap()  # as a web process is (agentops/asgi.py)
        (signals / "ready").write_text(str(os.getpid()))
        while not (signals / "go").exists():
            time.sleep(0.05)
        for body in bodies[WARM_UP_REQUESTS:]:
            receive(body)
        (signals / "done").touch()
        while (signals / "go").exists():  # the parent dumps the counts, then lets go
            time.sleep(0.05)


def _wait_for(path: Path, process: subprocess.Popen) -> None:
    while not path.exists():
        if process.poll() is not None:
            sys.exit(f"the measured process ended early (exit {process.returncode}); see its log above")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2, help="measured requests of 512 spans")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.requests, Path(args.child))
        return
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: install Debian's valgrind package")
    signals = Path(tempfile.mkdtemp(prefix="agentops-instructions-"))
    log = signals / "valgrind.log"
    try:
        with open(log, "w") as out:
            process = subprocess.Popen(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--instr-atstart=no",
                    f"--callgrind-out-file={signals}/callgrind.out.%p",
                    sys.executable,
                    __file__,
                    "--requests",
                    str(args.requests),
                    "--child",
                    str(signals),
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_for(signals / "ready", process)
            pid = (signals / "ready").read_text()
            subprocess.run(["callgrind_control", "--zero", pid], check=True, capture_output=True)
            subprocess.run(["callgrind_control", "--instr=on", pid], check=True, capture_output=True)
            (signals / "go").touch()
            _wait_for(signals / "done", process)
            subprocess.run(["callgrind_control", "--instr=off", pid], check=True, capture_output=True)
            (signals / "go").unlink()
            process.wait(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
        text = log.read_text()
        collected = re.search(r"Collected : (\d+)", text)
        if process.returncode != 0 or collected is None:
            print(text[-3000:])
            sys.exit("the measured process failed")
        instructions = int(collected.group(1))
        spans = args.requests * SPANS_PER_REQUEST
        print(f"requests measured: {args.requests} of {SPANS_PER_REQUEST} spans (after {WARM_UP_REQUESTS} to warm up)")
        print(
            f"web Python per span (decode, map, ingest()'s Python): {instructions / spans / 1000:,.1f} thousand "
            f"instructions ({instructions:,} in all); run it in another checkout to compare"
        )
    finally:
        shutil.rmtree(signals, ignore_errors=True)


if __name__ == "__main__":
    main()
