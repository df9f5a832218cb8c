"""Starting an experiment: the request checked whole, then stored in one transaction.

``experiment_start`` refuses what could not run (400: an unknown kind or version, no
items, a human or archived evaluator, an agent that pauses for approvals, values that
cannot be stored; 402: a spent hard budget covering an executed experiment), stores the
experiment, with the evaluators' settings frozen in it, and one pending result per item
of the dataset version, and once committed queues its first step
(``evals.tasks.advance_experiment``). Nothing runs here.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agentops.errors import InvalidRequest
from agentops.jsonsafe import storage_problem
from agentops.queueing import send_after_commit
from agentops.services.audit import acting_user, audit_record
from billing.budgets import check_work_allowed
from evals import tasks
from evals.models import Dataset, DatasetItem, DatasetVersion, Evaluator, Experiment, ExperimentResult
from evals.scoring import spec_of
from runs.models import Agent, AgentVersion
from runs.services.agents import clean_parameters

MAX_CONCURRENCY = 32
MAX_ITEMS = 50_000


def experiment_start(
    *,
    project,
    actor,
    dataset: Dataset,
    evaluators: list[Evaluator],
    kind: str = Experiment.Kind.EXECUTED,
    agent: Agent | None = None,
    agent_version_number: int | None = None,
    dataset_version_number: int | None = None,
    name: str = "",
    concurrency: int = 4,
    parameters: dict | None = None,
    branch: str = "",
    commit: str = "",
    metadata: dict | None = None,
    api_key=None,
    job_id: int | None = None,
    ip: str | None = None,
) -> Experiment:
    """Store an experiment with a pending result per item and hand it to a worker.

    Refused with 402 when a hard budget covering the project (or key) is spent, and
    with 400 when it could not run: no items, an unknown version, a human evaluator
    (people score through annotation queues), an agent that pauses for approvals."""
    if kind not in Experiment.Kind.values:
        raise InvalidRequest(f"kind must be one of {', '.join(Experiment.Kind.values)}")
    for field, value in (("metadata", metadata), ("parameters", parameters), ("name", name), ("branch", branch)):
        if problem := storage_problem(value):
            raise InvalidRequest(f"{field} cannot be stored: {problem}")
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise InvalidRequest(f"concurrency must be 1 to {MAX_CONCURRENCY}")
    version = _dataset_version(dataset, dataset_version_number)
    specs = _evaluator_specs(evaluators)
    agent_version = None
    overrides = clean_parameters(parameters)
    if kind == Experiment.Kind.EXECUTED:
        if agent is None:
            raise InvalidRequest("an executed experiment needs an agent")
        agent_version = _agent_version(agent, agent_version_number)
        check_work_allowed(project=project, api_key=api_key, work="experiment")
    elif agent is not None:
        agent_version = _agent_version(agent, agent_version_number)
    elif overrides:
        raise InvalidRequest("parameters apply to the agent the platform runs; an external experiment has none")
    items = list(DatasetItem.objects.filter(dataset=dataset).in_version(version.number).order_by("id"))
    if not items:
        raise InvalidRequest(f"version {version.number} of dataset {dataset.name!r} has no items")
    if len(items) > MAX_ITEMS:
        raise InvalidRequest(f"an experiment runs at most {MAX_ITEMS} items; this version has {len(items)}")

    now = timezone.now()
    model = (agent_version.model if agent_version else "") or (metadata or {}).get("model", "")
    with transaction.atomic():
        experiment = Experiment.objects.create(
            organization_id=project.organization_id,
            project=project,
            dataset=dataset,
            dataset_version=version,
            name=name.strip() or _default_name(dataset, agent_version, now),
            kind=kind,
            agent_version=agent_version,
            agent_name=agent.name if agent else str((metadata or {}).get("agent", "")),
            agent_version_label=str(agent_version.number) if agent_version else "",
            model=str(model)[:200],
            parameters={**(agent_version.parameters if agent_version else {}), **overrides},
            evaluators=specs,
            concurrency=concurrency,
            branch=branch[:200],
            commit=commit[:100],
            metadata=metadata or {},
            item_count=len(items),
            job=job_id,
            api_key=api_key,
            created_by=acting_user(actor),
            created_at=now,
        )
        ExperimentResult.objects.bulk_create(
            [
                ExperimentResult(
                    organization_id=project.organization_id,
                    project=project,
                    experiment=experiment,
                    item=item,
                    item_key=item.key,
                )
                for item in items
            ],
            batch_size=2000,
        )
        audit_record(
            organization=project.organization,
            actor=actor,
            action="experiment.start",
            target=experiment,
            data={
                "dataset": dataset.name,
                "dataset_version": version.number,
                "kind": kind,
                "agent": experiment.agent_name,
                "agent_version": experiment.agent_version_label,
                "evaluators": [spec["name"] for spec in specs],
            },
            ip=ip,
        )
        send_after_commit(tasks.advance_experiment, experiment.organization_id, experiment.pk)  # recover_experiments
    return experiment


def _default_name(dataset: Dataset, agent_version: AgentVersion | None, now) -> str:
    who = f"{agent_version.agent.name} v{agent_version.number}" if agent_version else "external"
    return f"{who} on {dataset.name} · {now:%Y-%m-%d %H:%M}"


def _dataset_version(dataset: Dataset, number: int | None) -> DatasetVersion:
    number = number or dataset.latest_version
    version = DatasetVersion.objects.filter(dataset=dataset, number=number).first()
    if version is None:
        raise InvalidRequest(f"dataset {dataset.name!r} has no version {number}")
    return version


def _agent_version(agent: Agent, number: int | None) -> AgentVersion:
    number = number or agent.latest_version
    version = AgentVersion.objects.select_related("agent").filter(agent=agent, number=number).first()
    if version is None:
        raise InvalidRequest(f"agent {agent.name!r} has no version {number}")
    if version.approval_tools:
        raise InvalidRequest(
            f"version {number} of {agent.name!r} pauses for a person's approval before "
            f"{', '.join(version.approval_tools)}; experiments need an agent that runs unattended"
        )
    return version


def _evaluator_specs(evaluators: list[Evaluator]) -> list[dict]:
    if not evaluators:
        raise InvalidRequest("name at least one evaluator")
    specs = []
    for evaluator in evaluators:
        if evaluator.archived:
            raise InvalidRequest(f"evaluator {evaluator.name!r} is archived")
        if evaluator.kind == Evaluator.Kind.HUMAN:
            raise InvalidRequest(
                f"evaluator {evaluator.name!r} is scored by people: use an annotation queue for it, not an experiment"
            )
        specs.append(spec_of(evaluator))
    names = [spec["name"] for spec in specs]
    if len(set(names)) != len(names):
        raise InvalidRequest("each evaluator may be named once")
    return specs
