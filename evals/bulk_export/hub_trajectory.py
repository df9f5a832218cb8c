"""The ``hf_trajectory`` export kind: an interactive session's or a run's trajectory
(``runs.trajectories``, the ``agentops.trajectory/1`` format of docs/sessions.md) pushed
to a Hugging Face Hub dataset repository as ``data/<split>.jsonl``, with a dataset card
that describes the format, in one commit. A Hub push like the others
(``evals.bulk_export.hub_kinds.HubPush``): the job's status, progress, log and retry; a
refused token or an unknown repository ends it failed with the reason.

Options (checked when the job is created, 400 with the reason): ``session`` (an
interactive session's id) or ``run`` (a run's id), exactly one, in the job's project;
``repo_id``, ``private`` (default true), ``split`` (default ``train``).
"""

from __future__ import annotations

from agentops.errors import InvalidRequest
from evals.bulk_export.errors import ExportFailed
from evals.bulk_export.hub_kinds import HubPush, _int_option
from runs import trajectories
from runs.models import Run, Session

FORMAT_SECTION = (
    "One JSON object per line, each one run, in the `agentops.trajectory/1` format "
    "(AgentOps Studio, docs/sessions.md#trajectories). A session gives one line per turn in "
    "order, undone turns included and flagged.\n\n"
    "- `format`: `agentops.trajectory/1`\n"
    "- `session` (`kind`, `id`, `title`), `turn`, `undone`\n"
    "- `run`: `id`, `trace_id`, `name`, `status`, `error`, `executed`, `replay_of`\n"
    "- `agent` (`name`, `version`), `model`, `models`, `input`, `output`\n"
    "- `messages`: the conversation in OpenAI chat form (`role`, `content`, `tool_calls` with "
    "`function.arguments` as JSON text, `tool_call_id`, `name`)\n"
    "- `tool_calls`: `id`, `name`, `arguments`, `result`, `error`, `status`, `started_at`, "
    "`ended_at`, `latency_ms`, `approval`\n"
    "- `model_calls`: `model`, `provider`, `status`, times, `usage`, `cost`, `reported_cost`\n"
    "- `usage`: `input_tokens` (of which `cached_input_tokens`, `cache_write_input_tokens`), "
    "`output_tokens` (of which `reasoning_output_tokens`), `total_tokens`, `model_calls`\n"
    "- `cost`: `currency` (USD), `computed`, `reported`, `reported_steps_computed`, "
    "`unpriced_steps` (amounts are decimal strings)\n"
    "- `timing`: `started_at`, `ended_at` (ISO 8601, UTC), `latency_ms`"
)


class HubTrajectoryPush(HubPush):
    kind = "hf_trajectory"
    label = "Trajectories to the Hugging Face Hub"
    table = "trajectories"
    default_split = "train"
    option_fields = ("session", "run")

    def clean_subject(self, project, options):
        session_id = _int_option(options, "session", required=False)
        run_id = _int_option(options, "run", required=False)
        if (session_id is None) == (run_id is None):
            raise InvalidRequest("give options.session (a session's id) or options.run (a run's id), one of them")
        if session_id is not None:
            if not Session.objects.filter(project=project, pk=session_id).exists():
                raise InvalidRequest(f"no session with id {session_id} in this project")
            return {"session": session_id}
        if not Run.objects.filter(project=project, pk=run_id).exists():
            raise InvalidRequest(f"no run with id {run_id} in this project")
        return {"run": run_id}

    def describe(self, job):
        subject = f"session {job.options['session']}" if "session" in job.options else f"run {job.options.get('run')}"
        return f"{self.label}: {job.options.get('repo_id', '')} ({subject})"

    def rows(self, job):
        project = job.project
        if "session" in job.options:
            session = Session.objects.filter(project=project, pk=job.options["session"]).first()
            if session is None:
                raise ExportFailed("the session was deleted")
            records = trajectories.session_records(session=session)
            subject = f"interactive session “{session}” (agent {session.agent.name})"
        else:
            run = Run.objects.filter(project=project, pk=job.options["run"]).first()
            if run is None:
                raise ExportFailed("the run was deleted")
            records = trajectories.run_records(run=run)
            subject = f"run “{run}”"
        about = {
            "title": f"Trajectory of the {subject}",
            "summary": f"The trajectory of the {subject} of the project “{project.name}”, exported from AgentOps "
            "Studio: {rows} runs, one JSON object per line, with the messages, tool calls and results, tokens, "
            "cost and timings.",
            "tags": ["trajectories", "agents"],
            "sections": [("Format", FORMAT_SECTION)],
        }
        return records, about
