"""How every MCP handler runs for its caller: the answer's size is capped with a message
that says how to ask for less, and an unexpected failure shows no internals."""

from __future__ import annotations

import asyncio

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from assistant.caller import MAX_RESULT_CHARS, current_key, run_for_caller


def _run(key, permission, body):
    async def go():
        token = current_key.set(key)
        try:
            return await run_for_caller(permission, "read runs", body)
        finally:
            current_key.reset(token)

    return asyncio.run(go())


def test_an_oversized_answer_is_refused_with_how_to_page(transactional_db, tenant, make_api_key):
    key, _raw = make_api_key(tenant.project, scopes=("read",))

    def huge(access):
        return {"items": ["x" * 1000] * (MAX_RESULT_CHARS // 1000 + 1)}

    with pytest.raises(ToolError) as caught:
        _run(key, "work:read", huge)
    assert str(caught.value).startswith("too_large: the answer is ")
    assert "page with the cursor" in str(caught.value)
    assert _run(key, "work:read", lambda access: {"project": access.project.slug}) == {"project": "agent"}


def test_an_unexpected_failure_is_logged_and_shows_no_internals(transactional_db, tenant, make_api_key, caplog):
    key, _raw = make_api_key(tenant.project, scopes=("read",))

    def broken(access):
        raise RuntimeError("secret internals: password=hunter2")

    with pytest.raises(ToolError) as caught:
        _run(key, "work:read", broken)
    assert str(caught.value) == "internal_error: the server could not answer this; the failure has been logged"
    assert "hunter2" in caplog.text  # the log has it, the caller does not


def test_a_permission_the_key_lacks_is_refused_before_the_body_runs(transactional_db, tenant, make_api_key):
    key, _raw = make_api_key(tenant.project, scopes=("ingest",))
    ran = []
    with pytest.raises(ToolError) as caught:
        _run(key, "work:read", lambda access: ran.append(1))
    assert str(caught.value) == "permission_denied: this API key's scopes (ingest) do not allow it to read runs"
    assert ran == []
