"""Settings for the test suite: the real settings, with a private embedded PostgreSQL
and Redis per test run (in a temporary folder, removed afterwards), so two runs at
the same time never share a database, a queue or a cache key.

With DATABASE_URL and REDIS_URL set, those servers are used instead, with a database
name and a Redis key prefix unique to this run.
"""

import atexit
import os
import shutil
import tempfile

from cryptography.fernet import Fernet

RUN_ID = f"{os.getpid()}"

os.environ.setdefault("SECRET_KEY", "test-secret-key-" + "x" * 50)
os.environ.setdefault("ENCRYPTION_KEYS", Fernet.generate_key().decode())
os.environ["DEBUG"] = "false"
os.environ["SECURE_SSL_REDIRECT"] = "false"
os.environ["SESSION_COOKIE_SECURE"] = "false"
os.environ["CSRF_COOKIE_SECURE"] = "false"
os.environ["ALLOW_PRIVATE_PROVIDER_URLS"] = "true"
# Weights & Biases logging writes files, never calls wandb.ai (closed here): a task still
# running when its test ends, or a worker process started by a test, must not wait on
# the internet (an online wandb.init waits about 30 s before it gives up).
os.environ["WANDB_MODE"] = "offline"
os.environ["AGENTOPS_REDIS_PREFIX"] = f"agentops-test-{RUN_ID}"
os.environ.setdefault("API_RATE_LIMIT_PER_KEY", "100000/min")
# Tests open a page and expect the very next batch to reach it.
os.environ["LIVE_LISTENERS_CACHE_SECONDS"] = "0"
os.environ.setdefault("API_RATE_LIMIT_PER_USER", "100000/min")
# The local backend's tests run real jobs: on (it is off by default without DEBUG), and,
# when the suite runs as root, as `nobody` (jobs never run as root).
os.environ["JOBS_LOCAL_BACKEND"] = "true"
if os.geteuid() == 0:
    os.environ.setdefault("JOBS_LOCAL_USER", "nobody")

if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
    _data_dir = tempfile.mkdtemp(prefix="agentops-test-")
    os.environ["DATA_DIR"] = _data_dir
    # Registered before the embedded servers register their own stop, so it runs after.
    atexit.register(shutil.rmtree, _data_dir, True)

from agentops.settings import *  # noqa: E402, F403

DATABASES["default"]["TEST"] = {"NAME": f"test_agentops_{RUN_ID}"}  # noqa: F405
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; tests only
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
# Close connections after each use so threads of the async tests hold none open when
# the test database is dropped.
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
# allauth's login and sign-up rate limits live in the shared cache and would carry over
# from one test to the next.
ACCOUNT_RATE_LIMITS = False
