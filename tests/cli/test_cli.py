"""The CI client in cli/ (package agentops_eval), driven against a fake experiments API
served by http.server on 127.0.0.1: exit codes, retries with one Idempotency-Key, the
progress line, JUnit XML, Markdown and the condition parser. No database."""

from __future__ import annotations

import io
import json
import re
import sys
import threading
import tomllib
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
if str(CLI_DIR) not in sys.path:
    sys.path.insert(0, str(CLI_DIR))

from agentops_eval import __main__ as cli  # noqa: E402
from agentops_eval import client as client_module  # noqa: E402
from agentops_eval import report  # noqa: E402

PREFIX = "/api/v1/projects/acme/agent/"
METRICS = {
    "correctness": 0.85,
    "correctness.pass_rate": 0.8,
    "tone": 0.9,
    "tone.pass_rate": 1.0,
    "pass_rate": 0.75,
    "error_rate": 0.05,
    "cost": 0.04,
    "cost_per_item": 0.002,
    "latency_p50": 900.0,
    "latency_p95": 1800.0,
}
BASELINE = {"correctness": 0.9, "tone": 0.88, "pass_rate": 0.7, "latency_p95": 2000.0}
COMPARE = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
}
RESULTS = [
    {
        "item_key": "q1",
        "status": "done",
        "scores": {"correctness": 1.0, "tone": 1.0},
        "passed": {"correctness": True, "tone": True},
        "error": "",
    },
    {
        "item_key": "q2",
        "status": "done",
        "scores": {"correctness": 0.2, "tone": 0.9},
        "passed": {"correctness": False, "tone": True},
        "error": "",
    },
    {
        "item_key": "q3|odd",
        "status": "error",
        "scores": {"correctness": None},
        "passed": {"correctness": None},
        "error": "agent crashed\x00 with <bad> output",
    },
]


class FakeApi:
    """The experiments API of the contract, with scripted behaviour."""

    def __init__(self):
        self.requests: list[dict] = []
        self.experiments: dict[int, dict] = {}
        self.idempotent: dict[str, tuple[int, dict]] = {}
        # Each GET of an experiment moves it one step along this script.
        self.script = [("queued", 0, 0), ("running", 5, 0), ("running", 12, 1), ("succeeded", 20, 1)]
        self.final_error = ""
        self.start_actions: list = []  # before answering a start normally: "drop" or (status, body)
        self.always: dict[str, tuple[int, dict]] = {}  # "start" | "get" | "gate" -> a fixed answer
        self.gate_conflicts = 0  # the gate answers 409 this many times first
        self.listed: list[dict] = []  # what GET experiments/ lists
        self.baseline_exists = True  # False: the gate refuses relative conditions on a branch baseline
        self.lock = threading.Lock()
        self.url = ""

    def experiment(self, experiment_id: int, status: str, done: int, errors: int) -> dict:
        return {
            "id": experiment_id,
            "name": f"exp {experiment_id}",
            "kind": "executed",
            "status": status,
            "dataset": {"id": 3, "name": "qa"},
            "dataset_version": 2,
            "agent": {"name": "support", "version": "4"},
            "model": "mistral-small",
            "branch": "feature/x",
            "commit": "abc1234def5678",
            "concurrency": 4,
            "item_count": 20,
            "completed_count": done,
            "error_count": errors,
            "progress": done / 20,
            "summary": {
                "metrics": {
                    "correctness": {"mean": 0.85, "ci_low": 0.7, "ci_high": 0.95, "n": done, "pass_rate": 0.8},
                    "tone": {"mean": 0.9, "ci_low": 0.82, "ci_high": 0.97, "n": done, "pass_rate": 1.0},
                }
                if done
                else {},
                "pass_rate": 0.75,
                "latency_ms": {"p50": 900, "p95": 1800, "mean": 1000},
                "cost": "0.0400",
                "cost_per_item": "0.0020",
                "error_rate": 0.05,
            },
            "total_cost": "0.0400",
            "error": self.final_error if status == "failed" else "",
            "created_at": "2025-01-01T00:00:00Z",
            "started_at": None,
            "ended_at": None,
            "url": f"{self.url}/acme/agent/evals/experiments/{experiment_id}/",
        }

    def starts(self) -> list[dict]:
        return [r for r in self.requests if r["method"] == "POST" and r["path"] == PREFIX + "experiments/"]


def _handler(api: FakeApi):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body, headers=None):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, code: str, message: str, details=None):
            self._send(status, {"error": {"code": code, "message": message, "details": details}})

        def _record(self, body):
            parts = urlsplit(self.path)
            entry = {
                "method": self.command,
                "path": parts.path,
                "query": parse_qs(parts.query),
                "headers": dict(self.headers.items()),
                "body": body,
            }
            with api.lock:
                api.requests.append(entry)
            return parts.path, entry

        def do_GET(self):  # noqa: N802
            path, entry = self._record(None)
            if entry["headers"].get("Authorization") != "Bearer ao_test":
                return self._error(401, "not_authenticated", "invalid API key")
            if path == PREFIX + "experiments/":
                return self._send(200, {"next": None, "previous": None, "results": api.listed})
            match = re.fullmatch(re.escape(PREFIX) + r"experiments/(\d+)/(results/)?", path)
            if not match or int(match[1]) not in api.experiments:
                return self._error(404, "not_found", "no such experiment")
            if "get" in api.always:
                return self._send(*api.always["get"])
            state = api.experiments[int(match[1])]
            if match[2]:
                cursor = entry["query"].get("cursor", ["0"])[0]
                if cursor == "0":
                    # As a server behind a TLS proxy may build it: another scheme and host.
                    url = f"https://proxy.invalid{PREFIX}experiments/{match[1]}/results/?cursor=1"
                    return self._send(200, {"next": url, "previous": None, "results": RESULTS[:2]})
                return self._send(200, {"next": None, "previous": None, "results": RESULTS[2:]})
            with api.lock:
                if state["cancelled"]:
                    status, done, errors = "cancelled", state["done"], 0
                else:
                    state["step"] = min(state["step"] + 1, len(api.script) - 1)
                    status, done, errors = api.script[state["step"]]
                    state["done"] = done
                state["status"] = status
            return self._send(200, api.experiment(int(match[1]), status, done, errors))

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            path, entry = self._record(body)
            if entry["headers"].get("Authorization") != "Bearer ao_test":
                return self._error(401, "not_authenticated", "invalid API key")
            if path == PREFIX + "experiments/":
                return self._start(body, entry["headers"].get("Idempotency-Key"))
            match = re.fullmatch(re.escape(PREFIX) + r"experiments/(\d+)/(gate|cancel)/", path)
            if not match or int(match[1]) not in api.experiments:
                return self._error(404, "not_found", "no such experiment")
            experiment_id, state = int(match[1]), api.experiments[int(match[1])]
            if match[2] == "cancel":
                state["cancelled"] = True
                return self._send(202, api.experiment(experiment_id, "cancelled", state["done"], 0))
            if "gate" in api.always:
                return self._send(*api.always["gate"])
            if state["status"] not in ("succeeded", "failed", "cancelled") or api.gate_conflicts > 0:
                api.gate_conflicts -= 1
                return self._error(409, "conflict", "the experiment has not ended")
            return self._gate(experiment_id, body)

        def _start(self, body, key):
            if "start" in api.always:
                return self._send(*api.always["start"])
            if not body.get("evaluators"):
                return self._error(400, "invalid", "evaluators: This field is required.")
            with api.lock:
                if key in api.idempotent:
                    status, stored = api.idempotent[key]
                    return self._send(status, stored, {"Idempotent-Replayed": "true"})
                action = api.start_actions.pop(0) if api.start_actions else None
                if action is not None and action != "drop":
                    return self._send(*action)
                experiment_id = len(api.experiments) + 1
                api.experiments[experiment_id] = {"step": 0, "status": "queued", "done": 0, "cancelled": False}
                answer = api.experiment(experiment_id, "queued", 0, 0)
                api.idempotent[key] = (202, answer)
            if action == "drop":  # the experiment started, but the answer is lost
                self.close_connection = True
                return None
            return self._send(202, answer)

        def _gate(self, experiment_id, body):
            baseline = body.get("baseline")
            answers, passed = [], True
            for condition in body["conditions"]:
                metric = condition["metric"]
                if metric not in METRICS:
                    return self._error(400, "invalid", f"unknown metric {metric!r}")
                base = None
                actual = METRICS[metric]
                if condition["relative"]:
                    if not baseline or ("branch" in baseline and not api.baseline_exists):
                        return self._error(
                            400,
                            "invalid",
                            "a relative condition needs a baseline, and none was found (no succeeded "
                            f"experiment on branch {(baseline or {}).get('branch')!r} before this one)",
                        )
                    base = BASELINE[metric]
                    actual = round(actual - base, 6)
                ok = COMPARE[condition["comparator"]](actual, condition["threshold"])
                passed = passed and ok
                answers.append(
                    dict(
                        condition,
                        actual=actual,
                        value=METRICS[metric],
                        status="passed" if ok else "failed",
                        baseline_value=base,
                    )
                )
            return self._send(
                200,
                {
                    "status": "passed" if passed else "failed",
                    "conditions": answers,
                    "baseline": {"id": 7, "name": "nightly", "branch": "main"} if baseline else None,
                    "experiment": {"id": experiment_id, "status": "succeeded"},
                },
            )

    return Handler


@pytest.fixture
def api(monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith(("GITHUB_", "GITLAB_", "CI_")) or name.lower() in (
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(client_module, "DEFAULT_BACKOFF", 0.001)
    fake = FakeApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    monkeypatch.setenv("AGENTOPS_URL", fake.url)
    monkeypatch.setenv("AGENTOPS_PROJECT", "acme/agent")
    monkeypatch.setenv("AGENTOPS_API_KEY", "ao_test")
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(5)


RUN = ["run", "--dataset", "qa", "--agent", "support", "--evaluator", "correctness", "--poll", "0.01"]


def _junit(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def _suite(root: ET.Element, name: str) -> ET.Element | None:
    return next((s for s in root.iter("testsuite") if s.get("name") == name), None)


# -- exit codes ---------------------------------------------------------------------------------


def test_passing_gate_exits_0_and_writes_the_reports(api, tmp_path, capsys):
    junit, md, js = tmp_path / "out" / "junit.xml", tmp_path / "eval.md", tmp_path / "eval.json"
    argv = [
        *RUN,
        "--gate",
        "correctness>=0.8",
        "--gate",
        "correctness.pass_rate >= 0.8",
        "--param",
        "temperature=0.2",
        "--param",
        "style=short",
        "--concurrency",
        "8",
        "--branch",
        "feature/x",
        "--commit",
        "abc1234",
        "--junit",
        str(junit),
        "--junit-items",
        "--markdown",
        str(md),
        "--json",
        str(js),
    ]
    assert cli.main(argv) == 0

    (start,) = api.starts()
    assert start["headers"]["Authorization"] == "Bearer ao_test"
    assert re.fullmatch(r"[0-9a-f-]{36}", start["headers"]["Idempotency-Key"])
    body = start["body"]
    assert body["dataset"] == "qa" and body["agent"] == "support"
    assert body["dataset_version"] is None and body["agent_version"] is None
    assert body["evaluators"] == ["correctness"]
    assert body["concurrency"] == 8
    assert body["parameters"] == {"temperature": 0.2, "style": "short"}
    assert body["branch"] == "feature/x" and body["commit"] == "abc1234"
    assert body["metadata"]["client"].startswith("agentops-eval/")

    gate = next(r for r in api.requests if r["path"].endswith("/gate/"))
    assert gate["body"] == {
        "conditions": [
            {"metric": "correctness", "comparator": ">=", "threshold": 0.8, "relative": False},
            {"metric": "correctness.pass_rate", "comparator": ">=", "threshold": 0.8, "relative": False},
        ],
        "baseline": None,
    }

    out = capsys.readouterr().out
    assert "Started experiment #1" in out
    # Not a terminal: plain progress lines, no carriage returns.
    assert "\r" not in out
    assert "Experiment #1 queued: 0/20 items" in out
    assert "Experiment #1 running: 5/20 items (25%), 0 errors" in out
    assert "Experiment #1 succeeded: 20/20 items (100%), 1 error" in out
    assert re.search(r"correctness\s+0\.850\s+\[0\.700, 0\.950\]\s+80\.0%\s+20", out)
    assert re.search(r"correctness >= 0\.8\s+0\.850\s+>= 0\.8\s+PASS", out)
    assert "Gate: PASSED (2 of 2 conditions passed)" in out

    root = _junit(junit)
    gate_suite = _suite(root, "agentops-eval gate")
    assert gate_suite.get("tests") == "2" and gate_suite.get("failures") == "0"
    assert [c.get("name") for c in gate_suite.iter("testcase")] == [
        "correctness >= 0.8",
        "correctness.pass_rate >= 0.8",
    ]
    # The failing items are read across the two result pages.
    items = _suite(root, "agentops-eval items")
    assert items.get("tests") == "2" and items.get("failures") == "1" and items.get("errors") == "1"
    q2 = next(c for c in items.iter("testcase") if c.get("name") == "q2")
    assert q2.find("failure").get("message") == "failed correctness=0.200"
    q3 = next(c for c in items.iter("testcase") if c.get("name") == "q3|odd")
    assert "agent crashed" in q3.find("error").get("message")

    text = md.read_text()
    assert "**Gate: PASSED** - 2 of 2 conditions passed" in text
    assert f"[Experiment #1: exp 1]({api.url}/acme/agent/evals/experiments/1/)" in text
    assert "| correctness | 0.850 | [0.700, 0.950] | 80.0% | 20 |" in text
    assert "| `correctness` | 0.850 | >= 0.8 | PASS |" in text
    assert "`q3\\|odd`" in text and "&lt;bad>" in text
    assert "Compared with baseline" not in text

    data = json.loads(js.read_text())
    assert data["status"] == "passed" and data["exit_code"] == 0
    assert data["experiment"]["id"] == 1 and data["gate"]["status"] == "passed"


def test_failing_gate_exits_1(api, tmp_path, capsys):
    junit, md = tmp_path / "junit.xml", tmp_path / "eval.md"
    argv = [*RUN, "--gate", "correctness>=0.9", "--gate", "tone>0.5", "--gate", "latency_p95<1000"]
    assert cli.main([*argv, "--junit", str(junit), "--markdown", str(md)]) == 1

    out = capsys.readouterr().out
    assert re.search(r"correctness >= 0\.9\s+0\.850\s+>= 0\.9\s+FAIL", out)
    assert "Gate: FAILED (2 of 3 conditions failed)" in out

    root = _junit(junit)
    assert _suite(root, "agentops-eval items") is None  # only with --junit-items
    assert root.get("tests") == "3" and root.get("failures") == "2"
    suite = _suite(root, "agentops-eval gate")
    assert suite.get("tests") == "3" and suite.get("failures") == "2" and suite.get("errors") == "0"
    failures = {c.get("name"): c.find("failure") for c in suite.iter("testcase")}
    assert failures["tone > 0.5"] is None
    assert failures["correctness >= 0.9"].get("message") == "correctness: actual 0.850, required >= 0.9"
    assert failures["latency_p95 < 1000"].get("message") == "latency_p95: actual 1800, required < 1000"

    text = md.read_text()
    assert text.startswith(report.MARKDOWN_MARKER)
    assert "**Gate: FAILED** - 2 of 3 conditions failed" in text
    assert "| `correctness` | 0.850 | >= 0.9 | **FAIL** |" in text
    assert "| `tone` | 0.900 | > 0.5 | PASS |" in text


def test_relative_conditions_compare_with_the_baseline(api, tmp_path, capsys):
    md = tmp_path / "eval.md"
    argv = [
        *RUN,
        "--gate",
        "correctness>=0.8",
        "--gate-relative",
        "correctness>=-0.02",
        "--gate-relative",
        "tone>=-0.02",
        "--baseline-branch",
        "main",
        "--markdown",
        str(md),
    ]
    assert cli.main(argv) == 1
    gate = next(r for r in api.requests if r["path"].endswith("/gate/"))
    assert gate["body"]["baseline"] == {"branch": "main"}
    assert [c["relative"] for c in gate["body"]["conditions"]] == [False, True, True]

    out = capsys.readouterr().out
    assert 'Gate conditions (baseline #7 "nightly" on main):' in out
    assert re.search(r"correctness change vs baseline >= -0\.02\s+-0\.050\s+>= -0\.02\s+0\.900\s+FAIL", out)

    text = md.read_text()
    assert '#### Compared with baseline #7 "nightly" on main' in text
    assert "| `correctness` | 0.900 | 0.850 | -0.050 | >= -0.02 | **FAIL** (regression) |" in text
    assert "| `tone` | 0.880 | 0.900 | +0.020 | >= -0.02 | PASS |" in text


def test_baseline_experiment_is_sent(api):
    argv = [*RUN, "--gate-relative", "pass_rate>=0", "--baseline-experiment", "7"]
    assert cli.main(argv) == 0
    gate = next(r for r in api.requests if r["path"].endswith("/gate/"))
    assert gate["body"]["baseline"] == {"experiment": 7}


def test_missing_baseline_fails_by_default(api, capsys):
    api.listed, api.baseline_exists = [], False
    argv = [*RUN, "--gate-relative", "correctness>=-0.02", "--baseline-branch", "main"]
    assert cli.main(argv) == 2
    assert "a relative condition needs a baseline, and none was found" in capsys.readouterr().err
    assert not [r for r in api.requests if r["path"] == PREFIX + "experiments/" and r["method"] == "GET"]


def test_missing_baseline_can_skip_the_relative_conditions(api, tmp_path, capsys):
    api.listed, api.baseline_exists = [], False
    junit, md = tmp_path / "junit.xml", tmp_path / "eval.md"
    argv = [
        *RUN,
        "--gate",
        "correctness>=0.8",
        "--gate-relative",
        "correctness>=-0.02",
        "--baseline-branch",
        "main",
        "--if-no-baseline",
        "skip",
        "--junit",
        str(junit),
        "--markdown",
        str(md),
    ]
    assert cli.main(argv) == 0
    (listing,) = [r for r in api.requests if r["path"] == PREFIX + "experiments/" and r["method"] == "GET"]
    assert listing["query"] == {"branch": ["main"], "status": ["succeeded"], "page_size": ["50"], "dataset": ["3"]}
    gate = next(r for r in api.requests if r["path"].endswith("/gate/"))
    assert [c["relative"] for c in gate["body"]["conditions"]] == [False]
    captured = capsys.readouterr()
    assert "no succeeded experiment on branch main" in captured.err
    assert "Gate: PASSED (1 of 1 condition passed; 1 skipped: no succeeded experiment on branch main" in captured.out
    suite = _suite(_junit(junit), "agentops-eval gate")
    assert suite.get("tests") == "2" and suite.get("skipped") == "1" and suite.get("failures") == "0"
    assert "| `correctness` | n/a | n/a | n/a | >= -0.02 | SKIPPED |" in md.read_text()


def test_only_relative_conditions_and_no_baseline_skip_the_gate(api):
    api.listed, api.baseline_exists = [{"id": 1, "created_at": "2025-01-01T00:00:00Z"}], False  # itself only
    argv = [*RUN, "--gate-relative", "correctness>=-0.02", "--baseline-branch", "main", "--if-no-baseline", "skip"]
    assert cli.main(argv) == 0
    assert not [r for r in api.requests if r["path"].endswith("/gate/")]


def test_existing_baseline_keeps_the_relative_conditions(api):
    api.listed = [{"id": 9, "created_at": "2024-12-31T10:00:00+00:00"}]
    argv = [*RUN, "--gate-relative", "correctness>=-0.02", "--baseline-branch", "main", "--if-no-baseline", "skip"]
    assert cli.main(argv) == 1  # correctness fell by 0.05
    gate = next(r for r in api.requests if r["path"].endswith("/gate/"))
    assert [c["relative"] for c in gate["body"]["conditions"]] == [True]


def test_no_conditions_and_success_exits_0(api, tmp_path, capsys):
    junit = tmp_path / "junit.xml"
    assert cli.main([*RUN, "--junit", str(junit)]) == 0
    assert not [r for r in api.requests if r["path"].endswith("/gate/")]
    assert "Gate: PASSED (no conditions; the experiment succeeded)" in capsys.readouterr().out
    suite = _suite(_junit(junit), "agentops-eval gate")
    assert [c.get("name") for c in suite.iter("testcase")] == ["experiment #1 succeeded"]
    assert suite.get("failures") == "0"


def test_relative_condition_without_baseline_is_a_usage_error(api, capsys):
    assert cli.main([*RUN, "--gate-relative", "correctness>=-0.02"]) == 2
    assert "--gate-relative needs a baseline" in capsys.readouterr().err
    assert api.requests == []  # refused before anything started


def test_bad_condition_is_a_usage_error(api, capsys):
    assert cli.main([*RUN, "--gate", "correctness=0.8"]) == 2
    assert "unknown comparator '='" in capsys.readouterr().err
    assert api.requests == []


def test_400_on_start_exits_2_with_the_servers_message(api, tmp_path, capsys):
    api.always["start"] = (
        400,
        {"error": {"code": "invalid", "message": "evaluators: unknown evaluator 'nope'", "details": None}},
    )
    md = tmp_path / "eval.md"
    assert cli.main([*RUN, "--markdown", str(md)]) == 2
    err = capsys.readouterr().err
    assert "HTTP 400 invalid: evaluators: unknown evaluator 'nope'" in err
    assert len(api.starts()) == 1  # a 4xx is not retried
    assert "**Gate: ERROR** - the API refused: HTTP 400 invalid" in md.read_text()


def test_400_from_the_gate_exits_2(api, capsys):
    assert cli.main([*RUN, "--gate", "nonsense>=1"]) == 2
    assert "unknown metric 'nonsense'" in capsys.readouterr().err


def test_402_budget_exceeded_exits_2(api, capsys):
    api.always["start"] = (
        402,
        {"error": {"code": "budget_exceeded", "message": "the monthly budget of acme is spent", "details": None}},
    )
    assert cli.main(RUN) == 2
    err = capsys.readouterr().err
    assert "HTTP 402 budget_exceeded: the monthly budget of acme is spent" in err


def test_unknown_dataset_404_exits_2(api, capsys):
    api.always["start"] = (404, {"error": {"code": "not_found", "message": "no dataset 'qa'", "details": None}})
    assert cli.main(RUN) == 2
    assert "no dataset 'qa'" in capsys.readouterr().err


def test_failed_experiment_exits_3(api, tmp_path, capsys):
    api.script = [("running", 3, 0), ("failed", 3, 3)]
    api.final_error = "the agent could not start: missing API key for mistral"
    junit, md = tmp_path / "junit.xml", tmp_path / "eval.md"
    argv = [*RUN, "--gate", "correctness>=0.8", "--junit", str(junit), "--markdown", str(md)]
    assert cli.main(argv) == 3
    captured = capsys.readouterr()
    assert "experiment #1 failed: the agent could not start" in captured.err
    assert "Gate: ERROR - experiment #1 failed" in captured.out
    assert not [r for r in api.requests if r["path"].endswith("/gate/")]

    suite = _suite(_junit(junit), "agentops-eval gate")
    assert suite.get("errors") == "1" and suite.get("tests") == "1"
    (case,) = suite.iter("testcase")
    assert case.get("name") == "experiment #1"
    assert "missing API key for mistral" in case.find("error").get("message")
    text = md.read_text()
    assert "**Gate: ERROR** - experiment #1 failed: the agent could not start" in text
    assert "status `failed`" in text


def test_cancelled_experiment_exits_3(api):
    api.script = [("running", 3, 0), ("cancelled", 3, 0)]
    assert cli.main([*RUN, "--gate", "correctness>=0.8"]) == 3


def test_timeout_exits_3_and_leaves_the_experiment_running(api, capsys):
    api.script = [("queued", 0, 0), ("running", 5, 0)]
    assert cli.main([*RUN, "--timeout", "0.3", "--poll", "0.02"]) == 3
    err = capsys.readouterr().err
    assert "timed out after 0.3 s waiting for experiment #1 (running, 5/20 items); it keeps running" in err
    assert not [r for r in api.requests if r["path"].endswith("/cancel/")]


def test_timeout_can_cancel_the_experiment(api, capsys):
    api.script = [("queued", 0, 0), ("running", 5, 0)]
    assert cli.main([*RUN, "--timeout", "0.2", "--poll", "0.02", "--cancel-on-timeout"]) == 3
    assert [r for r in api.requests if r["path"].endswith("/cancel/")]
    assert "; cancelled it" in capsys.readouterr().err


def test_persistent_500_exits_4_after_retries_with_one_idempotency_key(api, tmp_path, capsys):
    api.always["start"] = (500, {"error": {"code": "server_error", "message": "boom", "details": None}})
    md = tmp_path / "eval.md"
    assert cli.main([*RUN, "--markdown", str(md)]) == 4
    starts = api.starts()
    assert len(starts) == client_module.DEFAULT_RETRIES + 1
    assert len({s["headers"]["Idempotency-Key"] for s in starts}) == 1
    err = capsys.readouterr().err
    assert "retrying" in err and "gave up after 6 attempts" in err and "boom" in err
    assert "**Gate: ERROR**" in md.read_text()


def test_lost_answer_is_retried_with_the_same_key_and_starts_one_experiment(api, capsys):
    # A 503 (nothing done; the server keeps no record), then a start whose answer is lost.
    api.start_actions = [(503, {"error": {"code": "unavailable", "message": "retry later", "details": None}}), "drop"]
    assert cli.main([*RUN, "--gate", "correctness>=0.8"]) == 0
    starts = api.starts()
    assert len(starts) == 3
    assert len({s["headers"]["Idempotency-Key"] for s in starts}) == 1
    assert list(api.experiments) == [1]  # the retries got the first answer back
    assert "Started experiment #1" in capsys.readouterr().out


def test_each_invocation_uses_a_new_idempotency_key(api):
    assert cli.main(RUN) == 0
    assert cli.main(RUN) == 0
    keys = [s["headers"]["Idempotency-Key"] for s in api.starts()]
    assert len(set(keys)) == 2 and list(api.experiments) == [1, 2]


def test_unreachable_server_exits_4(api, monkeypatch, capsys):
    monkeypatch.setattr(client_module, "DEFAULT_RETRIES", 1)
    monkeypatch.setenv("AGENTOPS_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    assert cli.main(RUN) == 4
    assert "ConnectionError" in capsys.readouterr().err


def test_missing_configuration_exits_2(api, monkeypatch, capsys):
    monkeypatch.delenv("AGENTOPS_API_KEY")
    assert cli.main(RUN) == 2
    assert "no API key: set AGENTOPS_API_KEY" in capsys.readouterr().err
    monkeypatch.setenv("AGENTOPS_API_KEY", "ao_test")
    monkeypatch.setenv("AGENTOPS_PROJECT", "acme")
    assert cli.main(RUN) == 2
    assert "ORG/PROJECT" in capsys.readouterr().err
    assert api.requests == []


def test_wrong_key_exits_2(api, capsys):
    assert cli.main(["--api-key", "ao_wrong", *RUN]) == 2
    assert "HTTP 401 not_authenticated: invalid API key" in capsys.readouterr().err


def test_a_netrc_entry_does_not_replace_the_key(api, monkeypatch, tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert cli.main(RUN) == 0
    assert {r["headers"]["Authorization"] for r in api.requests} == {"Bearer ao_test"}


def test_connection_options_after_the_command(api, monkeypatch):
    monkeypatch.delenv("AGENTOPS_URL")
    monkeypatch.delenv("AGENTOPS_PROJECT")
    argv = [*RUN, "--url", api.url + "/api/v1/", "--project", "acme/agent"]
    assert cli.main(argv) == 0


def test_usage_errors_exit_2(capsys):
    assert cli.main([]) == 2
    assert cli.main(["run", "--agent", "a", "--evaluator", "e"]) == 2  # no --dataset
    assert cli.main(["run", "--agent", "a", "--dataset", "d"]) == 2  # no --evaluator
    assert cli.main(["run", "--dataset", "d", "--agent", "a", "--evaluator", "e", "--concurrency", "50"]) == 2
    assert cli.main(["gate"]) == 2
    assert cli.main(["--help"]) == 0
    assert "exit codes:" in capsys.readouterr().out


# -- the other commands ---------------------------------------------------------------------------


def test_gate_command_waits_for_the_experiment_then_gates(api, tmp_path, capsys):
    api.experiments[1] = {"step": 0, "status": "queued", "done": 0, "cancelled": False}
    junit = tmp_path / "junit.xml"
    argv = ["gate", "--experiment", "1", "--gate", "correctness>=0.9", "--poll", "0.01", "--junit", str(junit)]
    assert cli.main(argv) == 1
    assert api.starts() == []
    out = capsys.readouterr().out
    assert "Waiting for experiment #1" in out and "Gate: FAILED" in out
    assert _suite(_junit(junit), "agentops-eval gate").get("failures") == "1"
    assert cli.main(["gate", "--experiment", "1", "--gate", "correctness>=0.8"]) == 0


def test_gate_command_unknown_experiment_exits_2(api, capsys):
    assert cli.main(["gate", "--experiment", "99", "--gate", "correctness>=0.8"]) == 2
    assert "no such experiment" in capsys.readouterr().err


def test_gate_retries_a_409_while_the_server_finishes(api):
    api.experiments[1] = {"step": 3, "status": "running", "done": 20, "cancelled": False}
    api.gate_conflicts = 2  # the GET already says succeeded, the gate still answers 409 twice
    assert cli.main(["gate", "--experiment", "1", "--gate", "correctness>=0.8"]) == 0
    assert len([r for r in api.requests if r["path"].endswith("/gate/")]) == 3


def test_status_command(api, capsys):
    api.experiments[1] = {"step": 0, "status": "queued", "done": 0, "cancelled": False}
    assert cli.main(["status", "--experiment", "1"]) == 0
    assert "Experiment #1 running: 5/20 items (25%), 0 errors" in capsys.readouterr().out
    api.experiments[1]["step"] = 2
    assert cli.main(["status", "--experiment", "1"]) == 0
    out = capsys.readouterr().out
    assert 'Experiment #1 "exp 1" succeeded: 20/20 items, 1 error, cost 0.04\n' in out
    assert "Gate:" not in out
    api.script = [("failed", 3, 3)]
    api.experiments[1]["step"] = 0
    assert cli.main(["status", "--experiment", "1"]) == 3


# -- CI environment -------------------------------------------------------------------------------


def test_branch_and_commit_come_from_github_actions(api, monkeypatch, tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 42, "head": {"sha": "headsha123"}}}))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_HEAD_REF", "feature/login")
    monkeypatch.setenv("GITHUB_REF_NAME", "42/merge")
    monkeypatch.setenv("GITHUB_SHA", "mergesha")
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/agent")
    monkeypatch.setenv("GITHUB_RUN_ID", "1001")
    assert cli.main(RUN) == 0
    body = api.starts()[0]["body"]
    assert body["branch"] == "feature/login" and body["commit"] == "headsha123"
    assert body["metadata"]["ci"] == "github"
    assert body["metadata"]["ci_url"] == "https://github.com/acme/agent/actions/runs/1001"
    assert body["metadata"]["pull_request"] == 42


def test_branch_and_commit_come_from_github_push(monkeypatch):
    env = {"GITHUB_HEAD_REF": "", "GITHUB_REF_NAME": "main", "GITHUB_SHA": "abc"}
    assert cli.ci_branch(env) == "main" and cli.ci_commit(env) == "abc"


def test_branch_and_commit_come_from_gitlab(api, monkeypatch):
    monkeypatch.setenv("GITLAB_CI", "true")
    monkeypatch.setenv("CI_COMMIT_REF_NAME", "feature/gl")
    monkeypatch.setenv("CI_COMMIT_SHA", "glsha")
    monkeypatch.setenv("CI_JOB_URL", "https://gitlab.example.com/acme/agent/-/jobs/5")
    assert cli.main([*RUN, "--commit", "override"]) == 0
    body = api.starts()[0]["body"]
    assert body["branch"] == "feature/gl" and body["commit"] == "override"
    assert body["metadata"]["ci_url"] == "https://gitlab.example.com/acme/agent/-/jobs/5"


def test_no_ci_environment_sends_no_branch(api):
    assert cli.main(RUN) == 0
    body = api.starts()[0]["body"]
    assert "branch" not in body and "commit" not in body


# -- units ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("correctness>=0.8", ("correctness", ">=", 0.8)),
        ("correctness.pass_rate >= 0.9", ("correctness.pass_rate", ">=", 0.9)),
        (" latency_p95 < 2000 ", ("latency_p95", "<", 2000.0)),
        ("cost_per_item<=0.01", ("cost_per_item", "<=", 0.01)),
        ("error_rate==0", ("error_rate", "==", 0.0)),
        ("tone>0.5", ("tone", ">", 0.5)),
        ("correctness>=-0.02", ("correctness", ">=", -0.02)),
        ("exact match>=1e-1", ("exact match", ">=", 0.1)),
    ],
)
def test_parse_condition(text, expected):
    condition = cli.parse_condition(text)
    assert (condition["metric"], condition["comparator"], condition["threshold"]) == expected
    assert condition["relative"] is False
    assert cli.parse_condition(text, relative=True)["relative"] is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("correctness", "is not a condition"),
        ("correctness=0.8", "unknown comparator '='"),
        ("correctness!=0.8", "unknown comparator '!='"),
        (">=0.8", "is not a condition"),
        ("correctness>=", "is not a condition"),
        ("correctness>=high", "is not a number"),
        ("correctness=>0.8", "unknown comparator '=>'"),
        ("0.5<correctness<1", "one comparator only"),
        ("a<b<1", "one comparator only"),
        ("correctness>=nan", "finite"),
    ],
)
def test_parse_condition_refuses(text, message):
    with pytest.raises(ValueError, match=message):
        cli.parse_condition(text)


def test_parse_param():
    assert cli.parse_param("temperature=0.2") == ("temperature", 0.2)
    assert cli.parse_param("stream=true") == ("stream", True)
    assert cli.parse_param("tags=[1, 2]") == ("tags", [1, 2])
    assert cli.parse_param("prompt=be brief") == ("prompt", "be brief")
    assert cli.parse_param("x=NaN") == ("x", "NaN")
    assert cli.parse_param("empty=") == ("empty", "")


def test_progress_rewrites_one_line_on_a_terminal():
    stream = io.StringIO()
    progress = cli.Progress(stream, tty=True)
    experiment = {"id": 3, "status": "running", "item_count": 20, "completed_count": 5, "error_count": 0}
    progress.update(experiment, 12)
    progress.update(dict(experiment, completed_count=6), 14)
    progress.finish()
    text = stream.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "Experiment #3 running: 6/20 items (30%), 0 errors, 0:14 elapsed" in text


def test_progress_in_logs_prints_at_most_every_interval():
    stream = io.StringIO()
    progress = cli.Progress(stream, tty=False, interval=1000)
    experiment = {"id": 3, "status": "running", "item_count": 20, "completed_count": 5, "error_count": 0}
    for done in range(5, 15):
        progress.update(dict(experiment, completed_count=done), done)
    progress.update(dict(experiment, status="succeeded", completed_count=20), 30)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2  # the first line and the change of status
    assert lines[1].startswith("Experiment #3 succeeded: 20/20 items")


def test_junit_escapes_what_xml_cannot_hold():
    outcome = report.Outcome(
        status=report.ERROR,
        exit_code=3,
        message="bad \x1b[31m output & <tags>",
        experiment={"id": 1, "status": "failed", "url": "http://x/1"},
    )
    root = ET.fromstring(report.junit_xml(outcome))
    error = root.find("testsuite/testcase/error")
    assert error.get("message") == "bad ?[31m output & <tags>"


def test_format_numbers():
    assert report.fmt_num(0.8512) == "0.851"
    assert report.fmt_num(1800.0) == "1800"
    assert report.fmt_num(1234.56) == "1234.6"
    assert report.fmt_num(47.9) == "47.9"
    assert report.fmt_num(1.0) == "1.000"
    assert report.fmt_signed(0.0) == "0.000"
    assert report.fmt_money("0.004200000") == "0.0042"
    assert report.fmt_money("0E-9") == "0"
    assert report.fmt_money("12.500000000") == "12.5"
    assert report.fmt_num(0.000123) == "0.000123"
    assert report.fmt_num(None) == "n/a"
    assert report.fmt_signed(0.02) == "+0.020"
    assert report.fmt_pct(0.8) == "80.0%"


def test_a_metrics_count_below_ten_is_a_whole_number():
    metric = {"mean": 1.0, "ci_low": 1.0, "ci_high": 1.0, "n": 8, "pass_rate": 1.0}
    experiment = {"summary": {"metrics": {"correct": metric}}}
    assert report.metric_rows(experiment) == [["correct", "1.000", "[1.000, 1.000]", "100.0%", "8"]]
    assert report.fmt_count(40) == "40"
    assert report.fmt_count(None) == "n/a"


def test_api_base():
    assert (
        client_module.api_base("https://h.example.com/", "acme/agent")
        == "https://h.example.com/api/v1/projects/acme/agent/"
    )
    assert client_module.api_base("https://h/x/api/v1", "a/b") == "https://h/x/api/v1/projects/a/b/"
    for url, project in (("", "a/b"), ("ftp://h", "a/b"), ("https://h", "a"), ("https://h", "a/b/c")):
        with pytest.raises(client_module.ConfigError):
            client_module.api_base(url, project)


# -- packaging ------------------------------------------------------------------------------------


def test_pyproject_names_the_console_script_and_only_requests():
    data = tomllib.loads((CLI_DIR / "pyproject.toml").read_text())
    project = data["project"]
    assert project["name"] == "agentops-eval"
    assert project["requires-python"] == ">=3.11"
    assert len(project["dependencies"]) == 1 and project["dependencies"][0].startswith("requests>=2.31")
    assert project["scripts"] == {"agentops-eval": "agentops_eval.__main__:main", "agentops": "agentops_eval.app:main"}
    assert data["build-system"]["build-backend"] == "setuptools.build_meta"


def test_the_package_imports_no_django():
    imported = set()
    for path in (CLI_DIR / "agentops_eval").glob("*.py"):
        for line in path.read_text().splitlines():
            match = re.match(r"\s*(?:from|import)\s+([\w.]+)", line)
            if match:
                imported.add(match[1].split(".")[0])
    assert imported <= {"__future__", "agentops_eval", "requests"} | set(sys.stdlib_module_names)
