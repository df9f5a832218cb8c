"""The job pages: the list (filters, live rows), a new job through the form (its
estimate, its errors, a command and an evaluation job), one job (status block, timeline,
log tail, full log, GPU chart, cancelling), and the organization's compute settings
(backends and job secrets, admins only); who may do what, secrets never shown, and
tenant isolation of every page and action. The backend is scripted
(tests/jobs/factories.py): the real ones have their own tests."""

from __future__ import annotations

import html
import json
import re
from decimal import Decimal

import pytest
from django.template.loader import render_to_string

from agentops import crypto
from agentops.scoping import organization_scope
from billing.budgets import budget_create, utc_today
from billing.models import UsageDaily
from evals.models import Experiment
from jobs import services
from jobs.backends.base import RemoteStatus
from jobs.models import ComputeBackend, Job, JobLogLine, JobSecret
from jobs.services import job_poll, job_submit, secret_set
from tests.evals.factories import make_dataset, make_evaluator
from tests.jobs.factories import ScriptedBackend, build_backends_with, make_backend

BASE = "/o/acme/p/agent/jobs"
COMPUTE = "/o/acme/compute"
SECRET_VALUE = "hf_extremely_secret_value_42"


def text(response) -> str:
    return response.content.decode()


@pytest.fixture(autouse=True)
def scripted(monkeypatch):
    ScriptedBackend.reset()
    build_backends_with(
        monkeypatch,
        backend_for=lambda backend: ScriptedBackend(config={}, credentials={}),
        backend_class=lambda kind: ScriptedBackend,
    )
    return ScriptedBackend


@pytest.fixture
def signed_in(client):
    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


@pytest.fixture
def backend(tenant):
    return make_backend(tenant.organization, name="gpu-box", kind="ray")


@pytest.fixture
def hf_token(tenant):
    with organization_scope(tenant.organization):
        return secret_set(organization=tenant.organization, actor=tenant.admin, name="HF_TOKEN", value=SECRET_VALUE)


def submit(tenant, backend, **fields) -> Job:
    fields = {"hardware": "a100", "command": ["python", "train.py"], "time_limit_seconds": 3600, **fields}
    with organization_scope(tenant.organization):
        return job_submit(project=tenant.project, actor=tenant.member, backend=backend, **fields)


def poll(tenant, job, times: int = 1) -> Job:
    with organization_scope(tenant.organization):
        for _ in range(times):
            job_poll(job_id=job.pk)
        job.refresh_from_db()
    return job


def form_data(backend, **fields) -> dict:
    return {
        "kind": "command",
        "name": "",
        "backend": backend.pk,
        "hardware": "a100",
        "image": "",
        "command": "python train.py --epochs 1",
        "env": "",
        "time_limit_minutes": "30",
        **fields,
    }


def jobs_of(tenant) -> list[Job]:
    with organization_scope(tenant.organization):
        return list(Job.objects.filter(project=tenant.project))


# -- the list --------------------------------------------------------------------------------


def test_the_list_shows_each_job_with_its_estimate_cost_and_status(signed_in, tenant, backend, scripted):
    done = submit(tenant, backend, name="finetune", time_limit_seconds=7200)
    scripted.reset(states=[RemoteStatus(state="succeeded", exit_code=0)])
    poll(tenant, done, times=2)
    waiting = submit(tenant, backend, name="still queued", hardware="t4")

    page = text(signed_in(tenant.viewer).get(f"{BASE}/"))

    assert 'id="jobs-table"' in page
    assert "finetune" in page and "still queued" in page
    assert f'id="job-row-{done.pk}" data-status="succeeded"' in page
    assert f'id="job-row-{waiting.pk}" data-status="queued"' in page
    assert "$6.00" in page  # finetune's estimate: 2 h of a100 at $3.00/h
    assert "gpu-box" in page and "<code>t4</code>" in page


def test_the_list_filters_by_status(signed_in, tenant, backend, scripted):
    done = submit(tenant, backend, name="finished one")
    scripted.reset(states=[RemoteStatus(state="succeeded", exit_code=0)])
    poll(tenant, done, times=2)
    submit(tenant, backend, name="waiting one")
    client = signed_in(tenant.viewer)

    succeeded = text(client.get(f"{BASE}/?status=succeeded"))
    queued = text(client.get(f"{BASE}/?status=queued"))
    none = text(client.get(f"{BASE}/?status=cancelled"))

    assert "finished one" in succeeded and "waiting one" not in succeeded
    assert "waiting one" in queued and "finished one" not in queued
    assert "No job matches" in none


def test_new_job_is_offered_to_members_not_viewers(signed_in, tenant, backend):
    assert "New job" not in text(signed_in(tenant.viewer).get(f"{BASE}/"))
    assert f'href="{BASE}/new/"' in text(signed_in(tenant.member).get(f"{BASE}/"))


def test_a_row_re_renders_alone_for_the_live_list(signed_in, tenant, backend):
    job = submit(tenant, backend, name="row job")

    response = signed_in(tenant.viewer).get(f"{BASE}/{job.pk}/row/")

    assert response.status_code == 200
    assert text(response).lstrip().startswith(f'<tr id="job-row-{job.pk}"') and "row job" in text(response)


def test_the_list_and_a_jobs_page_hear_only_the_jobs_they_show(signed_in, tenant, backend, monkeypatch):
    """The list's socket names its rows' topics, a job's page its job's; a status change
    sends the page its status block and the list the job's row, swapped by id."""
    from agentops import live
    from jobs.live import announce_job

    shown = submit(tenant, backend, name="shown")
    client = signed_in(tenant.viewer)
    listing = text(client.get(f"{BASE}/?status=queued"))
    page = text(client.get(f"{BASE}/{shown.pk}/"))
    assert re.search(rf'ws-connect="/ws/o/acme/p/agent/\?topics=job-row:(\d+\.)?{shown.pk}\b', listing)
    assert f'ws-connect="/ws/o/acme/p/agent/?topics=job:{shown.pk}"' in page

    sent = []
    monkeypatch.setattr(live, "listening_topics", lambda *, project, topics: set(topics))
    monkeypatch.setattr(live, "announce", lambda **kwargs: sent.append(kwargs))
    with organization_scope(tenant.organization):
        announce_job(job_id=shown.pk)
    by_topic = {message["topic"]: message["html"].lstrip() for message in sent}
    assert set(by_topic) == {f"job:{shown.pk}", f"job-row:{shown.pk}"}
    assert re.match(rf'<section [^>]*id="job-{shown.pk}-status" hx-swap-oob="true"', by_topic[f"job:{shown.pk}"])
    assert by_topic[f"job-row:{shown.pk}"].startswith(f'<tr id="job-row-{shown.pk}" hx-swap-oob="true"')


# -- a new job -------------------------------------------------------------------------------


def test_the_form_offers_the_organizations_enabled_backends_with_hardware_rates(
    signed_in, tenant, other_tenant, backend
):
    retired = make_backend(tenant.organization, name="retired box")
    ComputeBackend.dangerously_unscoped_objects.filter(pk=retired.pk).update(enabled=False)
    make_backend(other_tenant.organization, name="globex-cluster")

    page = text(signed_in(tenant.member).get(f"{BASE}/new/"))

    assert f'<option value="{backend.pk}">gpu-box</option>' in page
    assert "retired box" not in page and "globex-cluster" not in page
    assert "NVIDIA A100 (80 GB) · $3.00/h" in page
    # What the first choices cost, before anything is changed: 1 h of cpu-basic.
    assert 'data-amount="0.050000000"' in page


def test_without_a_backend_the_form_says_where_to_add_one(signed_in, tenant):
    member_page = text(signed_in(tenant.member).get(f"{BASE}/new/"))
    admin_page = text(signed_in(tenant.admin).get(f"{BASE}/new/"))

    assert "No compute backend yet" in member_page and "Ask an admin" in member_page
    assert 'id="job-form"' not in member_page
    assert f'href="{COMPUTE}/"' in admin_page


def test_a_member_submits_a_command_job_and_lands_on_its_page(signed_in, tenant, backend, hf_token, scripted):
    client = signed_in(tenant.member)

    response = client.post(
        f"{BASE}/new/",
        form_data(
            backend,
            name="train it",
            command="python train.py --note 'two words'",
            env="EPOCHS=3\n# a comment\n\nLR=0.001",
            secrets=["HF_TOKEN"],
            image="pytorch/pytorch:2.4.0",
        ),
    )

    (job,) = jobs_of(tenant)
    assert response.status_code == 302 and response["Location"] == f"{BASE}/{job.pk}/"
    assert job.name == "train it" and job.status == "queued" and job.created_by == tenant.member
    assert job.command == ["python", "train.py", "--note", "two words"]
    assert job.env == {"EPOCHS": "3", "LR": "0.001"} and job.secret_names == ["HF_TOKEN"]
    assert job.time_limit_seconds == 1800 and job.image == "pytorch/pytorch:2.4.0"
    assert job.estimated_cost == Decimal("1.500000000")  # 30 minutes of a100 at $3.00/h
    page = text(client.get(response["Location"]))
    assert "train it" in page and "Job submitted" in page and 'id="job-cancel"' in page
    assert f'id="job-{job.pk}-status"' in page and f'id="job-{job.pk}-log"' in page
    # The poller hands the backend the secret's value; no page ever shows it.
    poll(tenant, job)
    (spec,) = [call[1] for call in scripted.all_calls() if call[0] == "submit"]
    assert spec.env == {"EPOCHS": "3", "LR": "0.001", "HF_TOKEN": SECRET_VALUE}
    assert spec.command == ["python", "train.py", "--note", "two words"]
    assert SECRET_VALUE not in text(client.get(response["Location"]))


def test_the_estimate_fragment_shows_the_amount_and_the_backends_rates(signed_in, tenant, backend):
    response = signed_in(tenant.member).post(
        f"{BASE}/new/estimate/", form_data(backend, hardware="a100", time_limit_minutes="30"), HTTP_HX_REQUEST="true"
    )

    body = text(response)
    assert response.status_code == 200
    assert 'id="job-estimate"' in body and 'data-amount="1.500000000"' in body
    assert "at most $1.50" in body and "The time limit (30m 00s) at $3.00/h" in body
    # The hardware field comes along, out of band, with this backend's rates.
    assert 'id="hardware-field" hx-swap-oob="true"' in body and "$3.00/h" in body
    assert "<html" not in body


def test_hardware_the_backend_does_not_offer_says_so(signed_in, tenant, backend):
    # The scripted backend offers cpu-basic, t4 and a100.
    response = signed_in(tenant.member).post(
        f"{BASE}/new/estimate/", form_data(backend, hardware="h200"), HTTP_HX_REQUEST="true"
    )

    body = html.unescape(text(response))
    assert "Not offered" in body and 'data-amount=""' in body
    assert "Backend 'gpu-box' (ray) does not offer h200; it offers: cpu-basic, t4, a100" in body
    assert "NVIDIA H200 (141 GB) · not offered by gpu-box" in body
    offered = body.index("NVIDIA A100 (80 GB) · $3.00/h")
    assert offered < body.index("NVIDIA H200 (141 GB) · not offered")  # what it offers comes first


def test_the_estimate_ignores_fields_it_does_not_need(signed_in, tenant, backend):
    response = signed_in(tenant.member).post(
        f"{BASE}/new/estimate/", form_data(backend, command="", env="not a line"), HTTP_HX_REQUEST="true"
    )

    assert 'data-amount="1.500000000"' in text(response)


def test_the_estimate_button_works_without_javascript(signed_in, tenant, backend):
    response = signed_in(tenant.member).post(f"{BASE}/new/estimate/", form_data(backend, time_limit_minutes="120"))

    page = text(response)
    assert response.status_code == 200 and 'id="job-form"' in page
    assert 'data-amount="6.000000000"' in page
    assert jobs_of(tenant) == []


def test_an_evaluation_estimate_counts_the_items_at_the_given_speed(signed_in, tenant, backend):
    dataset = make_dataset(tenant.project, [{"key": f"q{i}", "input": f"q {i}"} for i in range(10)])

    response = signed_in(tenant.member).post(
        f"{BASE}/new/estimate/",
        form_data(backend, kind="evaluation", dataset=dataset.pk, seconds_per_item="36", time_limit_minutes="60"),
        HTTP_HX_REQUEST="true",
    )

    body = text(response)
    assert 'data-amount="0.300000000"' in body  # 10 items × 36 s = 6 minutes of a100 at $3.00/h
    assert "10 items × 36.0 s at $3.00/h" in body and "at most" not in body


def test_an_evaluation_job_through_the_form_creates_its_experiment(signed_in, tenant, backend):
    dataset = make_dataset(tenant.project, [{"key": "a", "input": "x", "expected": "x"}])
    exact = make_evaluator(tenant.project, "exact", "exact_match")
    make_evaluator(tenant.project, "people", "human")
    client = signed_in(tenant.member)
    page = text(client.get(f"{BASE}/new/"))
    assert f'value="{exact.pk}"' in page and ">people</label>" not in page  # human evaluators are not offered

    response = client.post(
        f"{BASE}/new/",
        form_data(
            backend,
            kind="evaluation",
            command="",
            dataset=dataset.pk,
            evaluators=[exact.pk],
            model="my-org/my-model",
            seconds_per_item="2",
        ),
    )

    (job,) = jobs_of(tenant)
    assert response.status_code == 302 and job.kind == "evaluation"
    assert job.command == [] and job.env["AGENTOPS_MODEL"] == "my-org/my-model"  # []: the built-in runner
    with organization_scope(tenant.organization):
        experiment = Experiment.objects.get(pk=job.experiment_id)
    assert experiment.kind == "external"
    page = text(client.get(f"{BASE}/{job.pk}/"))
    assert f'href="/o/acme/p/agent/evals/experiments/{experiment.pk}/"' in page
    assert "the built-in evaluation runner" in page


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"command": ""}, "Give the command to run."),
        ({"command": "python -c 'unclosed"}, "Could not read the command: No closing quotation."),
        ({"env": "JUST_A_NAME"}, "Line 1: write NAME=value."),
        ({"env": "1BAD=x"}, "Line 1: &#x27;1BAD&#x27; is not an environment variable name."),
        ({"env": "AGENTOPS_URL=http://x"}, "names starting with AGENTOPS_ are set by the platform"),
        ({"hardware": "h200"}, "does not offer h200"),  # the scripted backend has no h200: the service says so
        ({"time_limit_minutes": "0"}, "greater than or equal to 1"),
        ({"kind": "evaluation", "command": ""}, "An evaluation job needs this."),
    ],
)
def test_form_errors_are_shown_on_the_form(signed_in, tenant, backend, fields, message):
    response = signed_in(tenant.member).post(f"{BASE}/new/", form_data(backend, **fields))

    assert response.status_code == 400
    assert message in text(response) and 'id="job-form"' in text(response)
    assert jobs_of(tenant) == []


def test_a_spent_hard_budget_refuses_the_job_on_the_form(signed_in, tenant, backend):
    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=tenant.owner, name="cap", amount="1", hard_limit=True)
    UsageDaily.dangerously_unscoped_objects.create(
        organization=tenant.organization, project=tenant.project, day=utc_today(), model="m", cost=Decimal("1")
    )

    response = signed_in(tenant.member).post(f"{BASE}/new/", form_data(backend))

    assert response.status_code == 402
    assert 'class="form-errors"' in text(response) and "budget" in text(response).lower()
    assert jobs_of(tenant) == []


def test_a_turned_off_or_foreign_backend_cannot_be_chosen(signed_in, tenant, other_tenant, backend):
    foreign = make_backend(other_tenant.organization, name="globex-cluster")
    off = make_backend(tenant.organization, name="retired")
    ComputeBackend.dangerously_unscoped_objects.filter(pk=off.pk).update(enabled=False)
    client = signed_in(tenant.member)

    for chosen in (foreign, off):
        response = client.post(f"{BASE}/new/", form_data(chosen))
        assert response.status_code == 400 and "Select a valid choice" in text(response)
    assert jobs_of(tenant) == []


# -- one job ---------------------------------------------------------------------------------


def test_the_job_page_shows_facts_status_timeline_log_and_gpu_chart(signed_in, tenant, backend, hf_token, scripted):
    job = submit(tenant, backend, name="train", env={"EPOCHS": "3"}, secret_names=["HF_TOKEN"])
    sample = {"gpu_index": 0, "utilization_percent": 87.0, "memory_used_mib": 30000, "memory_total_mib": 81920}
    scripted.reset(
        states=[RemoteStatus(state="running", gpu_samples=[sample]), RemoteStatus(state="failed", exit_code=3)],
        log_batches=[["loading <model>"], ["step 1", "boom"]],
    )
    poll(tenant, job, times=3)

    page = text(signed_in(tenant.viewer).get(f"{BASE}/{job.pk}/"))

    assert "<code>EPOCHS=3</code>" in page and '<span class="chip" title="The value is never shown">HF_TOKEN' in page
    assert "python train.py" in page and "gpu-box" in page and "member@acme.example.com" in page
    status = re.search(rf'<section class="card job-status" id="job-{job.pk}-status".*?</section>', page, re.S)[0]
    assert 'data-status="failed"' in status and 'data-ended="true"' in status and "exit code <code>3</code>" in status
    assert re.findall(r'<li data-status="(\w+)">', status) == [
        "queued",
        "submitted",
        "running",
        "failed",
    ]
    assert "loading &lt;model&gt;" in page and "boom" in page  # the log is escaped, never HTML
    chart = json.loads(html.unescape(re.search(r'id="job-gpu-data"[^>]*>(.*?)</script>', page, re.S)[1]))
    assert chart["ended"] is True and chart["gpus"][0]["utilization"] == [87.0]
    assert chart["gpus"][0]["memory"] == [30000]
    assert 'id="job-cancel"' not in page  # a viewer, and an ended job
    assert f'href="{BASE}/{job.pk}/log/"' in page


def test_a_job_without_gpu_samples_says_so(signed_in, tenant, backend):
    job = submit(tenant, backend)

    page = text(signed_in(tenant.viewer).get(f"{BASE}/{job.pk}/"))

    assert "No GPU samples yet" in page and '"gpus": []' in html.unescape(page)


def test_the_log_tail_is_the_last_500_lines_and_the_full_log_has_every_line(signed_in, tenant, backend, scripted):
    job = submit(tenant, backend)
    scripted.reset(states=["running"], log_batches=[[f"line {n}" for n in range(1, 601)]])
    poll(tenant, job, times=2)
    client = signed_in(tenant.viewer)

    page = text(client.get(f"{BASE}/{job.pk}/"))
    full = client.get(f"{BASE}/{job.pk}/log/")
    download = client.get(f"{BASE}/{job.pk}/log/?download=1")

    assert f'id="job-{job.pk}-line-101"' in page and f'id="job-{job.pk}-line-100"' not in page
    assert f'id="job-{job.pk}-line-600"' in page
    assert full.status_code == 200 and full["Content-Type"].startswith("text/plain")
    body = b"".join(full.streaming_content).decode()
    assert body.splitlines() == [f"line {n}" for n in range(1, 601)]
    assert download["Content-Disposition"] == f'attachment; filename="job-{job.pk}.log"'


def test_the_live_fragment_redraws_the_status_and_the_log_tail(signed_in, tenant, backend, scripted):
    job = submit(tenant, backend)
    scripted.reset(states=["running"], log_batches=[["hello"]])
    poll(tenant, job, times=2)

    body = text(signed_in(tenant.viewer).get(f"{BASE}/{job.pk}/live/"))

    assert f'id="job-{job.pk}-status" hx-swap-oob="true"' in body and 'data-status="running"' in body
    assert f'<div id="job-{job.pk}-log" hx-swap-oob="innerHTML">' in body and "hello" in body


def test_the_status_block_and_log_lines_render_as_jobs_live_renders_them(tenant, backend, scripted):
    """jobs.live renders both templates outside any view: only the job and its project."""
    job = submit(tenant, backend)
    scripted.reset(states=["running"], log_batches=[["first", "second"]])
    poll(tenant, job, times=2)
    with organization_scope(tenant.organization):
        job = Job.objects.select_related("project__organization", "backend").get(pk=job.pk)
        status = render_to_string(
            "jobs/_status.html",
            {"organization": tenant.organization, "project": tenant.project, "job": job, "oob": True},
        )
        lines = render_to_string(
            "jobs/_log_lines.html", {"job": job, "lines": list(JobLogLine.objects.filter(job=job)), "oob": True}
        )

    assert f'id="job-{job.pk}-status" hx-swap-oob="true"' in status and "Running" in status
    assert f'<div id="job-{job.pk}-log" hx-swap-oob="beforeend">' in lines
    assert 'data-number="1"' in lines and "second" in lines


def test_the_metrics_view_returns_the_chart_data(signed_in, tenant, backend, scripted):
    job = submit(tenant, backend)
    samples = [
        {"gpu_index": 0, "utilization_percent": 50.0, "memory_used_mib": 1000, "at": 1_700_000_000},
        {"gpu_index": 1, "utilization_percent": 75.0, "memory_used_mib": 2000, "at": 1_700_000_000},
    ]
    scripted.reset(states=[RemoteStatus(state="running", gpu_samples=samples)])
    poll(tenant, job, times=2)

    data = signed_in(tenant.viewer).get(f"{BASE}/{job.pk}/metrics/").json()

    assert [gpu["gpu"] for gpu in data["gpus"]] == [0, 1] and data["ended"] is False
    assert data["gpus"][1]["utilization"] == [75.0] and data["gpus"][1]["memory"] == [2000]


def test_a_member_cancels_a_running_job_from_its_page(signed_in, tenant, backend, scripted):
    job = submit(tenant, backend)
    poll(tenant, job, times=2)
    client = signed_in(tenant.member)

    response = client.post(f"{BASE}/{job.pk}/cancel/", follow=True)

    assert "Cancelling" in text(response)
    job = poll(tenant, job)
    assert job.status == "cancelled" and ("cancel", f"remote-{job.pk}") in scripted.all_calls()
    again = client.post(f"{BASE}/{job.pk}/cancel/", follow=True)
    assert "could not be cancelled: the job already cancelled" in text(again)


def test_a_viewer_sees_no_forms_and_their_posts_are_refused(signed_in, tenant, backend):
    job = submit(tenant, backend)
    client = signed_in(tenant.viewer)

    detail = text(client.get(f"{BASE}/{job.pk}/"))
    new_page = client.get(f"{BASE}/new/")
    submitted = client.post(f"{BASE}/new/", form_data(backend))
    cancelled = client.post(f"{BASE}/{job.pk}/cancel/")

    assert 'id="job-cancel"' not in detail and "<form" not in detail.split('id="content"')[1]
    for response in (new_page, submitted, cancelled):
        assert response.status_code == 403 and "submit and cancel jobs" in text(response)
    assert len(jobs_of(tenant)) == 1 and not jobs_of(tenant)[0].cancel_requested


def test_another_organizations_job_is_not_found_on_every_page(signed_in, tenant, other_tenant, backend):
    foreign = submit(other_tenant, make_backend(other_tenant.organization, name="globex-box"))
    client = signed_in(tenant.owner)

    for suffix in ("", "live/", "row/", "log/", "metrics/"):
        assert client.get(f"{BASE}/{foreign.pk}/{suffix}").status_code == 404, suffix
    assert client.post(f"{BASE}/{foreign.pk}/cancel/").status_code == 404
    # Its own organization's URL is a 404 for an outsider too.
    assert client.get(f"/o/globex/p/agent/jobs/{foreign.pk}/").status_code == 404
    foreign.refresh_from_db()
    assert not foreign.cancel_requested


def test_secret_values_never_appear_in_any_page(signed_in, tenant, backend, hf_token, scripted):
    job = submit(tenant, backend, secret_names=["HF_TOKEN"])
    scripted.reset(states=["running"], log_batches=[["started"]])
    poll(tenant, job, times=2)
    client = signed_in(tenant.owner)

    pages = [
        client.get(f"{BASE}/"),
        client.get(f"{BASE}/new/"),
        client.post(f"{BASE}/new/estimate/", form_data(backend, secrets=["HF_TOKEN"]), HTTP_HX_REQUEST="true"),
        client.get(f"{BASE}/{job.pk}/"),
        client.get(f"{BASE}/{job.pk}/live/"),
        client.get(f"{BASE}/{job.pk}/row/"),
        client.get(f"{COMPUTE}/"),
    ]

    for response in pages:
        assert response.status_code == 200
        assert SECRET_VALUE not in text(response)
    assert "HF_TOKEN" in text(pages[1]) and "HF_TOKEN" in text(pages[3]) and "••••" in text(pages[6])


# -- the organization's compute settings --------------------------------------------------------


def test_the_compute_page_is_for_admins_only(signed_in, tenant, outsider, backend):
    for role in ("owner", "admin"):
        response = signed_in(tenant.user(role)).get(f"{COMPUTE}/")
        assert response.status_code == 200 and "gpu-box" in text(response), role
        assert f'href="{COMPUTE}/"' in text(response)  # the organization's nav links to it
    for role in ("member", "viewer"):
        response = signed_in(tenant.user(role)).get(f"{COMPUTE}/")
        assert response.status_code == 403, role
        assert f'href="{COMPUTE}/"' not in text(signed_in(tenant.user(role)).get(f"{BASE}/"))
    assert signed_in(outsider).get(f"{COMPUTE}/").status_code == 404


def test_members_cannot_change_compute_settings(signed_in, tenant, backend):
    client = signed_in(tenant.member)

    responses = [
        client.post(f"{COMPUTE}/backends/", {"name": "sneaky", "kind": "local", "config": "{}"}),
        client.post(f"{COMPUTE}/backends/{backend.pk}/enabled/", {"enabled": "0"}),
        client.post(f"{COMPUTE}/backends/{backend.pk}/", {f"backend-{backend.pk}-config": "{}"}),
        client.post(f"{COMPUTE}/secrets/", {"name": "X", "value": "y"}),
    ]

    assert [response.status_code for response in responses] == [403, 403, 403, 403]
    with organization_scope(tenant.organization):
        assert list(ComputeBackend.objects.values_list("name", "enabled")) == [("gpu-box", True)]
        assert not JobSecret.objects.exists()


def test_an_admin_adds_a_backend_whose_credentials_are_never_shown(signed_in, tenant):
    client = signed_in(tenant.admin)

    response = client.post(
        f"{COMPUTE}/backends/",
        {
            "name": "hf",
            "kind": "hf_jobs",
            "config": '{"namespace": "acme"}',
            "credentials": '{"token": "hf_credential_value_123"}',
        },
        follow=True,
    )

    page = text(response)
    assert "The backend “hf” was added." in page and "hf_credential_value_123" not in page
    assert "&quot;namespace&quot;: &quot;acme&quot;" in page and "token" in page  # the hint: names only
    with organization_scope(tenant.organization):
        backend = ComputeBackend.objects.get(name="hf")
    assert "hf_credential_value_123" not in backend.credentials_ciphertext
    assert json.loads(crypto.decrypt(backend.credentials_ciphertext)) == {"token": "hf_credential_value_123"}


def test_backend_form_errors_are_shown_and_credentials_not_echoed(signed_in, tenant, backend):
    client = signed_in(tenant.admin)

    bad_json = client.post(
        f"{COMPUTE}/backends/", {"name": "x", "kind": "ray", "config": "{nope", "credentials": '{"k": "typed_secret"}'}
    )
    duplicate = client.post(f"{COMPUTE}/backends/", {"name": "gpu-box", "kind": "ray", "config": "{}"})

    assert bad_json.status_code == 400 and "not valid JSON" in text(bad_json)
    assert "typed_secret" not in text(bad_json)
    assert duplicate.status_code == 409 and "A backend named &#x27;gpu-box&#x27; already exists" in text(duplicate)


def test_backend_settings_nested_10000_levels_deep_are_a_form_error(signed_in, tenant):
    deep = '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}"
    response = signed_in(tenant.admin).post(f"{COMPUTE}/backends/", {"name": "x", "kind": "ray", "config": deep})
    assert response.status_code == 400
    assert "This JSON cannot be used: nested deeper than 64 levels." in text(response)
    with organization_scope(tenant.organization):
        assert not ComputeBackend.objects.filter(name="x").exists()


def test_an_admin_turns_a_backend_off_and_on_and_edits_it(signed_in, tenant, backend):
    client = signed_in(tenant.admin)

    client.post(f"{COMPUTE}/backends/{backend.pk}/enabled/", {"enabled": "0"})
    backend.refresh_from_db()
    assert backend.enabled is False
    assert "No compute backend yet" in text(client.get(f"{BASE}/new/"))  # no new jobs on it
    client.post(f"{COMPUTE}/backends/{backend.pk}/enabled/", {"enabled": "1"})
    saved = client.post(
        f"{COMPUTE}/backends/{backend.pk}/",
        {f"backend-{backend.pk}-config": '{"work_dir": "/srv/jobs"}', f"backend-{backend.pk}-credentials": ""},
        follow=True,
    )
    broken = client.post(f"{COMPUTE}/backends/{backend.pk}/", {f"backend-{backend.pk}-config": "[1]"})

    backend.refresh_from_db()
    assert backend.enabled is True and backend.config == {"work_dir": "/srv/jobs"}
    assert "was saved" in text(saved)
    assert broken.status_code == 400 and "must be a JSON object" in text(broken)
    assert f'id="backend-{backend.pk}-edit" open' in text(broken)


def test_the_edit_form_refuses_to_move_a_saved_token_to_another_host(signed_in, tenant, monkeypatch):
    from jobs.backends import backend_class

    build_backends_with(monkeypatch, backend_class=backend_class)  # the real Kubernetes settings
    with organization_scope(tenant.organization):
        cluster = services.backend_create(
            organization=tenant.organization,
            actor=tenant.admin,
            name="cluster",
            kind="kubernetes",
            config={"host": "https://k8s.acme.example"},
            credentials={"token": "k8s-stored-token"},
        )
    client = signed_in(tenant.admin)
    field = f"backend-{cluster.pk}"

    moved = client.post(
        f"{COMPUTE}/backends/{cluster.pk}/",
        {f"{field}-config": '{"host": "https://k8s.evil.example", "verify_ssl": false}', f"{field}-credentials": ""},
    )
    cluster.refresh_from_db()
    assert moved.status_code == 400
    shown = " ".join(html.unescape(text(moved)).split())
    assert "Changing host and turning off verify_ssl requires re-entering the token" in shown
    assert cluster.config["host"] == "https://k8s.acme.example" and cluster.config["verify_ssl"] is True
    resent = client.post(
        f"{COMPUTE}/backends/{cluster.pk}/",
        {
            f"{field}-config": '{"host": "https://k8s.evil.example", "verify_ssl": false}',
            f"{field}-credentials": '{"token": "k8s-new-token"}',
        },
    )
    cluster.refresh_from_db()
    assert resent.status_code == 302 and cluster.config["host"] == "https://k8s.evil.example"
    assert json.loads(crypto.decrypt(cluster.credentials_ciphertext)) == {"token": "k8s-new-token"}


def test_only_platform_staff_add_or_change_a_local_backend(signed_in, tenant):
    refused = signed_in(tenant.owner).post(f"{COMPUTE}/backends/", {"name": "box", "kind": "local", "config": "{}"})
    assert refused.status_code == 403
    assert "only platform staff may add or change a local backend" in text(refused).lower()
    tenant.owner.is_staff = True
    tenant.owner.save()
    added = signed_in(tenant.owner).post(
        f"{COMPUTE}/backends/", {"name": "box", "kind": "local", "config": "{}"}, follow=True
    )
    assert "The backend “box” was added." in text(added)
    with organization_scope(tenant.organization):
        local = ComputeBackend.objects.get(name="box")
    edited = signed_in(tenant.admin).post(
        f"{COMPUTE}/backends/{local.pk}/", {f"backend-{local.pk}-config": '{"work_dir": "/srv/x"}'}
    )
    assert edited.status_code == 403 and "only platform staff" in text(edited).lower()
    local.refresh_from_db()
    assert local.config == {}


def test_another_organizations_backend_cannot_be_changed(signed_in, tenant, other_tenant):
    foreign = make_backend(other_tenant.organization, name="globex-box")
    client = signed_in(tenant.owner)

    assert client.post(f"{COMPUTE}/backends/{foreign.pk}/enabled/", {"enabled": "0"}).status_code == 404
    assert client.post(f"{COMPUTE}/backends/{foreign.pk}/", {f"backend-{foreign.pk}-config": "{}"}).status_code == 404
    assert "globex-box" not in text(client.get(f"{COMPUTE}/"))
    foreign.refresh_from_db()
    assert foreign.enabled is True


def test_an_admin_sets_and_deletes_a_job_secret(signed_in, tenant, other_tenant):
    client = signed_in(tenant.admin)

    body = {"name": "WANDB_API_KEY", "value": "wandb-value-0123456789"}
    saved = client.post(f"{COMPUTE}/secrets/", body, follow=True)
    invalid = client.post(f"{COMPUTE}/secrets/", {"name": "AGENTOPS_X", "value": "v"})

    assert "The secret WANDB_API_KEY was saved." in text(saved)
    assert "wandb-value-0123456789" not in text(saved) and "••••6789" in text(saved)
    assert invalid.status_code == 400 and "not starting with AGENTOPS_" in text(invalid)
    with organization_scope(other_tenant.organization):
        secret_set(organization=other_tenant.organization, actor=None, name="WANDB_API_KEY", value="globex-value")
    deleted = client.post(f"{COMPUTE}/secrets/WANDB_API_KEY/delete/", follow=True)
    assert "was deleted" in text(deleted)
    assert client.post(f"{COMPUTE}/secrets/WANDB_API_KEY/delete/").status_code == 404
    with organization_scope(tenant.organization):
        assert not JobSecret.objects.exists()
    with organization_scope(other_tenant.organization):
        assert JobSecret.objects.filter(name="WANDB_API_KEY").exists()  # another organization's stays


def test_an_ended_job_shows_its_energy_and_co2e_beside_its_cost(signed_in, tenant, monkeypatch):
    from datetime import UTC, datetime, timedelta

    from billing.ledger import compute_usage_record
    from tests.jobs.factories import make_job

    hf = make_backend(tenant.organization, name="hf", kind="hf_jobs")
    started = datetime(2026, 11, 2, 12, tzinfo=UTC)
    job = make_job(
        tenant.project, hf, status=Job.Status.SUCCEEDED, started_at=started, ended_at=started + timedelta(hours=2)
    )
    compute_usage_record(
        organization_id=tenant.organization.pk,
        project_id=tenant.project.pk,
        job_id=job.pk,
        started_at=job.started_at,
        ended_at=job.ended_at,
        hardware="a100",
        backend="hf_jobs",
        hourly=Decimal("4"),
        price_id=None,
    )
    body = signed_in(tenant.viewer).get(f"/o/acme/p/agent/jobs/{job.pk}/").content.decode()
    # 2 h x 400 W on the US-east grid (370 g/kWh).
    assert re.search(rf'id="job-{job.pk}-carbon"[^>]*>≈ 800.0 Wh · 296.0 g CO2e<', body)
    # And in the status block a live update sends when the job ends.
    from agentops import live
    from jobs.live import announce_job

    sent = []
    monkeypatch.setattr(live, "listening_topics", lambda *, project, topics: set(topics))
    monkeypatch.setattr(live, "announce", lambda **kwargs: sent.append(kwargs))
    with organization_scope(tenant.organization):
        announce_job(job_id=job.pk)
    status = next(message["html"] for message in sent if message["topic"] == f"job:{job.pk}")
    assert re.search(rf'id="job-{job.pk}-carbon"[^>]*>≈ 800.0 Wh · 296.0 g CO2e<', status)
