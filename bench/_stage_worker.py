"""A `celery worker` for the benchmarks that also measures where its CPU goes.

Started like ``python -m celery -A agentops worker ...`` (same arguments); when
``BENCH_STAGES_DIR`` is set it wraps the functions of each stage of an executed item
(listed in ``STAGES``) to add up the thread CPU time spent in each, exclusive of the
stages called inside it, and the SQL statements each sends; what a task spends outside
every stage is its stage ``other (task)``. When the worker stops it writes
``<pid>.json`` there, with the process's whole CPU time (Celery's own threads, the
broker, the pool) beside it. The wrappers cost a few microseconds a call: the CPU per
item of an unmeasured run is the benchmark's figure, this one is its breakdown.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (module, attribute, stage). An attribute ``Class.method`` wraps a method. Every module
# namespace holding the same function object gets the wrapper, so ``from x import f``
# callers are measured too.
STAGES = [
    ("runs.execution.claims", "claim_run", "claim"),
    ("runs.execution.claims", "save_state", "state saves"),
    ("runs.services.redaction", "redactor_for", "run setup (redactor, tools, provider)"),
    ("runs.tools.registry", "tools_for", "run setup (redactor, tools, provider)"),
    ("agentops.llm.providers", "provider_for", "run setup (redactor, tools, provider)"),
    ("agentops.llm.mistral", "MistralProvider.chat", "model call (mistralai client, HTTP, parsing)"),
    ("runs.live", "TextStream.__init__", "live notifications"),
    ("runs.live", "TextStream.write", "live notifications"),
    ("runs.live", "TextStream.close", "live notifications"),
    ("runs.live", "announce_runs_ingested", "live notifications"),
    ("evals.live", "announce_result", "live notifications"),
    ("evals.live", "announce_started", "live notifications"),
    ("evals.live", "announce_ended", "live notifications"),
    ("runs.ingest", "ingest", "step writes (ingest)"),
    ("billing.ledger", "ledger_mark", "billing ledger"),
    ("runs.services.events", "event_append", "stream events"),
    ("runs.services.events", "_notify", "stream events"),
    ("evals.services.experiments.item_scoring", "on_run_ended", "scoring (run ended -> scored)"),
    ("evals.services.experiments.item_scoring", "score_result", "scoring (run ended -> scored)"),
    ("evals.services.wandb_export.runs", "on_run_ended", "W&B receiver"),
    ("evals.services.experiments.totals", "count_finished", "experiment progress"),
    ("evals.services.experiments.advance", "experiment_advance", "experiment progress"),
    ("evals.services.experiments.advance", "lock_experiment", "experiment progress"),
    ("evals.services.experiments.advance", "advance_locked", "experiment progress"),
    ("runs.execution.starting", "create_executed_run", "next item's run created"),
    ("celery.app.task", "Task.apply_async", "task dispatch (send)"),
]

_local = threading.local()
_lock = threading.Lock()
CPU: dict[str, float] = {}
SQL: dict[str, int] = {}
TASKS: dict[str, int] = {}
# The cyclic garbage collector's CPU and its collections per generation, those run inside
# a task (in its thread; start-up's are left out): a share of the stages' CPU, shown apart.
GC = {"cpu": 0.0, "collections": [0, 0, 0]}


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _enter(stage: str) -> None:
    _stack().append([stage, time.thread_time(), 0.0])


def _leave() -> None:
    stage, started, inner = _stack().pop()
    spent = time.thread_time() - started
    with _lock:
        CPU[stage] = CPU.get(stage, 0.0) + spent - inner
    if _stack():
        _stack()[-1][2] += spent


def _measured(stage: str, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if not _stack():  # called outside a task (Celery's own threads): not an item's stage
            return function(*args, **kwargs)
        _enter(stage)
        try:
            return function(*args, **kwargs)
        finally:
            _leave()

    wrapper.__bench_wrapped__ = True
    return wrapper


SQL_LOG = os.environ.get("BENCH_SQL_LOG")
# With BENCH_PROFILE set, each task thread also runs cProfile over its tasks; the merged
# statistics go to <pid>.prof beside the report (read them with pstats).
PROFILE = bool(os.environ.get("BENCH_PROFILE"))
PROFILES: list = []


def _count_sql(execute, sql, params, many, context):
    stack = _stack()
    stage = stack[-1][0] if stack else "outside tasks"
    with _lock:
        SQL[stage] = SQL.get(stage, 0) + 1
        if SQL_LOG:
            with open(SQL_LOG, "a") as log:
                log.write(f"{threading.get_ident()}\t{stage}\t{' '.join(str(sql).split())[:200]}\n")
    return execute(sql, params, many, context)


def _collecting(phase: str, info: dict) -> None:
    if not getattr(_local, "stack", None):
        return
    if phase == "start":
        _local.gc_started = time.thread_time()
        return
    spent = time.thread_time() - getattr(_local, "gc_started", time.thread_time())
    with _lock:
        GC["cpu"] += spent
        GC["collections"][info["generation"]] += 1


def install() -> None:
    import gc
    import importlib

    gc.callbacks.append(_collecting)

    from celery.signals import task_postrun, task_prerun
    from django.db.backends.signals import connection_created

    for module_name, attribute, stage in STAGES:
        module = importlib.import_module(module_name)
        if "." in attribute:
            owner_name, name = attribute.split(".")
            owner = getattr(module, owner_name)
            setattr(owner, name, _measured(stage, getattr(owner, name)))
            continue
        original = getattr(module, attribute)
        wrapper = _measured(stage, original)
        for loaded in list(sys.modules.values()):
            namespace = getattr(loaded, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                if value is original:
                    setattr(loaded, key, wrapper)

    @task_prerun.connect(weak=False)
    def started(task=None, **kwargs):
        if PROFILE:
            profile = getattr(_local, "profile", None)
            if profile is None:
                import cProfile

                profile = _local.profile = cProfile.Profile(time.thread_time)
                with _lock:
                    PROFILES.append(profile)
            profile.enable()
        _local.stack = []
        _enter("other (task)")
        with _lock:
            TASKS[task.name] = TASKS.get(task.name, 0) + 1

    @task_postrun.connect(weak=False)
    def ended(**kwargs):
        if _stack():
            _leave()
        if PROFILE:
            _local.profile.disable()

    def counted(connection, **kwargs):
        if _count_sql not in connection.execute_wrappers:
            connection.execute_wrappers.append(_count_sql)

    connection_created.connect(counted, weak=False)


def dump(directory: str) -> None:
    import gc

    times = os.times()
    with _lock:
        report = {
            "pid": os.getpid(),
            "process_cpu": times.user + times.system,
            "stages_cpu": dict(CPU),
            "sql": dict(SQL),
            "tasks": dict(TASKS),
            "gc": {
                "cpu": GC["cpu"],
                "collections": list(GC["collections"]),
                "threshold": gc.get_threshold(),
                "frozen": gc.get_freeze_count(),
            },
        }
    Path(directory, f"{os.getpid()}.json").write_text(json.dumps(report))
    if PROFILES:
        import pstats

        stats = pstats.Stats(PROFILES[0])
        for profile in PROFILES[1:]:
            stats.add(profile)
        stats.dump_stats(str(Path(directory, f"{os.getpid()}.prof")))


def main() -> None:
    directory = os.environ.get("BENCH_STAGES_DIR")
    if directory:
        import django

        django.setup()
        install()
        import atexit

        from celery.signals import worker_shutdown

        worker_shutdown.connect(lambda **kwargs: dump(directory), weak=False)
        atexit.register(dump, directory)
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
