"""agentops-eval: start an AgentOps Studio experiment from CI, wait for it, and fail the job
when its quality gate fails.

Exit codes:
  0  the gate passed (or there were no conditions and the experiment succeeded)
  1  the gate failed
  2  usage or configuration error, or the API refused the request (4xx, e.g. 402 budget_exceeded)
  3  the experiment failed, was cancelled, or did not end within --timeout
  4  server or network error after every retry (5xx, connection errors, throttling)
  130 interrupted (Ctrl-C); the experiment keeps running
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from agentops_eval import __version__, report
from agentops_eval.client import ENDED_STATUSES, ApiError, Client, ClientError, ConfigError, ServerError
from agentops_eval.config import add_command, make_client, parse_command_line, program_parser, say

EXIT_PASSED = 0
EXIT_GATE_FAILED = 1
EXIT_USAGE = 2
EXIT_EXPERIMENT = 3
EXIT_SERVER = 4
EXIT_INTERRUPTED = 130

#: Seconds between two progress lines when stdout is not a terminal (CI logs).
PROGRESS_INTERVAL = 10.0
COMPARATORS = (">=", "<=", "==", ">", "<")
_OPERATOR = re.compile(r">=|<=|==|!=|=>|=<|<>|>|<|=")


class UsageError(Exception):
    """Bad arguments found after parsing (exit 2)."""


class ExperimentError(Exception):
    """The experiment failed, was cancelled or did not end in time (exit 3)."""

    def __init__(self, message: str, experiment: dict | None):
        super().__init__(message)
        self.experiment = experiment


# -- parsing ------------------------------------------------------------------------------------


def parse_condition(text: str, *, relative: bool = False) -> dict:
    """``"correctness.pass_rate>=0.8"`` -> ``{"metric", "comparator", "threshold", "relative"}``.
    Comparators: >= > <= < ==. Raises ValueError with a readable message."""
    text = text or ""
    operators = list(_OPERATOR.finditer(text))
    example = f"write METRIC COMPARATOR NUMBER, e.g. 'correctness>=0.8' (comparators: {' '.join(COMPARATORS)})"
    if not operators:
        raise ValueError(f"{text!r} is not a condition: {example}")
    if len(operators) > 1:
        raise ValueError(f"{text!r}: one comparator only: {example}")
    operator = operators[0]
    comparator = operator[0]
    if comparator not in COMPARATORS:
        raise ValueError(f"{text!r}: unknown comparator {comparator!r}: {example}")
    metric, threshold_text = text[: operator.start()].strip(), text[operator.end() :].strip()
    if not metric or not threshold_text:
        raise ValueError(f"{text!r} is not a condition: {example}")
    try:
        threshold = float(threshold_text)
    except ValueError:
        raise ValueError(f"{text!r}: the threshold {threshold_text!r} is not a number") from None
    if not math.isfinite(threshold):
        raise ValueError(f"{text!r}: the threshold must be a finite number")
    return {"metric": metric, "comparator": comparator, "threshold": threshold, "relative": relative}


def _absolute_condition(text: str) -> dict:
    try:
        return parse_condition(text, relative=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _relative_condition(text: str) -> dict:
    try:
        return parse_condition(text, relative=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_param(text: str) -> tuple[str, object]:
    """``key=value``; the value is read as JSON when it is (numbers, true/false, null, lists,
    objects), else kept as a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")

    def refuse_constant(name):
        raise ValueError(name)

    try:
        value = json.loads(raw, parse_constant=refuse_constant)
    except ValueError:
        value = raw
    return key.strip(), value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


def _int_range(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{value} must be {bounds}")
        return value

    return parse


def _gate_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("gate")
    group.add_argument(
        "--gate",
        dest="conditions",
        action="append",
        type=_absolute_condition,
        default=[],
        metavar="CONDITION",
        help="a condition on the experiment, e.g. 'correctness>=0.8', 'correctness.pass_rate>=0.9', "
        "'latency_p95<2000', 'cost_per_item<=0.01' (repeatable)",
    )
    group.add_argument(
        "--gate-relative",
        dest="relative_conditions",
        action="append",
        type=_relative_condition,
        default=[],
        metavar="CONDITION",
        help="a condition on the change against the baseline (this minus baseline), e.g. "
        "'correctness>=-0.02' (repeatable; needs --baseline-branch or --baseline-experiment)",
    )
    baseline = group.add_mutually_exclusive_group()
    baseline.add_argument(
        "--baseline-branch", metavar="BRANCH", help="compare with the latest succeeded experiment of this branch"
    )
    baseline.add_argument(
        "--baseline-experiment", type=_int_range(1), metavar="ID", help="compare with this experiment"
    )
    group.add_argument(
        "--if-no-baseline",
        choices=("fail", "skip"),
        default="fail",
        help="when --baseline-branch has no succeeded experiment on the same dataset yet (a new project): "
        "'fail' (default: the API refuses, exit 2) or 'skip' the relative conditions and gate on the others",
    )
    outputs = parser.add_argument_group("outputs (written whenever given, also when the gate could not run)")
    outputs.add_argument("--junit", metavar="FILE", help="write a JUnit XML report (one testcase per condition)")
    outputs.add_argument(
        "--junit-items",
        action="store_true",
        help="in the JUnit XML, also one failed testcase per item that errored or failed an evaluator "
        "(a second testsuite; these show as failures even when the gate passed)",
    )
    outputs.add_argument("--markdown", metavar="FILE", help="write a Markdown summary (for a pull-request comment)")
    outputs.add_argument("--json", metavar="FILE", help="write the experiment, the gate's answer and the outcome")


def _wait_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("waiting")
    group.add_argument(
        "--timeout",
        type=_positive_float,
        default=3600.0,
        metavar="SECONDS",
        help="longest wait for the experiment to end (default 3600); then exit 3",
    )
    group.add_argument(
        "--poll", type=_positive_float, default=2.0, metavar="SECONDS", help="seconds between status checks (default 2)"
    )
    group.add_argument(
        "--cancel-on-timeout",
        action="store_true",
        help="cancel the experiment when --timeout is reached (by default it keeps running)",
    )


def _experiment_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--experiment", required=True, type=_int_range(1), metavar="ID", help="the experiment's id")


def build_parser() -> argparse.ArgumentParser:
    parser, commands = program_parser(
        "agentops-eval",
        description="Run AgentOps Studio experiments from CI and gate on their results.",
        epilog="exit codes:\n"
        "  0  the gate passed (or no conditions and the experiment succeeded)\n"
        "  1  the gate failed\n"
        "  2  usage or configuration error, or the API refused the request (4xx, e.g. budget_exceeded)\n"
        "  3  the experiment failed, was cancelled or did not end within --timeout\n"
        "  4  server or network error after every retry\n\n"
        "The connection options are also accepted after the command. Documentation: docs/ci.md",
    )

    run = add_command(
        commands,
        "run",
        help="start an experiment, wait for it, evaluate the gate",
        description="Start an experiment of AGENT on DATASET, wait for it to end, evaluate the gate "
        "conditions and write the reports.",
    )
    what = run.add_argument_group("experiment")
    what.add_argument("--dataset", required=True, metavar="NAME", help="the dataset's name")
    what.add_argument("--dataset-version", type=_int_range(1), metavar="N", help="a dataset version (default: latest)")
    what.add_argument("--agent", required=True, metavar="NAME", help="the agent's name")
    what.add_argument("--agent-version", type=_int_range(1), metavar="N", help="an agent version (default: latest)")
    what.add_argument(
        "--evaluator",
        dest="evaluators",
        action="append",
        required=True,
        metavar="NAME",
        help="an evaluator to score with, by name (repeatable; at least one)",
    )
    what.add_argument(
        "--concurrency", type=_int_range(1, 32), metavar="N", help="items run at once, 1 to 32 (server default 4)"
    )
    what.add_argument("--name", metavar="TEXT", help="the experiment's name")
    what.add_argument(
        "--branch",
        metavar="BRANCH",
        help="the code branch (default: GITHUB_HEAD_REF, GITHUB_REF_NAME or CI_COMMIT_REF_NAME)",
    )
    what.add_argument(
        "--commit",
        metavar="SHA",
        help="the commit (default: the pull request's head commit on GitHub, else GITHUB_SHA or CI_COMMIT_SHA)",
    )
    what.add_argument(
        "--param",
        dest="params",
        action="append",
        type=parse_param,
        default=[],
        metavar="KEY=VALUE",
        help="a parameter of the experiment; VALUE is read as JSON when it parses (repeatable)",
    )
    _gate_options(run)
    _wait_options(run)

    gate = add_command(
        commands,
        "gate",
        help="evaluate the gate of an existing experiment (waits for it to end)",
        description="Evaluate the gate conditions on an experiment (waiting for it if it is still running) "
        "and write the reports.",
    )
    _experiment_option(gate)
    _gate_options(gate)
    _wait_options(gate)

    status = add_command(
        commands,
        "status",
        help="show an experiment's status and summary",
        description="Print an experiment's status and summary. Exit 0 when it succeeded or is still "
        "queued or running, 3 when it failed or was cancelled.",
    )
    _experiment_option(status)
    return parser


# -- CI environment -----------------------------------------------------------------------------


def _github_event(env) -> dict:
    path = env.get("GITHUB_EVENT_PATH")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            event = json.load(handle)
    except (OSError, ValueError):
        return {}
    return event if isinstance(event, dict) else {}


def ci_branch(env=None) -> str | None:
    env = os.environ if env is None else env
    for name in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME"):
        if env.get(name):
            return env[name]
    return None


def ci_commit(env=None) -> str | None:
    """The commit under test. On a GitHub pull request GITHUB_SHA is a temporary merge commit,
    so the pull request's head commit is read from the event file instead."""
    env = os.environ if env is None else env
    head = ((_github_event(env).get("pull_request") or {}).get("head") or {}).get("sha")
    if head:
        return head
    for name in ("GITHUB_SHA", "CI_COMMIT_SHA"):
        if env.get(name):
            return env[name]
    return None


def ci_metadata(env=None) -> dict:
    env = os.environ if env is None else env
    metadata: dict = {"client": f"agentops-eval/{__version__}"}
    if env.get("GITHUB_ACTIONS") == "true":
        metadata["ci"] = "github"
        if env.get("GITHUB_REPOSITORY") and env.get("GITHUB_RUN_ID"):
            server = env.get("GITHUB_SERVER_URL", "https://github.com")
            metadata["ci_url"] = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
        number = (_github_event(env).get("pull_request") or {}).get("number")
        if number:
            metadata["pull_request"] = number
    elif env.get("GITLAB_CI") == "true":
        metadata["ci"] = "gitlab"
        if env.get("CI_JOB_URL"):
            metadata["ci_url"] = env["CI_JOB_URL"]
        if env.get("CI_MERGE_REQUEST_IID"):
            metadata["merge_request"] = env["CI_MERGE_REQUEST_IID"]
    return metadata


# -- progress -----------------------------------------------------------------------------------


class Progress:
    """One progress line: rewritten in place (``\\r``) on a terminal; elsewhere (CI logs) a
    plain line when the status changes and at most every PROGRESS_INTERVAL seconds."""

    def __init__(self, stream, *, tty: bool | None = None, interval: float | None = None):
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.interval = PROGRESS_INTERVAL if interval is None else interval
        self.width = 0
        self.last_line = ""
        self.last_status = None
        self.last_time = None

    @staticmethod
    def line(experiment: dict, elapsed: float | None = None) -> str:
        total = experiment.get("item_count")
        done = experiment.get("completed_count") or 0
        errors = experiment.get("error_count") or 0
        text = f"Experiment #{experiment.get('id')} {experiment.get('status', '?')}: "
        if total:
            text += f"{done}/{total} items ({100 * done // total}%)"
        else:
            text += f"{done} items"
        text += f", {errors} error{'s' if errors != 1 else ''}"
        if elapsed is not None:
            text += f", {report.fmt_duration(elapsed)} elapsed"
        metrics = ((experiment.get("summary") or {}).get("metrics") or {}).items()
        means = [f"{name} {report.fmt_num(v.get('mean'))}" for name, v in metrics if (v or {}).get("mean") is not None]
        if means:
            text += " | means: " + ", ".join(means[:4]) + (", ..." if len(means) > 4 else "")
        return text

    def update(self, experiment: dict, elapsed: float) -> None:
        text = self.line(experiment, elapsed)
        now = time.monotonic()
        if self.tty:
            columns = shutil.get_terminal_size((120, 20)).columns - 1
            text = text[:columns]
            self.stream.write("\r" + text.ljust(self.width))
            self.width = max(self.width, len(text))
            self.stream.flush()
        else:
            status = experiment.get("status")
            due = self.last_time is None or now - self.last_time >= self.interval or status != self.last_status
            if due and text != self.last_line:
                self.stream.write(text + "\n")
                self.stream.flush()
                self.last_time = now
            self.last_status = status
        self.last_line = text

    def finish(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0


# -- the commands -------------------------------------------------------------------------------


_say = say


def _make_client(args) -> Client:
    return make_client(args, prog="agentops-eval")


def _wait(client: Client, experiment: dict, args, started: float) -> dict:
    """Poll until the experiment ends; raise ExperimentError on timeout."""
    progress = Progress(sys.stdout)
    try:
        progress.update(experiment, time.monotonic() - started)
        while experiment.get("status") not in ENDED_STATUSES:
            remaining = args.timeout - (time.monotonic() - started)
            if remaining <= 0:
                progress.finish()
                message = (
                    f"timed out after {args.timeout:g} s waiting for experiment "
                    f"#{experiment.get('id')} ({experiment.get('status')}, "
                    f"{experiment.get('completed_count') or 0}/{experiment.get('item_count') or '?'} items)"
                )
                if args.cancel_on_timeout:
                    try:
                        experiment = client.cancel_experiment(experiment["id"]) or experiment
                        message += "; cancelled it"
                    except ClientError as exc:
                        message += f"; cancelling it failed: {exc}"
                else:
                    message += "; it keeps running"
                raise ExperimentError(message, experiment)
            time.sleep(min(args.poll, remaining))
            experiment = client.get_experiment(experiment["id"])
            progress.update(experiment, time.monotonic() - started)
    finally:
        progress.finish()
    return experiment


def _check_gate_args(args) -> tuple[list[dict], dict | None]:
    conditions = list(args.conditions) + list(args.relative_conditions)
    baseline = None
    if args.baseline_branch:
        baseline = {"branch": args.baseline_branch}
    elif args.baseline_experiment:
        baseline = {"experiment": args.baseline_experiment}
    if args.relative_conditions and baseline is None:
        raise UsageError("--gate-relative needs a baseline: add --baseline-branch BRANCH or --baseline-experiment ID")
    return conditions, baseline


def _wants_items(args) -> bool:
    """The failing items are read for the Markdown, the JSON and --junit-items."""
    return bool(args.markdown or args.json or (args.junit and args.junit_items))


def _conclude(client: Client, experiment: dict, args, conditions, baseline, outcome: report.Outcome) -> None:
    """The experiment has ended: read its failing items (for the reports), then evaluate
    the gate when it succeeded."""
    outcome.experiment = experiment
    if _wants_items(args):
        try:
            outcome.results, outcome.results_complete = client.results(experiment["id"])
        except ClientError as exc:
            _say(f"agentops-eval: warning: could not read the item results ({exc}); reports list no items")
    status = experiment.get("status")
    if status != "succeeded":
        detail = f": {report.one_line(experiment['error'], 300)}" if experiment.get("error") else ""
        raise ExperimentError(f"experiment #{experiment.get('id')} {status}{detail}", experiment)
    if args.if_no_baseline == "skip" and args.baseline_branch and args.relative_conditions:
        if not _has_baseline(client, experiment, args.baseline_branch):
            outcome.skipped = [c for c in conditions if c["relative"]]
            outcome.skip_reason = f"no succeeded experiment on branch {args.baseline_branch} to compare with"
            conditions = [c for c in conditions if not c["relative"]]
            _say(f"agentops-eval: warning: {outcome.skip_reason}; the relative conditions are skipped")
    if not conditions:
        outcome.status, outcome.exit_code = report.PASSED, EXIT_PASSED
        return
    answer = client.gate(experiment["id"], conditions, baseline)
    outcome.gate = answer
    if answer.get("status") == "passed":
        outcome.status, outcome.exit_code = report.PASSED, EXIT_PASSED
    else:
        outcome.status, outcome.exit_code = report.FAILED, EXIT_GATE_FAILED


def _has_baseline(client: Client, experiment: dict, branch: str) -> bool:
    """Whether ``branch`` has a succeeded experiment on the same dataset created before
    this one: the baseline the gate would pick."""
    params = {"branch": branch, "status": "succeeded", "page_size": 50}
    dataset_id = (experiment.get("dataset") or {}).get("id")
    if dataset_id is not None:
        params["dataset"] = dataset_id
    page = client.request("GET", "experiments/", params=params)
    rows = page.get("results", []) if isinstance(page, dict) else page
    created = experiment.get("created_at") or ""
    return any(
        row.get("id") != experiment.get("id") and (not created or _instant(row.get("created_at")) < _instant(created))
        for row in rows
    )


def _instant(value) -> datetime:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return datetime.max.replace(tzinfo=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _run(args, outcome: report.Outcome) -> None:
    conditions, baseline = _check_gate_args(args)
    outcome.conditions = conditions
    client = _make_client(args)
    body: dict = {
        "dataset": args.dataset,
        "dataset_version": args.dataset_version,
        "agent": args.agent,
        "agent_version": args.agent_version,
        "evaluators": args.evaluators,
    }
    if args.name:
        body["name"] = args.name
    if args.concurrency is not None:
        body["concurrency"] = args.concurrency
    if args.params:
        body["parameters"] = dict(args.params)
    branch = args.branch if args.branch is not None else ci_branch()
    commit = args.commit if args.commit is not None else ci_commit()
    if branch:
        body["branch"] = branch
    if commit:
        body["commit"] = commit
    body["metadata"] = ci_metadata()

    started = time.monotonic()
    experiment = client.start_experiment(body, idempotency_key=str(uuid.uuid4()))
    outcome.experiment = experiment
    print(f"Started experiment #{experiment.get('id')}: {experiment.get('url', '')}".rstrip(), flush=True)
    experiment = _wait(client, experiment, args, started)
    outcome.waited_seconds = time.monotonic() - started
    _conclude(client, experiment, args, conditions, baseline, outcome)


def _gate(args, outcome: report.Outcome) -> None:
    conditions, baseline = _check_gate_args(args)
    outcome.conditions = conditions
    client = _make_client(args)
    started = time.monotonic()
    experiment = client.get_experiment(args.experiment)
    outcome.experiment = experiment
    if experiment.get("status") not in ENDED_STATUSES:
        print(f"Waiting for experiment #{experiment.get('id')}: {experiment.get('url', '')}".rstrip(), flush=True)
        experiment = _wait(client, experiment, args, started)
        outcome.waited_seconds = time.monotonic() - started
    _conclude(client, experiment, args, conditions, baseline, outcome)


def _status(args) -> int:
    client = _make_client(args)
    experiment = client.get_experiment(args.experiment)
    if experiment.get("status") not in ENDED_STATUSES:
        print(Progress.line(experiment))
        if experiment.get("url"):
            print(experiment["url"])
        return EXIT_PASSED
    ok = experiment.get("status") == "succeeded"
    outcome = report.Outcome(status=report.PASSED if ok else report.ERROR, exit_code=0, experiment=experiment)
    print(report.summary_text(outcome, with_headline=False))
    return EXIT_PASSED if ok else EXIT_EXPERIMENT


def _write(path: str, content: str | bytes) -> None:
    target = Path(path)
    if target.parent and not target.parent.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content, encoding="utf-8")


def _write_outputs(args, outcome: report.Outcome) -> bool:
    written = True
    for attribute, render in (("junit", report.junit_xml), ("markdown", report.markdown), ("json", report.json_report)):
        path = getattr(args, attribute, None)
        if not path:
            continue
        try:
            _write(path, render(outcome))
        except OSError as exc:
            _say(f"agentops-eval: error: could not write {path}: {exc}")
            written = False
    return written


def main(argv: list[str] | None = None) -> int:
    args = parse_command_line(build_parser(), argv)
    if isinstance(args, int):
        return args

    if args.command == "status":
        try:
            return _status(args)
        except (ConfigError, ApiError) as exc:
            _say(f"agentops-eval: error: {exc}")
            return EXIT_USAGE
        except ServerError as exc:
            _say(f"agentops-eval: error: {exc}")
            return EXIT_SERVER
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED

    outcome = report.Outcome(status=report.ERROR, exit_code=EXIT_USAGE, junit_items=args.junit_items)
    command = _run if args.command == "run" else _gate
    try:
        command(args, outcome)
    except (UsageError, ConfigError) as exc:
        outcome.status, outcome.exit_code, outcome.message = report.ERROR, EXIT_USAGE, str(exc)
    except ApiError as exc:
        outcome.status, outcome.exit_code, outcome.message = report.ERROR, EXIT_USAGE, f"the API refused: {exc}"
    except ServerError as exc:
        outcome.status, outcome.exit_code, outcome.message = report.ERROR, EXIT_SERVER, str(exc)
    except ExperimentError as exc:
        outcome.status, outcome.exit_code, outcome.message = report.ERROR, EXIT_EXPERIMENT, str(exc)
        outcome.experiment = exc.experiment or outcome.experiment
    except KeyboardInterrupt:
        experiment = outcome.experiment or {}
        where = f" experiment #{experiment.get('id')} keeps running: {experiment.get('url', '')}" if experiment else ""
        _say(f"agentops-eval: interrupted.{where}".rstrip())
        return EXIT_INTERRUPTED

    if outcome.experiment or outcome.gate:
        print("")
        print(report.summary_text(outcome), flush=True)
    if outcome.status == report.ERROR:
        _say(f"agentops-eval: error: {outcome.message}")
    if not _write_outputs(args, outcome) and outcome.exit_code == EXIT_PASSED:
        return EXIT_USAGE
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
