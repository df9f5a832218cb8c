"""Live pages in a real browser against the real ASGI application (HTTP and WebSocket
through uvicorn, Channels over the real Redis layer)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from agentops.scoping import organization_scope
from agentops.services.organizations import project_update
from tests.agentops.factories import PASSWORD
from tests.browser.conftest import chromium_page, wait_until

pytestmark = pytest.mark.browser


@pytest.fixture
def asgi_server(transactional_db):
    """The ASGI application served by uvicorn on a free loopback port, in a thread."""
    import uvicorn

    from agentops.asgi import application

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(application, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def _rename_in_another_thread(project, name: str) -> None:
    # Playwright's sync API runs an event loop in the test's thread, where Django
    # refuses ORM calls; a teammate's change comes from elsewhere anyway.
    def rename():
        from django.db import connection

        with organization_scope(project.organization):
            project_update(project=project, actor=None, name=name)
        connection.close()

    worker = threading.Thread(target=rename)
    worker.start()
    worker.join(timeout=30)


def test_project_page_connects_live_and_shows_a_rename_without_reload(asgi_server, tenant, artifacts_dir):
    project = tenant.project
    with chromium_page() as page:
        page.goto(f"{asgi_server}/accounts/login/")
        page.fill("input[name=login]", tenant.member.email)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]:has-text('Sign In')")
        page.goto(f"{asgi_server}/o/acme/p/{project.slug}/")
        badge = page.locator("#live-status")
        badge.wait_for()
        wait_until(page, "document.getElementById('live-status').dataset.state === 'open'")
        assert badge.inner_text() == "Live"
        page.evaluate("window.__not_reloaded = true")

        _rename_in_another_thread(project, "Support agent v2")

        wait_until(page, "document.getElementById('project-name').textContent.trim() === 'Support agent v2'")
        assert page.evaluate("window.__not_reloaded") is True
        page.screenshot(path=str(artifacts_dir / "live-rename.png"))
