"""Bulk export to Parquet: files read back with pyarrow equal the database rows, for a
date range; written chunk by chunk; to a folder under EXPORT_ROOT or an S3-compatible
bucket (moto's server on 127.0.0.1); failures end the job as failed with the reason;
schedules queue each period's export once; retries and cancels."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pyarrow.parquet as pq
import pytest

from agentops.errors import Conflict, InvalidRequest
from agentops.scoping import organization_scope
from billing.models import RunUsage
from evals.bulk_export import services
from evals.bulk_export.runner import export_run
from evals.bulk_export.tables import TABLE_NAMES
from evals.models import ExportJob, ExportSchedule, Score
from runs.models import Message, Run, Step, ToolCall


def at(day: int, hour: int = 12) -> datetime:
    return datetime(2026, 3, day, hour, tzinfo=UTC)


def make_run(tenant, index: int, started: datetime, steps: int = 2) -> Run:
    org, project = tenant.organization, tenant.project
    run = Run.dangerously_unscoped_objects.create(
        organization=org,
        project=project,
        trace_id=f"t-{org.slug}-{index}",
        name=f"run {index}",
        status=Run.Status.SUCCEEDED,
        input={"question": f"q{index}", "n": index},
        output="answer",
        started_at=started,
        tags=["a", f"t{index}"],
        total_cost=Decimal("0.000123456"),
        input_tokens=10 * index,
    )
    for position in range(steps):
        step = Step.dangerously_unscoped_objects.create(
            organization=org,
            project=project,
            run=run,
            span_id=f"s{index}-{position}",
            kind=Step.Kind.LLM,
            model="mistral-small",
            started_at=started + timedelta(seconds=position),
            cost=Decimal("0.5") if position else None,
            attributes={"k": position},
        )
        Message.dangerously_unscoped_objects.create(
            organization=org, project=project, run=run, step=step, message_id=f"m{position}", position=position,
            role="user", content={"text": f"hi {position}"},
        )  # fmt: skip
    ToolCall.dangerously_unscoped_objects.create(
        organization=org, project=project, run=run, call_id="c1", tool_name="search", arguments={"q": "x"}
    )
    Score.dangerously_unscoped_objects.create(
        organization=org, project=project, run=run, name="quality", value=0.75, passed=True, source="human"
    )
    RunUsage.dangerously_unscoped_objects.create(
        organization=org, project=project, run_id=run.pk, day=started.date(), model="mistral-small",
        input_tokens=5, cost=Decimal("1.25"),
    )  # fmt: skip
    return run


@pytest.fixture
def export_root(tmp_path, settings):
    root = tmp_path / "exports"
    root.mkdir()
    settings.EXPORT_ROOT = str(root)
    return root


@pytest.fixture
def folder(tenant, export_root):
    with organization_scope(tenant.organization):
        return services.destination_create(
            organization=tenant.organization, actor=tenant.admin, name="disk", kind="folder", config={"path": "acme"}
        )


def export(tenant, destination, start=date(2026, 3, 2), end=date(2026, 3, 3), **options) -> ExportJob:
    """Create the export and run it here, as the worker's task does."""
    with organization_scope(tenant.organization):
        job = services.export_create(
            project=tenant.project,
            actor=tenant.admin,
            destination_id=destination.pk,
            start_date=start,
            end_date=end,
            **options,
        )
        export_run(export_id=job.pk, worker="test")
        job.refresh_from_db()
    return job


def read(export_root: Path, job: ExportJob, table: str):
    entry = next(entry for entry in job.files if entry["table"] == table)
    return pq.read_table(export_root / entry["location"])


@pytest.fixture
def dataset(tenant):
    """Runs on March 1 (outside), 2, 3 (inside) and 4 (outside)."""
    return {day: make_run(tenant, day, at(day)) for day in (1, 2, 3, 4)}


def test_folder_export_writes_each_table_equal_to_the_database_rows(tenant, folder, export_root, dataset):
    job = export(tenant, folder)
    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    assert [entry["table"] for entry in job.files] == list(TABLE_NAMES)
    inside = [dataset[2], dataset[3]]
    runs = read(export_root, job, "runs").to_pylist()
    assert [row["id"] for row in runs] == [run.pk for run in inside]
    first = runs[0]
    assert json.loads(first["input"]) == {"question": "q2", "n": 2}
    assert json.loads(first["output"]) == "answer"
    assert first["tags"] == ["a", "t2"] and first["total_cost"] == Decimal("0.000123456")
    assert first["started_at"] == at(2)
    steps = read(export_root, job, "steps").to_pylist()
    expected = Step.dangerously_unscoped_objects.filter(run__in=inside).order_by("pk")
    assert [(row["id"], row["run_id"], row["span_id"], row["cost"]) for row in steps] == [
        (step.pk, step.run_id, step.span_id, step.cost) for step in expected
    ]
    assert json.loads(steps[1]["attributes"]) == {"k": 1}
    messages = read(export_root, job, "messages").to_pylist()
    assert {row["run_id"] for row in messages} == {run.pk for run in inside} and len(messages) == 4
    assert json.loads(messages[0]["content"]) == {"text": "hi 0"}
    assert [row["tool_name"] for row in read(export_root, job, "tool_calls").to_pylist()] == ["search", "search"]
    scores = read(export_root, job, "scores").to_pylist()
    assert [(row["run_id"], row["value"]) for row in scores] == [(run.pk, 0.75) for run in inside]
    usage = read(export_root, job, "usage").to_pylist()
    assert [(row["day"], row["cost"]) for row in usage] == [
        (date(2026, 3, 2), Decimal("1.25")),
        (date(2026, 3, 3), Decimal("1.25")),
    ]
    assert job.progress == {
        "runs": 2,
        "steps": 4,
        "messages": 4,
        "tool_calls": 2,
        "scores": 2,
        "usage": 2,
        "compute_usage": 0,
    }
    manifest = json.loads(
        (export_root / "acme/agent/2026-03-02_2026-03-03" / f"export-{job.pk}" / "manifest.json").read_text()
    )
    assert manifest["files"] == job.files
    assert "succeeded" in job.log


def test_tables_are_written_chunk_by_chunk_never_whole(tenant, folder, export_root, settings):
    settings.EXPORT_CHUNK_ROWS = 3
    for index in range(4):
        make_run(tenant, index, at(2, hour=index), steps=5)  # 20 steps
    job = export(tenant, folder, tables=["steps"])
    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    entry = job.files[0]
    metadata = pq.ParquetFile(export_root / entry["location"]).metadata
    # One row group per chunk read: 20 rows in chunks of 3 is 7 groups.
    assert metadata.num_rows == 20 and metadata.num_row_groups == 7
    assert pq.read_table(export_root / entry["location"]).column("id").to_pylist() == sorted(
        Step.dangerously_unscoped_objects.values_list("pk", flat=True)
    )


def test_date_range_is_whole_days_both_included(tenant, folder, export_root, dataset):
    late = make_run(tenant, 99, at(3, hour=23).replace(minute=59, second=59))
    job = export(tenant, folder, start=date(2026, 3, 3), end=date(2026, 3, 3), tables=["runs"])
    ids = read(export_root, job, "runs").column("id").to_pylist()
    assert ids == [dataset[3].pk, late.pk]


def test_other_tenants_rows_are_never_exported(tenant, other_tenant, folder, export_root, dataset):
    make_run(other_tenant, 2, at(2))
    job = export(tenant, folder, tables=["runs", "steps"])
    assert read(export_root, job, "runs").num_rows == 2 and read(export_root, job, "steps").num_rows == 4


def test_backwards_date_range_is_refused_at_creation(tenant, folder):
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="backwards"):
        services.export_create(
            project=tenant.project, actor=tenant.admin, destination_id=folder.pk,
            start_date=date(2026, 3, 3), end_date=date(2026, 3, 2),
        )  # fmt: skip
    assert not ExportJob.dangerously_unscoped_objects.exists()


def test_a_range_ending_on_the_calendars_last_day_is_refused_at_creation(tenant, folder):
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="end_date must be before 9999"):
        services.export_create(
            project=tenant.project, actor=tenant.admin, destination_id=folder.pk,
            start_date=date(9999, 12, 30), end_date=date(9999, 12, 31),
        )  # fmt: skip
    assert not ExportJob.dangerously_unscoped_objects.exists()


@pytest.mark.parametrize("path", ["../outside", "/etc", "acme/../../outside"])
def test_folder_path_escaping_export_root_is_refused(tenant, export_root, path):
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest):
        services.destination_create(
            organization=tenant.organization, actor=tenant.admin, name="bad", kind="folder", config={"path": path}
        )


def test_symlink_out_of_export_root_fails_the_export_with_reason(tenant, folder, export_root, tmp_path, dataset):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, export_root / "acme")  # appeared after the destination was saved
    job = export(tenant, folder)
    assert job.status == ExportJob.Status.FAILED
    assert "inside the server's export folder" in job.error
    assert list(outside.iterdir()) == []


def test_unwritable_folder_fails_the_export_with_reason(tenant, folder, export_root, dataset):
    (export_root / "acme").write_text("a file where the folder should be")
    job = export(tenant, folder)
    assert job.status == ExportJob.Status.FAILED and "cannot create the folder acme/agent" in job.error


def test_folder_destinations_are_off_without_export_root(tenant, settings):
    settings.EXPORT_ROOT = ""
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="EXPORT_ROOT"):
        services.destination_create(
            organization=tenant.organization, actor=tenant.admin, name="disk", kind="folder", config={"path": "x"}
        )


# -- S3 ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_server):
    client = boto3.client(
        "s3", endpoint_url=s3_server, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    name = f"exports-{os.urandom(4).hex()}"
    client.create_bucket(Bucket=name)
    return client, name


def s3_destination(tenant, endpoint, bucket_name, name="lake", **credentials):
    with organization_scope(tenant.organization):
        return services.destination_create(
            organization=tenant.organization,
            actor=tenant.admin,
            name=name,
            kind="s3",
            config={"endpoint_url": endpoint, "bucket": bucket_name, "prefix": "agentops/"},
            credentials={"access_key_id": "AKIATEST1234", "secret_access_key": "secret", **credentials},
        )


def test_s3_export_uploads_parquet_equal_to_the_database_rows(tenant, s3_server, bucket, dataset, tmp_path):
    client, name = bucket
    destination = s3_destination(tenant, s3_server, name)
    assert "secret" not in destination.credentials_ciphertext and destination.credentials_hint == "1234"
    job = export(tenant, destination, tables=["runs", "scores"])
    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    key = f"agentops/agent/2026-03-02_2026-03-03/export-{job.pk}/runs.parquet"
    assert job.files[0]["location"] == f"s3://{name}/{key}"
    client.download_file(name, key, str(tmp_path / "runs.parquet"))
    assert pq.read_table(tmp_path / "runs.parquet").column("id").to_pylist() == [dataset[2].pk, dataset[3].pk]
    keys = {item["Key"] for item in client.list_objects_v2(Bucket=name)["Contents"]}
    assert keys == {
        f"agentops/agent/2026-03-02_2026-03-03/export-{job.pk}/{file}"
        for file in ("runs.parquet", "scores.parquet", "manifest.json")
    }


def test_missing_bucket_fails_the_export_with_reason(tenant, s3_server, dataset):
    destination = s3_destination(tenant, s3_server, "no-such-bucket")
    job = export(tenant, destination)
    assert job.status == ExportJob.Status.FAILED and job.error == "the bucket 'no-such-bucket' does not exist"


def test_refused_credentials_fail_the_export_with_reason(tenant):
    # moto accepts any key; a local endpoint that answers 403, as S3 does to a bad key, stands in.
    class Refuse(BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        destination = s3_destination(tenant, f"http://127.0.0.1:{server.server_address[1]}", "private-bucket")
        job = export(tenant, destination)
    finally:
        server.shutdown()
    assert job.status == ExportJob.Status.FAILED
    assert job.error == "the S3 endpoint refused the credentials for bucket 'private-bucket' (403)"


def test_redirecting_s3_endpoint_never_receives_credentials_elsewhere(tenant, redirect_trap):
    destination = s3_destination(tenant, redirect_trap.url, "bucket-one")
    job = export(tenant, destination)
    assert job.status == ExportJob.Status.FAILED and "redirect" in job.error
    assert redirect_trap.redirected and redirect_trap.elsewhere == []


def test_an_s3_endpoint_whose_name_rebinds_to_a_private_address_never_receives_the_credentials(
    tenant, rebinding, settings
):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = True  # saved while the name still answers a public address
    destination = s3_destination(tenant, rebinding.url, "bucket-one")
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    job = export(tenant, destination)
    assert job.status == ExportJob.Status.FAILED and "private or reserved" in job.error, job.error
    assert rebinding.received == []


def test_private_s3_endpoint_is_refused_by_the_ssrf_guard(tenant, settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="endpoint_url"):
        s3_destination(tenant, "http://127.0.0.1:9000", "bucket-one")


# -- jobs: retry, cancel, claims, schedules ------------------------------------------------------


def test_retry_is_a_new_attempt_of_a_failed_export(tenant, folder, export_root, dataset):
    (export_root / "acme").write_text("in the way")
    failed = export(tenant, folder)
    assert failed.status == ExportJob.Status.FAILED
    (export_root / "acme").unlink()
    with organization_scope(tenant.organization):
        retry = services.export_retry(job=failed, actor=tenant.admin)
        assert retry.attempt == 2 and retry.retry_of_id == failed.pk
        export_run(export_id=retry.pk, worker="test")
        retry.refresh_from_db()
        assert retry.status == ExportJob.Status.SUCCEEDED
        with pytest.raises(Conflict):
            services.export_retry(job=retry, actor=tenant.admin)


def test_a_claimed_export_is_not_run_twice(tenant, folder, dataset):
    job = export(tenant, folder)
    with organization_scope(tenant.organization):
        assert export_run(export_id=job.pk, worker="second delivery") is None
    job.refresh_from_db()
    assert job.worker == "test"


def test_cancel_of_a_queued_export_ends_it_and_the_worker_skips_it(tenant, folder):
    with organization_scope(tenant.organization):
        job = services.export_create(
            project=tenant.project, actor=tenant.admin, destination_id=folder.pk,
            start_date=date(2026, 3, 2), end_date=date(2026, 3, 2),
        )  # fmt: skip
        job = services.export_cancel(job=job, actor=tenant.admin)
        assert job.status == ExportJob.Status.CANCELLED
        assert export_run(export_id=job.pk, worker="test") is None


def test_schedule_due_queues_its_period_export_once(tenant, folder):
    with organization_scope(tenant.organization):
        schedule = services.schedule_create(
            project=tenant.project, actor=tenant.admin, destination_id=folder.pk, every="week"
        )
    start = schedule.next_start
    assert services.start_due_exports(today=start + timedelta(days=6)) == 0  # the week has not ended
    assert services.start_due_exports(today=start + timedelta(days=7)) == 1
    assert services.start_due_exports(today=start + timedelta(days=7)) == 0  # once
    job = ExportJob.dangerously_unscoped_objects.get()
    assert (job.start_date, job.end_date, job.schedule_id) == (start, start + timedelta(days=6), schedule.pk)
    schedule.refresh_from_db()
    assert schedule.next_start == start + timedelta(days=7)
    # A second sweep that read the old next_start (a race) makes no second export.
    ExportSchedule.dangerously_unscoped_objects.filter(pk=schedule.pk).update(next_start=start)
    assert services.start_due_exports(today=start + timedelta(days=7)) == 0
    assert ExportJob.dangerously_unscoped_objects.count() == 1


def test_docs_show_every_table_and_column_with_its_type():
    from evals.bulk_export.tables import TABLES

    docs = (Path(__file__).resolve().parents[2] / "docs" / "exports.md").read_text()
    for table in TABLES.values():
        assert f"### `{table.name}.parquet`" in docs
        for column in table.columns:
            assert f"| `{column.name}` | `{column.type}` |" in docs, (table.name, column.name)


def test_cancel_while_running_stops_after_the_current_chunk(tenant, folder, export_root, settings, monkeypatch):
    from evals.bulk_export.tables import Table

    settings.EXPORT_CHUNK_ROWS = 2
    for index in range(3):
        make_run(tenant, index, at(2, hour=index))
    chunks = Table.chunks

    def cancel_after_first_chunk(self, *args, **kwargs):
        for number, chunk in enumerate(chunks(self, *args, **kwargs)):
            if number == 0:  # someone presses Cancel while the worker writes the first chunk
                ExportJob.dangerously_unscoped_objects.update(cancel_requested=True)
            yield chunk

    monkeypatch.setattr(Table, "chunks", cancel_after_first_chunk)
    job = export(tenant, folder)
    assert job.status == ExportJob.Status.CANCELLED and job.progress == {"runs": 2}
    assert not list(export_root.rglob("*.parquet")) and not list(export_root.rglob("*.partial"))


def test_a_running_export_whose_worker_died_is_taken_over(tenant, folder, dataset, settings):
    with organization_scope(tenant.organization):
        job = services.export_create(
            project=tenant.project, actor=tenant.admin, destination_id=folder.pk,
            start_date=date(2026, 3, 2), end_date=date(2026, 3, 3),
        )  # fmt: skip
    long_ago = datetime.now(UTC) - timedelta(seconds=settings.EXPORT_STALE_SECONDS + 60)
    ExportJob.dangerously_unscoped_objects.filter(pk=job.pk).update(
        status=ExportJob.Status.RUNNING, worker="dead", heartbeat_at=long_ago
    )
    with organization_scope(tenant.organization):
        assert export_run(export_id=job.pk, worker="alive") == ExportJob.Status.SUCCEEDED
    job.refresh_from_db()
    assert job.worker == "alive" and job.progress["runs"] == 2
