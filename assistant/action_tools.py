"""The MCP server's action tools: work that costs money or changes data.

Each needs ``work:write`` (an API key's ``execute`` scope; the same permission the REST
API asks for the same action) and calls the owning app's service exactly as the REST
API does, so the hard-limit budgets (``billing.budgets.check_work_allowed``), the audit
log and idempotent hand-off to the workers are the services' own. Arguments are checked
with the REST API's input serializers: one set of rules for both doors.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from assistant.caller import run_for_caller
from assistant.read_tools import Backend, Evaluation, Hardware, Id, NameOrId, TimeLimit, job_submission

WRITE = "work:write"


def _valid(serializer_class, data: dict) -> dict:
    serializer = serializer_class(data={name: value for name, value in data.items() if value is not None})
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _run_details(project, runs) -> list:
    from runs import selectors
    from runs.api.serializers import RunDetailSerializer

    return RunDetailSerializer([selectors.run_detail(project=project, run_id=run.pk) for run in runs], many=True).data


def _replay_run(access, *, run_id: int, arguments: dict) -> dict:
    from runs import selectors
    from runs.api.replays import ReplayStartSerializer
    from runs.services.replay import replay_start

    data = _valid(ReplayStartSerializer, arguments)
    source = selectors.run_detail(project=access.project, run_id=run_id)
    runs = replay_start(source=source, actor=None, api_key=access.api_key, **data)
    return {"group": runs[0].execution["replay"]["group"], "runs": _run_details(access.project, runs)}


async def replay_run(
    run_id: Id,
    overrides: Annotated[
        dict[str, Any] | None,
        Field(
            description="Any of: model, system_prompt, version (of the run's agent), tools (names), "
            "temperature, top_p, max_tokens, random_seed."
        ),
    ] = None,
    tool_mode: Annotated[
        Literal["recorded", "live"],
        Field(description="recorded: tool calls answered from the source run; live: tools called for real."),
    ] = "recorded",
    unmatched: Annotated[
        Literal["fail", "live"], Field(description="With recorded tools, a call the source never made.")
    ] = "fail",
    fork_step: Annotated[
        int | None, Field(ge=1, description="Keep the source up to its model call N and run live from there.")
    ] = None,
    repeat: Annotated[int, Field(ge=1, description="Run the same replay this many times.")] = 1,
) -> dict[str, Any]:
    """Replay a run with changes (execute scope; refused when a hard budget is spent). Returns
    {"group", "runs": [the queued replay runs]}; follow them with get_run."""
    arguments = {
        "overrides": overrides or {},
        "tool_mode": tool_mode,
        "unmatched": unmatched,
        "fork_step": fork_step,
        "repeat": repeat,
    }
    return await run_for_caller(WRITE, "replay a run", _replay_run, run_id=run_id, arguments=arguments)


def _start_run(access, *, agent, input, version, parameters) -> dict:
    from runs import selectors
    from runs.api.agents import RunStartSerializer
    from runs.execution import run_start

    # The REST API's rules for the rest; its agent is an id, here a name works too.
    data = _valid(RunStartSerializer, {"agent": 1, "input": input, "version": version, "parameters": parameters})
    run = run_start(
        project=access.project,
        agent=selectors.agent_lookup(project=access.project, value=agent),
        actor=None,
        input=data["input"],
        version_number=data.get("version"),
        parameters=data.get("parameters"),
        api_key=access.api_key,
    )
    return {"run": _run_details(access.project, [run])[0]}


async def start_run(
    agent: NameOrId,
    input: Annotated[Any, Field(description="The user's message (text or JSON).")],
    version: Annotated[int | None, Field(ge=1, description="A version number; the latest by default.")] = None,
    parameters: Annotated[
        dict[str, Any] | None, Field(description="Overrides: temperature, top_p, max_tokens, random_seed.")
    ] = None,
) -> dict[str, Any]:
    """Start a run of one of the project's agents (execute scope; refused when a hard budget is
    spent). Returns {"run": the queued run}; follow it with get_run."""
    return await run_for_caller(
        WRITE, "start a run", _start_run, agent=agent, input=input, version=version, parameters=parameters
    )


def _start_experiment(access, *, arguments: dict) -> dict:
    from evals import selectors
    from evals.api.experiments import ExperimentSerializer, ExperimentStartSerializer, experiment_start_settings
    from evals.services.experiments import experiment_start
    from runs import selectors as runs_selectors

    data = _valid(ExperimentStartSerializer, arguments)
    experiment = experiment_start(
        project=access.project,
        actor=None,
        dataset=selectors.dataset_lookup(project=access.project, value=data["dataset"]),
        agent=runs_selectors.agent_lookup(project=access.project, value=data["agent"])
        if data["agent"] is not None
        else None,
        evaluators=[selectors.evaluator_lookup(project=access.project, value=name) for name in data["evaluators"]],
        **experiment_start_settings(data),
        api_key=access.api_key,
    )
    return ExperimentSerializer(selectors.experiment_detail(project=access.project, experiment_id=experiment.pk)).data


async def start_experiment(
    dataset: NameOrId,
    evaluators: Annotated[list[str], Field(min_length=1, description="The evaluators' names.")],
    agent: Annotated[int | str | None, Field(description="The agent's name or id (executed experiments).")] = None,
    agent_version: Annotated[int | None, Field(ge=1)] = None,
    dataset_version: Annotated[int | None, Field(ge=1)] = None,
    kind: Annotated[
        Literal["executed", "external"],
        Field(description="executed: the platform runs the agent on each item; external: results are reported."),
    ] = "executed",
    name: str = "",
    concurrency: Annotated[int, Field(ge=1, description="Items run at once.")] = 4,
    parameters: dict[str, Any] | None = None,
    branch: str = "",
    commit: str = "",
) -> dict[str, Any]:
    """Start an experiment: an agent over a dataset, scored by evaluators (execute scope; refused
    when a hard budget is spent). Returns the experiment (id, status, progress, url); gate it with
    run_gate once it has ended."""
    arguments = {
        "dataset": dataset,
        "dataset_version": dataset_version,
        "agent": agent,
        "agent_version": agent_version,
        "evaluators": evaluators,
        "kind": kind,
        "name": name,
        "concurrency": concurrency,
        "parameters": parameters or {},
        "branch": branch,
        "commit": commit,
    }
    return await run_for_caller(WRITE, "start an experiment", _start_experiment, arguments=arguments)


def _run_gate(access, *, experiment_id: int, arguments: dict) -> dict:
    from evals import selectors
    from evals.api.experiments import GateSerializer
    from evals.services.gate import gate_check

    data = _valid(GateSerializer, arguments)
    experiment = selectors.experiment_detail(project=access.project, experiment_id=experiment_id)
    return {
        "experiment_id": experiment.pk,
        **gate_check(experiment=experiment, conditions=data["conditions"], baseline=data.get("baseline")),
    }


async def run_gate(
    experiment_id: Id,
    conditions: Annotated[
        list[dict[str, Any]],
        Field(
            min_length=1,
            description='Each {"metric", "comparator" (>=, >, <=, <), "threshold", "relative"?}; metrics: an '
            "evaluator's name, pass_rate, cost, latency.",
        ),
    ],
    baseline: Annotated[
        dict[str, Any] | None,
        Field(description='For relative conditions: {"experiment": id} or {"branch": "main"}.'),
    ] = None,
) -> dict[str, Any]:
    """The quality gate on an ended experiment (execute scope): {"experiment_id", "status": passed|failed,
    "conditions": [{metric, comparator, threshold, actual, status, ...}]}."""
    arguments = {"conditions": conditions, "baseline": baseline}
    return await run_for_caller(
        WRITE, "run the quality gate", _run_gate, experiment_id=experiment_id, arguments=arguments
    )


def _submit_job(access, *, arguments: dict) -> dict:
    from jobs import selectors
    from jobs.api.views import JobSerializer, job_submit_arguments
    from jobs.services import job_submit

    data = job_submission(access, arguments)
    job = job_submit(project=access.project, actor=None, **job_submit_arguments(data), api_key=access.api_key)
    return JobSerializer(selectors.job_detail(project=access.project, job_id=job.pk)).data


async def submit_job(
    backend: Backend,
    hardware: Hardware,
    image: Annotated[str, Field(description="The container image; the platform's runner image by default.")] = "",
    command: Annotated[list[str] | str | None, Field(description="A list, or a shell-quoted text.")] = None,
    name: str = "",
    env: dict[str, str] | None = None,
    secrets: Annotated[list[str] | None, Field(description="Names of the organization's job secrets.")] = None,
    time_limit_seconds: TimeLimit = 3600,
    evaluation: Evaluation = None,
) -> dict[str, Any]:
    """Submit a GPU job (execute scope; refused when a hard budget is spent). Returns the job (id,
    status, estimate, url); follow it with list_jobs and get_job_logs. estimate_job_cost first."""
    arguments = {
        "backend": backend,
        "hardware": hardware,
        "name": name,
        "image": image,
        "command": command,
        "env": env or {},
        "secrets": secrets or [],
        "time_limit_seconds": time_limit_seconds,
        "evaluation": evaluation,
    }
    return await run_for_caller(WRITE, "submit a job", _submit_job, arguments=arguments)


_NO_EXPECTED = object()


def _add_run_to_dataset(access, *, dataset, run_id: int, expected) -> dict:
    from evals import selectors
    from evals.services.datasets import item_from_run
    from runs import selectors as runs_selectors

    found = selectors.dataset_lookup(project=access.project, value=dataset)
    run = runs_selectors.run_detail(project=access.project, run_id=run_id)
    version = item_from_run(
        dataset=found, actor=access.actor, run=run, expected=... if expected is _NO_EXPECTED else expected
    )
    return {
        "dataset": {"id": found.pk, "name": found.name},
        "version": version.number,
        "item_key": f"run-{run.pk}",
        "item_count": selectors.dataset_item_count(dataset=found, version_number=version.number),
    }


async def add_run_to_dataset(
    dataset: NameOrId,
    run_id: Id,
    expected: Annotated[
        Any, Field(description="The expected output; the run's output when left out, none when null.")
    ] = "__run_output__",
) -> dict[str, Any]:
    """Add a run to a dataset as an item (a new dataset version; the same run again replaces its
    item). Execute scope. Returns {"dataset", "version", "item_key", "item_count"}."""
    return await run_for_caller(
        WRITE,
        "change datasets",
        _add_run_to_dataset,
        dataset=dataset,
        run_id=run_id,
        expected=_NO_EXPECTED if expected == "__run_output__" else expected,
    )


TOOLS = [replay_run, start_run, start_experiment, run_gate, submit_job, add_run_to_dataset]
