"""Start-up: production settings pass `check --deploy`; unreachable servers give one line."""

import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args, env_overrides, timeout=120):
    # tests/settings.py relaxes some settings through the environment; start from the
    # environment the suite was given, without those.
    relaxed = {
        "DJANGO_SETTINGS_MODULE",
        "SECURE_SSL_REDIRECT",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "ALLOW_PRIVATE_PROVIDER_URLS",
        "DEBUG",
        "SECRET_KEY",
        "ENCRYPTION_KEYS",
    }
    env = {k: v for k, v in os.environ.items() if k not in relaxed}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_production_settings_pass_check_deploy_without_warnings(tmp_path):
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env_overrides={
            "DEBUG": "false",
            "SECRET_KEY": Fernet.generate_key().decode() + Fernet.generate_key().decode(),
            "ENCRYPTION_KEYS": Fernet.generate_key().decode(),
            "ALLOWED_HOSTS": "agentops.example.com",
            # A server that is not there: `check` must not need one.
            "DATABASE_URL": "postgres://u:p@127.0.0.1:1/agentops",
            "REDIS_URL": "redis://127.0.0.1:1/0",
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_unreachable_database_url_gives_one_clear_line():
    result = _manage(
        "migrate",
        env_overrides={
            "DEBUG": "true",
            "DATABASE_URL": "postgres://agent:hunter2@127.0.0.1:1/agentops",
            "REDIS_URL": "redis://127.0.0.1:1/0",
        },
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("agentops: DATABASE_URL postgres://agent:***@127.0.0.1:1/agentops cannot be reached: ")
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr


def test_unreachable_redis_url_gives_one_clear_line():
    from django.conf import settings

    db = settings.DATABASES["default"]
    database_url = f"postgresql://{db['USER']}@/{db['NAME']}?host={db['HOST']}&port={db['PORT']}"
    result = _manage(
        "migrate",
        "--check",
        env_overrides={"DEBUG": "true", "DATABASE_URL": database_url, "REDIS_URL": "redis://:pw@127.0.0.1:1/0"},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("agentops: REDIS_URL redis://:***@127.0.0.1:1/0 cannot be reached: ")


def test_missing_secret_key_in_production_is_refused():
    result = _manage(
        "check",
        env_overrides={
            "DEBUG": "false",
            "SECRET_KEY": "",
            "DATABASE_URL": "postgres://x@h/d",
            "REDIS_URL": "redis://h:1/0",
        },
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_social_providers_come_from_the_environment(monkeypatch):
    import pytest
    from django.core.exceptions import ImproperlyConfigured

    from agentops.settings import _social_providers

    for name in ("GITHUB_CLIENT_ID", "GOOGLE_CLIENT_ID", "OIDC_PROVIDERS"):
        monkeypatch.delenv(name, raising=False)
    assert _social_providers() == {}
    monkeypatch.setenv("GITHUB_CLIENT_ID", "gh-id")
    monkeypatch.setenv("GITHUB_CLIENT_SECRET", "gh-secret")
    monkeypatch.setenv("GOOGLE_CLIENT_ID", "g-id")
    monkeypatch.setenv(
        "OIDC_PROVIDERS",
        '[{"id": "huggingface", "name": "Hugging Face", "client_id": "hf", "secret": "s",'
        ' "server_url": "https://huggingface.co"}]',
    )
    providers = _social_providers()
    assert providers["github"]["APPS"] == [{"client_id": "gh-id", "secret": "gh-secret"}]
    assert providers["google"]["APPS"][0]["client_id"] == "g-id"
    app = providers["openid_connect"]["APPS"][0]
    assert (app["provider_id"], app["name"], app["settings"]["server_url"]) == (
        "huggingface",
        "Hugging Face",
        "https://huggingface.co",
    )
    monkeypatch.setenv("OIDC_PROVIDERS", '[{"name": "missing id"}]')
    with pytest.raises(ImproperlyConfigured, match="OIDC_PROVIDERS must be a JSON list"):
        _social_providers()


def test_malformed_encryption_key_or_rate_is_refused_at_start():
    base = {"DEBUG": "true", "DATABASE_URL": "postgres://x@127.0.0.1:1/d", "REDIS_URL": "redis://127.0.0.1:1/0"}
    result = _manage("check", env_overrides={**base, "ENCRYPTION_KEYS": "not-a-key"})
    assert result.returncode != 0
    assert "ENCRYPTION_KEYS entry 1 is not a Fernet key" in result.stderr
    result = _manage("check", env_overrides={**base, "API_RATE_LIMIT_PER_KEY": "lots"})
    assert result.returncode != 0
    assert "API_RATE_LIMIT_PER_KEY must look like 600/min" in result.stderr


def test_configuration_errors_are_one_line():
    result = _manage(
        "check",
        env_overrides={
            "DEBUG": "maybe",
            "DATABASE_URL": "postgres://x@127.0.0.1:1/d",
            "REDIS_URL": "redis://127.0.0.1:1/0",
        },
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "agentops: configuration error: DEBUG must be true or false, not 'maybe'"
