"""Every ended run logged to Weights & Biases when the project chose "runs": through the
real wandb SDK in offline mode and a real Celery worker, read back from the run files
wandb writes (``run-<id>.wandb``, the records it would upload)."""

from __future__ import annotations

import json
import struct
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.utils import timezone
from wandb.proto import wandb_internal_pb2

from agentops.models import ProviderSecret
from agentops.scoping import organization_scope
from agentops.services.secrets import provider_secret_set
from evals.models import WandbExport
from evals.services.experiments import experiment_start
from evals.services.wandb_export import log_experiment, log_runs, lost_exports, sweep
from evals.services.wandb_export.retry import LOST_AFTER
from evals.tasks import sweep_wandb
from runs.events import RunEvent, StepEvent
from runs.ingest import ingest
from runs.models import Run
from runs.services.agents import agent_create
from runs.services.settings import ingest_settings_update
from tests.evals.factories import drive, make_dataset, make_evaluator

# --- Reading what wandb wrote -------------------------------------------------------------------


def _records(path: Path):
    """The protobuf records of a .wandb file (a LevelDB-style log of 32 KiB blocks)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, block, pending = 7, 32768, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + 7])
        position += 7
        pending += data[position : position + length]
        position += length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def logged_runs(wandb_dir: Path, run_id: str) -> list[dict]:
    """Each time W&B run ``run_id`` was opened: its config and summary as written."""
    found = []
    for path in sorted(wandb_dir.glob(f"wandb/offline-run-*/run-{run_id}.wandb")):
        config, summary = {}, {}
        for record in _records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "config":
                config.update({item.key: json.loads(item.value_json) for item in record.config.update})
            elif kind == "summary":
                summary.update({item.key: json.loads(item.value_json) for item in record.summary.update if item.key})
        found.append({"config": config, "summary": summary})
    return found


def wait_for(condition, what: str):
    """Wait for the worker (and wandb's own service process, which writes the files)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# --- Fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def offline(settings, tmp_path):
    settings.WANDB_MODE = "offline"
    settings.WANDB_DIR = tmp_path
    return tmp_path


def choose(tenant, mode: str, *, key: bool = True) -> None:
    with organization_scope(tenant.organization):
        if key:
            provider_secret_set(
                organization=tenant.organization, actor=tenant.owner, provider="wandb", api_key="w" * 40
            )
        ingest_settings_update(
            project=tenant.project,
            actor=tenant.admin,
            redact=[],
            custom_patterns=[],
            retention_days=None,
            wandb_logging=mode,
        )


def ingest_ended_run(tenant, trace_id: str = "trace-1") -> Run:
    """A run sent from outside (the batch API's path), ended, with one priced LLM step."""
    with organization_scope(tenant.organization):
        ingest(
            project=tenant.project,
            runs=[
                RunEvent(
                    trace_id=trace_id,
                    fields={
                        "name": "support answer",
                        "agent_name": "support",
                        "agent_version": "7",
                        "status": "succeeded",
                    },
                )
            ],
            steps=[
                StepEvent(
                    trace_id=trace_id,
                    span_id="llm",
                    kind="llm",
                    model="mistral-small-latest",
                    input_tokens=120,
                    output_tokens=30,
                    provider="mistral",
                    status="ok",
                )
            ],
            announce=False,
        )
        return Run.objects.get(trace_id=trace_id)


def export_of(tenant, run: Run) -> WandbExport | None:
    with organization_scope(tenant.organization):
        return WandbExport.objects.filter(run=run).first()


# --- Runs ---------------------------------------------------------------------------------------


def test_an_ingested_run_is_logged_and_a_later_score_updates_the_same_wandb_run(
    celery_worker, tenant, offline, client_for
):
    choose(tenant, "runs")
    run = ingest_ended_run(tenant)
    assert sweep() == 1
    wandb_id = f"agentops-run-{run.pk}"
    wait_for(lambda: (e := export_of(tenant, run)) and e.status == WandbExport.Status.LOGGED, "the run logged")
    first = wait_for(lambda: [r for r in logged_runs(offline, wandb_id) if "cost" in r["summary"]], "the run file")
    assert len(first) == 1
    config, summary = first[0]["config"], first[0]["summary"]
    assert (config["agent"], config["agent_version"], config["model"]) == ("support", "7", "mistral-small-latest")
    assert config["agentops_run"] == run.pk and config["parameters"] == {}
    assert summary["status"] == "succeeded"
    assert (summary["input_tokens"], summary["output_tokens"], summary["tokens"]) == (120, 30, 150)
    assert summary["cost"] == pytest.approx(float(run.total_cost)) and run.total_cost > 0
    assert "latency_ms" in summary and not any(key.startswith("scores/") for key in summary)

    # Swept again with nothing new: not logged twice.
    assert sweep() == 0

    # A person scores the run later: the same W&B run (same id) gets the score.
    with organization_scope(tenant.organization):
        make_evaluator(tenant.project, "helpful", "human", {"scale": "1-5"})
    scored = client_for(tenant.member).post(
        f"/api/v1/projects/acme/agent/runs/{run.pk}/scores/", {"scores": {"helpful": 5}}, format="json"
    )
    assert scored.status_code == 201, scored.content
    assert sweep() == 1
    logged = wait_for(
        lambda: [r for r in logged_runs(offline, wandb_id) if "scores/helpful" in r["summary"]], "the score logged"
    )
    assert logged[0]["summary"]["scores/helpful"] == 1.0
    assert logged[0]["config"]["agentops_run"] == run.pk
    assert len(list(offline.glob("wandb/offline-run-*"))) == 2  # both opens were of agentops-run-<id>


def test_an_executed_run_is_queued_when_it_ends_without_waiting_for_the_sweep(celery_worker, tenant, offline):
    choose(tenant, "runs")
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
        dataset = make_dataset(tenant.project, [{"key": "k0", "input": "q0", "expected": "q0"}])
        evaluator = make_evaluator(tenant.project, "mentions", "contains")
        experiment = drive(
            experiment_start(
                project=tenant.project, actor=tenant.member, dataset=dataset, agent=agent, evaluators=[evaluator]
            )
        )
        run = Run.objects.get(tags__contains=[f"experiment:{experiment.pk}"])
    wait_for(lambda: (e := export_of(tenant, run)) and e.status == WandbExport.Status.LOGGED, "the run logged")
    logged = wait_for(
        lambda: [r for r in logged_runs(offline, f"agentops-run-{run.pk}") if "status" in r["summary"]], "the file"
    )
    assert logged[0]["config"]["agent"] == "echo" and logged[0]["config"]["model"] == "offline"
    assert logged[0]["summary"]["status"] == "succeeded"

    # The experiment's end is logged too, as its own W&B run (waited for: the worker is
    # still logging it when the run's logging is done).
    def experiment_logged():
        with organization_scope(tenant.organization):
            return WandbExport.objects.filter(experiment=experiment, status=WandbExport.Status.LOGGED).exists()

    wait_for(experiment_logged, "the experiment logged")
    assert [r for r in logged_runs(offline, f"agentops-experiment-{experiment.pk}") if "items" in r["summary"]]


def test_runs_are_not_logged_when_the_project_logs_experiments_only(tenant, offline):
    choose(tenant, "experiments")
    run = ingest_ended_run(tenant)
    assert sweep() == 0
    with organization_scope(tenant.organization):
        assert log_runs(run_ids=[run.pk]) == []
    assert export_of(tenant, run) is None
    assert not list(offline.glob("wandb/offline-run-*"))


def test_runs_are_not_logged_without_a_wandb_key(tenant, offline):
    choose(tenant, "runs", key=False)
    ingest_ended_run(tenant)
    assert sweep() == 0


def test_a_project_that_logs_nothing_does_not_log_its_experiments(tenant, offline):
    choose(tenant, "off")
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
        dataset = make_dataset(tenant.project, [{"key": "k0", "input": "q0", "expected": "q0"}])
        evaluator = make_evaluator(tenant.project, "mentions", "contains")
        experiment = drive(
            experiment_start(
                project=tenant.project, actor=tenant.member, dataset=dataset, agent=agent, evaluators=[evaluator]
            )
        )
        assert log_experiment(experiment_id=experiment.pk) is False
    assert not list(offline.glob("wandb/offline-run-*"))


def test_a_base_url_no_longer_allowed_fails_the_export_with_the_reason(tenant, offline, settings):
    settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai", "https://wandb.example.com"]
    choose(tenant, "runs")
    with organization_scope(tenant.organization):
        provider_secret_set(
            organization=tenant.organization,
            actor=tenant.owner,
            provider="wandb",
            api_key="w" * 40,
            base_url="https://wandb.example.com",
        )
    run = ingest_ended_run(tenant)
    settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai"]  # the operator took it off the list
    with organization_scope(tenant.organization):
        assert log_runs(run_ids=[run.pk]) == []  # nothing to retry: a setting must change
    export = export_of(tenant, run)
    assert export.status == WandbExport.Status.FAILED
    assert "WANDB_ALLOWED_BASE_URLS" in export.error and "wandb.example.com" in export.error
    assert not list(offline.glob("wandb/offline-run-*"))


@pytest.fixture
def refusing_wandb_server():
    """A local server standing in for a W&B server that refuses the key (401 to everything)."""

    class Refuse(BaseHTTPRequestHandler):
        def _refuse(self):
            body = b'{"errors": [{"message": "invalid api key"}]}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _refuse

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_a_failing_wandb_is_recorded_and_final_once_retries_are_spent(tenant, offline, settings, refusing_wandb_server):
    settings.WANDB_MODE = "online"
    settings.WANDB_ALLOWED_BASE_URLS = [refusing_wandb_server]
    choose(tenant, "runs", key=False)
    with organization_scope(tenant.organization):
        provider_secret_set(
            organization=tenant.organization,
            actor=tenant.owner,
            provider="wandb",
            api_key="w" * 40,
            base_url=refusing_wandb_server,
        )
    run = ingest_ended_run(tenant)
    with organization_scope(tenant.organization):
        assert log_runs(run_ids=[run.pk]) == [run.pk]  # the task retries these
        export = export_of(tenant, run)
        assert (export.status, export.attempts) == (WandbExport.Status.QUEUED, 1)
        assert "401" in export.error
        assert log_runs(run_ids=[run.pk], final=True) == [run.pk]
    export = export_of(tenant, run)
    assert (export.status, export.attempts) == (WandbExport.Status.FAILED, 2) and "401" in export.error


def test_the_wandb_key_is_the_organizations(tenant, other_tenant, offline):
    """A key saved by another organization logs nothing of this one."""
    with organization_scope(other_tenant.organization):
        provider_secret_set(
            organization=other_tenant.organization, actor=other_tenant.owner, provider="wandb", api_key="g" * 40
        )
    choose(tenant, "runs", key=False)
    ingest_ended_run(tenant)
    assert sweep() == 0
    assert ProviderSecret.dangerously_unscoped_objects.count() == 1


# --- Messages lost: the broker down when a logging was queued, a dead worker -------------------


def test_a_retry_while_redis_is_down_is_accepted_and_sent_again_once_its_message_is_lost(
    tenant, offline, client_for, broker_down
):
    choose(tenant, "runs")
    run = ingest_ended_run(tenant)
    with organization_scope(tenant.organization):
        export = WandbExport.objects.create(
            organization=tenant.organization, project=tenant.project, run=run, status="failed", error="HTTP 500"
        )
    response = client_for(tenant.admin).post(f"/api/v1/projects/acme/agent/exports/wandb/{export.pk}/retry/")
    # Stored as queued: a 503 here made the client retry a retry that was in (then a 409).
    assert response.status_code == 202, response.content
    assert export_of(tenant, run).status == WandbExport.Status.QUEUED
    assert lost_exports() == []  # a worker may still take it
    WandbExport.dangerously_unscoped_objects.filter(pk=export.pk).update(
        updated_at=timezone.now() - LOST_AFTER - timedelta(seconds=1)
    )
    assert lost_exports() == [(tenant.organization.pk, run.pk, None)]
    assert lost_exports() == []  # stamped when found: sent once per LOST_AFTER


def test_a_queued_logging_whose_message_was_lost_is_logged_by_the_sweep(celery_worker, tenant, offline):
    choose(tenant, "runs")
    run = ingest_ended_run(tenant)
    with organization_scope(tenant.organization):
        # Claimed (as the run's end or a sweep claims it), its message never delivered.
        WandbExport.objects.create(
            organization=tenant.organization,
            project=tenant.project,
            run=run,
            status="queued",
            updated_at=timezone.now() - LOST_AFTER - timedelta(seconds=1),
        )
    sweep_wandb()  # the beat's task; the sweep proper skips a run that has a row
    wait_for(lambda: (e := export_of(tenant, run)) and e.status == WandbExport.Status.LOGGED, "the run logged")
    assert [r for r in logged_runs(offline, f"agentops-run-{run.pk}") if r["summary"].get("status") == "succeeded"]


@pytest.mark.parametrize(
    ("mode", "key", "wanted"),
    [("runs", "own", True), ("experiments", "own", False), ("runs", None, False), ("runs", "another's", False)],
)
def test_an_executed_runs_end_asks_for_the_projects_mode_and_its_own_organizations_key(
    tenant, other_tenant, mode, key, wanted, django_assert_num_queries
):
    from evals.services.wandb_export.runs import _wants_runs

    if key == "another's":
        with organization_scope(other_tenant.organization):
            provider_secret_set(
                organization=other_tenant.organization, actor=other_tenant.owner, provider="wandb", api_key="g" * 40
            )
    choose(tenant, mode, key=key == "own")
    with organization_scope(tenant.organization), django_assert_num_queries(1):
        assert _wants_runs(tenant.organization.pk, tenant.project.pk) is wanted
