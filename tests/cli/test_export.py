"""End to end: ``agentops export`` (cli/agentops_eval/export.py), as its own process,
against a running server whose session turns a real Celery worker executed: a session's
trajectory to a file, a run's to stdout, and the exit codes of what goes wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentops.scoping import organization_scope
from runs.models import Run
from runs.services.agents import agent_create
from runs.services.sessions import session_create, session_send

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
# How long the worker may take over the two turns of the offline model (a bound, not a measure).
TURNS_DEADLINE_SECONDS = 120

pytestmark = pytest.mark.django_db(transaction=True)


def _agentops(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentops_eval.app", *args], env=env, capture_output=True, timeout=300)


@pytest.fixture
def session(tenant, celery_worker):
    """A session of two turns, both executed by the worker."""
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project, actor=tenant.member, name="calc", model="offline", tools=["calculator"]
        )
        session = session_create(project=tenant.project, agent=agent, actor=tenant.member, title="Sums")
        session_send(session=session, actor=tenant.member, content="6 * 7")
        session_send(session=session, actor=tenant.member, content="and 1 + 1")
    deadline = time.monotonic() + TURNS_DEADLINE_SECONDS
    while True:
        with organization_scope(tenant.organization):
            ended = Run.objects.filter(agent_session=session, status__in=Run.ENDED).count()
        if ended == 2:
            return session
        assert time.monotonic() < deadline, "the worker did not end both turns"
        time.sleep(0.2)


@pytest.fixture
def env(live_server, tenant, make_api_key):
    _, raw_key = make_api_key(tenant.project, scopes=("read",))
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_", "AGENTOPS_"))},
        "PYTHONPATH": str(CLI_DIR),
        "AGENTOPS_URL": live_server.url,
        "AGENTOPS_PROJECT": f"{tenant.organization.slug}/{tenant.project.slug}",
        "AGENTOPS_API_KEY": raw_key,
    }


def test_export_writes_a_session_s_trajectory_to_a_file_and_a_run_s_to_stdout(tenant, session, env, tmp_path):
    target = tmp_path / "session.jsonl"
    done = _agentops(["export", "--session", str(session.pk), "-o", str(target)], env)
    assert done.returncode == 0, done.stderr.decode()
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [(line["format"], line["turn"], line["input"]) for line in lines] == [
        ("agentops.trajectory/1", 1, "6 * 7"),
        ("agentops.trajectory/1", 2, "and 1 + 1"),
    ]
    assert lines[1]["session"] == {"kind": "agent_session", "id": session.pk, "title": "Sums"}
    assert [call["name"] for call in lines[0]["tool_calls"]] == ["calculator"]
    assert lines[1]["messages"][: len(lines[0]["messages"])] == lines[0]["messages"], "turn 2 goes on from turn 1"
    assert b"2 lines written" in done.stderr and done.stdout == b""
    assert not (tmp_path / "session.jsonl.part").exists()

    run_id = lines[0]["run"]["id"]
    printed = _agentops(["export", "--run", str(run_id)], env)
    assert printed.returncode == 0, printed.stderr.decode()
    (line,) = printed.stdout.decode().splitlines()
    assert json.loads(line)["run"]["id"] == run_id and json.loads(line)["messages"][0]["content"] == "6 * 7"


def test_an_unknown_or_foreign_session_exits_1_and_leaves_no_file(tenant, other_tenant, session, env, tmp_path):
    target = tmp_path / "none.jsonl"
    missing = _agentops(["export", "--session", "999999", "-o", str(target)], env)
    assert missing.returncode == 1
    assert b"404" in missing.stderr and b"session not found" in missing.stderr
    assert not target.exists() and not (tmp_path / "none.jsonl.part").exists()
    # The key is acme's: the other organization's project is not reachable with it.
    elsewhere = {**env, "AGENTOPS_PROJECT": f"{other_tenant.organization.slug}/{other_tenant.project.slug}"}
    refused = _agentops(["export", "--session", str(session.pk)], elsewhere)
    assert refused.returncode == 1 and b"404" in refused.stderr and refused.stdout == b""


def test_a_refused_key_or_bad_usage_exits_2(session, env):
    wrong_key = _agentops(["export", "--session", str(session.pk)], {**env, "AGENTOPS_API_KEY": "ao_not_a_key"})
    assert wrong_key.returncode == 2 and b"401" in wrong_key.stderr and wrong_key.stdout == b""
    neither = _agentops(["export"], env)
    assert neither.returncode == 2 and b"--session" in neither.stderr
    both = _agentops(["export", "--session", "1", "--run", "2"], env)
    assert both.returncode == 2


class _CutShort(BaseHTTPRequestHandler):
    """A server that starts a trajectory and drops the connection midway."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(b'{"format": "agentops.trajectory/1", "turn": 1}\n{"format": "agen')
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.mark.django_db(transaction=False)
def test_a_download_cut_short_exits_4_and_leaves_no_file(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CutShort)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_", "AGENTOPS_"))},
            "PYTHONPATH": str(CLI_DIR),
            "AGENTOPS_URL": f"http://127.0.0.1:{server.server_port}",
            "AGENTOPS_PROJECT": "acme/agent",
            "AGENTOPS_API_KEY": "ao_test",
        }
        target = tmp_path / "cut.jsonl"
        done = _agentops(["export", "--session", "7", "-o", str(target)], env)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 4, done.stderr.decode()
    assert not target.exists() and not (tmp_path / "cut.jsonl.part").exists(), "no file that looks whole"
