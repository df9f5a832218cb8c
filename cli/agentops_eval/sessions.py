"""The interactive sessions API of AgentOps Studio (docs/sessions.md), over ``Client``:
``agent-sessions/`` and its operations, plus the URL of a session's event stream.

What creates something (a session, a message) sends an ``Idempotency-Key``, kept across
the client's retries. A 429 (too many queued messages) is not waited out: the person
at the keyboard hears it at once. 4xx answers raise ``ApiError`` with the server's message.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote, urljoin

import requests

from agentops_eval.client import ApiError, Client, ClientError
from agentops_eval.sse import Parser

#: (connect, read): a running turn's stream starts with its events at once.
FIRST_EVENT_TIMEOUT = (10.0, 10.0)


def _id(value) -> str:
    return quote(str(value), safe="")


class SessionsApi:
    def __init__(self, client: Client):
        self.client = client

    def _call(self, method: str, path: str, **kwargs):
        return self.client.request(method, path, retry_throttled=False, **kwargs)

    def agent_by_name(self, name: str) -> dict:
        """The project's agent called ``name`` (an ApiError 404 when there is none)."""
        agents = self._call("GET", "agents/")
        agents = agents.get("results", []) if isinstance(agents, dict) else agents
        for agent in agents:
            if agent.get("name") == name:
                return agent
        known = ", ".join(sorted(str(a.get("name")) for a in agents)) or "none"
        raise ApiError(404, "not_found", f"this project has no agent named {name!r} (its agents: {known})")

    def create(self, agent_id: int, *, version: int | None = None, title: str = "") -> dict:
        body: dict = {"agent": agent_id, "title": title}
        if version is not None:
            body["version"] = version
        return self._call("POST", "agent-sessions/", json=body, headers={"Idempotency-Key": str(uuid.uuid4())})

    def get(self, session_id: int) -> dict:
        return self._call("GET", f"agent-sessions/{_id(session_id)}/")

    def list(self, *, page_size: int = 20) -> list[dict]:
        page = self._call("GET", "agent-sessions/", params={"page_size": page_size})
        return page.get("results", []) if isinstance(page, dict) else page

    def send(self, session_id: int, content: str) -> dict:
        return self._call(
            "POST",
            f"agent-sessions/{_id(session_id)}/messages/",
            json={"content": content},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )

    def decide(
        self,
        session_id: int,
        approval_id: int,
        *,
        approve: bool,
        arguments: dict | None = None,
        reason: str = "",
    ) -> dict:
        body: dict = {"approval": approval_id, "decision": "approve" if approve else "reject", "reason": reason}
        if arguments is not None:
            body["arguments"] = arguments
        return self._call("POST", f"agent-sessions/{_id(session_id)}/approvals/", json=body)

    def approve_all(self, session_id: int, tools: list[str]) -> dict:
        if not tools:
            return self._call("DELETE", f"agent-sessions/{_id(session_id)}/approve-all/")
        return self._call("PUT", f"agent-sessions/{_id(session_id)}/approve-all/", json={"tools": tools})

    def interrupt(self, session_id: int) -> dict:
        return self._call("POST", f"agent-sessions/{_id(session_id)}/interrupt/", json={})

    def undo(self, session_id: int) -> dict:
        return self._call("POST", f"agent-sessions/{_id(session_id)}/undo/", json={})

    def compact(self, session_id: int) -> dict:
        return self._call("POST", f"agent-sessions/{_id(session_id)}/compact/", json={})

    def close(self, session_id: int) -> dict:
        return self._call("POST", f"agent-sessions/{_id(session_id)}/close/", json={})

    def first_event_id(self, run_id: int) -> int | None:
        """The id of a turn's first event in its session's stream (the run's own stream
        has the same ids), or None when it has none yet or it cannot be read."""
        try:
            response = self.client.open_stream(
                f"runs/{_id(run_id)}/events/", content_type="text/event-stream", timeout=FIRST_EVENT_TIMEOUT, retries=0
            )
        except (ClientError, requests.RequestException):
            return None
        try:
            parser = Parser()
            for chunk in response.iter_content(chunk_size=None):
                for event in parser.feed(chunk):
                    if event.number is not None:
                        return event.number
            return None
        except requests.RequestException:
            return None
        finally:
            response.close()

    def events_url(self, session_id: int) -> str:
        return urljoin(self.client.base, f"agent-sessions/{_id(session_id)}/events/")
