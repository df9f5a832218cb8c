"""Start-up: production settings pass `check --deploy`; unreachable servers give one line."""

import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args, env_overrides, timeout=120):
    # `manage.py *args`, or `python -c <code>` when args start with "-c".
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
        "JOBS_LOCAL_BACKEND",
        "JOBS_LOCAL_USER",
        "JOBS_CALLBACK_URL",
        "HOST",
        "PORT",
    }
    env = {k: v for k, v in os.environ.items() if k not in relaxed}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, *args] if args[0] == "-c" else [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
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


def test_an_encryption_key_is_made_before_anything_is_configured():
    # The README's deployment steps: set ENCRYPTION_KEYS from generate_encryption_key's
    # output, so the command cannot need ENCRYPTION_KEYS (or SECRET_KEY, or a server).
    result = _manage(
        "generate_encryption_key",
        env_overrides={"DEBUG": "false", "DATABASE_URL": "postgres://u:p@127.0.0.1:1/agentops"},
    )
    assert result.returncode == 0, result.stderr
    Fernet(result.stdout.strip())  # a valid key
    assert result.stderr == ""


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


def _setting(name: str, tmp_path, **environment) -> str:
    """The value the settings give ``name`` in a process started with ``environment``."""
    result = _manage(
        "-c",
        f"from agentops import settings; print(repr(settings.{name}))",
        env_overrides={
            "DEBUG": "true",
            "DATA_DIR": str(tmp_path),
            # Servers that are not there: reading a setting needs none.
            "DATABASE_URL": "postgres://x@127.0.0.1:1/d",
            "REDIS_URL": "redis://127.0.0.1:1/0",
            **environment,
        },
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_jobs_call_the_platform_back_where_it_is_served(tmp_path):
    assert _setting("JOBS_CALLBACK_URL", tmp_path) == "'http://127.0.0.1:8000'"
    assert _setting("JOBS_CALLBACK_URL", tmp_path, PORT="9000") == "'http://127.0.0.1:9000'"
    assert _setting("JOBS_CALLBACK_URL", tmp_path, HOST="0.0.0.0", PORT="9001") == "'http://127.0.0.1:9001'"
    assert _setting("JOBS_CALLBACK_URL", tmp_path, HOST="::", PORT="9002") == "'http://[::1]:9002'"
    assert _setting("JOBS_CALLBACK_URL", tmp_path, HOST="10.0.0.5", PORT="9003") == "'http://10.0.0.5:9003'"
    assert (
        _setting("JOBS_CALLBACK_URL", tmp_path, PORT="9000", JOBS_CALLBACK_URL="https://agentops.example.com/")
        == "'https://agentops.example.com'"
    )


def test_the_local_backend_is_off_in_production_unless_turned_on(tmp_path):
    production = {"DEBUG": "false", "SECRET_KEY": "k" * 60, "ENCRYPTION_KEYS": Fernet.generate_key().decode()}
    assert _setting("JOBS_LOCAL_BACKEND", tmp_path, **production) == "False"
    assert _setting("JOBS_LOCAL_BACKEND", tmp_path, **production, JOBS_LOCAL_BACKEND="true") == "True"
    assert _setting("JOBS_LOCAL_USER", tmp_path, **production) == "''"
    assert _setting("JOBS_LOCAL_BACKEND", tmp_path) == "True"  # DEBUG
    as_root = "'nobody'" if os.geteuid() == 0 else "''"
    assert _setting("JOBS_LOCAL_USER", tmp_path) == as_root  # make run as root: jobs as nobody


def test_data_dir_is_readable_by_its_owner_only(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    (data_dir / "redis").mkdir(mode=0o755)
    _setting("DATA_DIR", tmp_path, DATA_DIR=str(data_dir))
    assert data_dir.stat().st_mode & 0o777 == 0o700
    assert (data_dir / "redis").stat().st_mode & 0o777 == 0o700
