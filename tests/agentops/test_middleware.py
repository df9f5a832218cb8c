"""The Content-Security-Policy every response carries, what the platform's own pages need
of it (no inline script, no inline event handler), and the API docs served by the
platform itself. The browser side is tests/browser/test_content_security_policy.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

PAGES = ["/accounts/login/", "/", "/o/acme/", "/o/acme/billing/", "/o/acme/p/agent/runs/", "/api/docs/", "/nowhere/"]


def directives(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    parsed = {}
    for part in header.split(";"):
        name, *values = part.split()
        parsed[name] = values
    return parsed


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGES)
def test_every_page_sends_a_policy_that_runs_only_the_platforms_own_scripts(path, tenant, client):
    client.force_login(tenant.owner)
    response = client.get(path)
    policy = directives(response)
    assert policy["script-src"] == ["'self'"], "no inline script, no eval, no other origin"
    assert policy["default-src"] == ["'self'"] and policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"] and policy["base-uri"] == ["'self'"]
    assert policy["connect-src"] == ["'self'", "ws://testserver"]


@pytest.mark.django_db
def test_live_updates_over_https_are_allowed_to_the_pages_own_wss_origin(tenant, settings):
    settings.ALLOWED_HOSTS = ["studio.example.com"]
    client = Client()
    client.force_login(tenant.owner)
    response = client.get("/o/acme/", secure=True, HTTP_HOST="studio.example.com")
    assert directives(response)["connect-src"] == ["'self'", "wss://studio.example.com"]


@pytest.mark.django_db
def test_a_refused_host_still_gets_the_policy_not_an_error():
    response = Client().get("/accounts/login/", HTTP_HOST="evil.example;script-src *")
    assert response.status_code == 400
    assert directives(response)["connect-src"] == ["'self'"]


def _templates() -> list[Path]:
    folders = [Path(folder) for engine in settings.TEMPLATES for folder in engine["DIRS"]]
    return [path for folder in folders for path in sorted(folder.rglob("*.html"))]


def test_no_template_has_inline_script_or_inline_event_handlers():
    """The policy refuses both; a page that used them would silently lose the behaviour."""
    templates = _templates()
    assert len(templates) > 50
    inline_script = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
    handler = re.compile(r"<[^>]*\son[a-z]+\s*=", re.I)
    found = []
    for path in templates:
        text = path.read_text()
        found += [f"{path.name}: {match.group(0)[:60]}" for match in inline_script.finditer(text)]
        found += [f"{path.name}: {match.group(0)[-60:]}" for match in handler.finditer(text)]
    assert found == []


@pytest.mark.django_db
def test_the_api_docs_load_swagger_ui_from_the_platform_not_a_cdn(client):
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    sources = re.findall(r'<(?:script|link)[^>]*(?:src|href)="([^"]+)"', html)
    assert any("swagger-ui-bundle.js" in source for source in sources)
    assert all(source.startswith("/") for source in sources), sources
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "the start-up script is a file, not inline"
    for source in sources:
        assert client.get(source).status_code == 200, source
    script = next(source for source in sources if "script=" in source)
    start = client.get(script)
    assert start["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in start.content.decode() and "/api/schema/" in start.content.decode()
