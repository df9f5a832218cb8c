"""Static files: a file that does not exist is a 404, both when files are found by the
finders (``make run``, DEBUG on, and the test settings) and when they are served from
``collectstatic``'s output the way production serves them."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client, override_settings

from agentops.staticfinders import PackageFileFinder

MISSING = ["/static/no-such-file.js", "/static/vendor/plotly/no-such-file.js", "/static/vendor/nothing/x.css"]


def test_the_package_finder_answers_nothing_found_as_django_finders_do():
    finder = PackageFileFinder()
    assert finder.find("no-such-file.js") == []
    assert finder.find("no-such-file.js", find_all=True) == []
    assert finders.find("no-such-file.js") is None
    assert finders.find("vendor/plotly/plotly.min.js").endswith("plotly.min.js")


@pytest.mark.django_db
@pytest.mark.parametrize("path", MISSING)
def test_a_missing_static_file_is_404_when_found_by_the_finders(path):
    # The test settings serve static files through the finders, as DEBUG does.
    response = Client(raise_request_exception=False).get(path)
    assert response.status_code == 404


@pytest.mark.django_db
def test_collected_files_as_in_production_missing_is_404_and_the_api_docs_load(tmp_path):
    production = {
        "STATIC_ROOT": tmp_path,
        "STORAGES": {
            "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
        },
        "WHITENOISE_USE_FINDERS": False,
        "WHITENOISE_AUTOREFRESH": False,
    }
    with override_settings(**production):
        call_command("collectstatic", interactive=False, verbosity=0)
        client = Client(raise_request_exception=False)  # a new client: WhiteNoise reads STATIC_ROOT anew
        assert client.get("/static/agentops/app.css").status_code == 200
        for path in MISSING:
            assert client.get(path).status_code == 404, path
        # Swagger UI's files (drf-spectacular-sidecar) are collected and served hashed.
        docs = client.get("/api/docs/").content.decode()
        sources = re.findall(r'<(?:script|link)[^>]*(?:src|href)="(/static/[^"]+)"', docs)
        assert len(sources) >= 3 and any("swagger-ui-bundle" in source for source in sources)
        for source in sources:
            assert client.get(source).status_code == 200, source
