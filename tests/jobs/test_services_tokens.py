"""The job-scoped token (jobs/services/tokens.py): an evaluation job's token opens its
job only while it runs. The backend here is scripted."""

from decimal import Decimal

from agentops.scoping import organization_scope
from jobs.models import Job
from jobs.services import job_cancel, job_for_token, token_live
from tests.jobs.factories import poll_once, submit_job


def test_the_job_token_opens_its_job_only_while_it_runs(tenant, backend, scripted):
    from tests.evals.factories import make_dataset, make_evaluator

    dataset = make_dataset(tenant.project, [{"key": "a", "input": "x", "expected": "x"}])
    evaluator = make_evaluator(tenant.project, "exact", "exact_match")
    job = submit_job(
        tenant,
        backend,
        evaluation={"dataset": dataset, "evaluators": [evaluator], "model": "echo", "seconds_per_item": 30},
    )
    assert job.kind == "evaluation" and job.experiment.kind == "external" and job.experiment.job == job.pk
    assert job.estimate["basis"] == "items" and job.estimated_cost == Decimal("0.025000000")  # 30 s at $3.00/h
    poll_once(tenant, job)
    (spec,) = [call[1] for call in scripted.all_calls() if call[0] == "submit"]
    token = spec.env["AGENTOPS_JOB_TOKEN"]
    assert spec.env["AGENTOPS_JOB_ID"] == str(job.pk) and spec.env["AGENTOPS_MODEL"] == "echo"
    found = job_for_token(token)
    assert found.pk == job.pk and token_live(found)
    assert job_for_token(token[:-2] + "xx") is None and job_for_token("ao_not_a_job_token") is None
    with organization_scope(tenant.organization):
        assert job.token_hash and token not in str(Job.objects.get(pk=job.pk).__dict__)
        job_cancel(job=job, actor=tenant.member)
    poll_once(tenant, job)
    assert not token_live(job_for_token(token))
