"""A new user's first minutes, in a real browser against a live server: sign in
through the login form, create an organization, a project and an API key."""

from __future__ import annotations

import hashlib

import pytest

from agentops.models import ApiKey, Membership, Organization
from agentops.scoping import dangerously_unscoped
from tests.agentops.factories import PASSWORD, UserFactory
from tests.browser.conftest import chromium_page

pytestmark = pytest.mark.browser


def test_new_user_signs_in_and_creates_organization_project_and_api_key(live_server, transactional_db, artifacts_dir):
    user = UserFactory(email="pat@example.com")

    with chromium_page() as page:
        page.goto(f"{live_server.url}/")
        assert page.url.startswith(f"{live_server.url}/accounts/login/")
        page.screenshot(path=artifacts_dir / "login.png", full_page=True)
        page.fill("input[name=login]", "pat@example.com")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]:has-text('Sign In')")

        page.wait_for_url(f"{live_server.url}/")
        assert page.get_by_role("heading", name="Create your first organization").is_visible()
        page.fill("input[name=name]", "Browser Co")
        page.click("button:has-text('Create organization')")

        page.wait_for_url(f"{live_server.url}/o/browser-co/")
        page.fill("#new-project input[name=name]", "Web agent")
        page.click("button:has-text('Create project')")

        page.wait_for_url(f"{live_server.url}/o/browser-co/p/web-agent/")
        page.screenshot(path=artifacts_dir / "project.png", full_page=True)
        page.click("nav.sidebar >> text=API keys")
        page.wait_for_url(f"{live_server.url}/o/browser-co/p/web-agent/api-keys/")
        page.fill("#new-key input[name=name]", "laptop")
        page.check("#new-key input[value=read]")
        page.click("button:has-text('Create key')")

        raw_key = page.locator("#new-api-key").inner_text().strip()
        page.screenshot(path=artifacts_dir / "api-key-created.png", full_page=True)
        page.click("text=Done: back to API keys")
        listing = page.content()
        page.screenshot(path=artifacts_dir / "api-keys.png", full_page=True)

    assert raw_key.startswith("ao_")
    assert raw_key not in listing
    with dangerously_unscoped("the test checks what the browser created"):
        organization = Organization.objects.get(slug="browser-co")
        assert Membership.objects.get(organization=organization, user=user).role == "owner"
        key = ApiKey.objects.get(project__slug="web-agent", organization=organization)
    assert key.key_hash == hashlib.sha256(raw_key.encode()).hexdigest()
    assert sorted(key.scopes) == ["ingest", "read"]
    assert key.prefix in listing
