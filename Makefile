# The two commands: `make run` (set up and start with demo data) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test lint format browser-check check-runtime clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.runtime-installed: requirements.txt | $(PY)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt | $(PY)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@ $(VENV)/.runtime-installed

## run: install, start embedded PostgreSQL/Redis (unless DATABASE_URL/REDIS_URL), migrate,
##      create demo data, then serve web + worker + beat until Ctrl-C.
run: $(VENV)/.runtime-installed
	DEBUG=$${DEBUG:-true} $(PY) manage.py serve --demo

## test: the whole suite (browser tests run when a Chromium is found).
test: $(VENV)/.dev-installed browser-check
	$(PY) -m pytest

browser-check:
	@if [ -n "$$CHROMIUM_PATH" ]; then \
		if [ -x "$$CHROMIUM_PATH" ]; then echo "Browser tests: using CHROMIUM_PATH=$$CHROMIUM_PATH."; \
		else echo "Browser tests: CHROMIUM_PATH=$$CHROMIUM_PATH is not executable; they will be SKIPPED."; fi; \
	elif command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
		echo "Browser tests: Chromium found, they will run."; \
	else \
		echo "Browser tests: NO Chromium found; they will be SKIPPED (install Debian's chromium or set CHROMIUM_PATH)."; \
	fi

## check-runtime: the platform starts with requirements.txt alone (no test-only package
## hiding a missing runtime dependency): the system checks pass and every Celery task
## module imports (what a worker loads); used by CI after the tests.
check-runtime:
	rm -rf .venv-runtime
	$(PYTHON) -m venv .venv-runtime
	.venv-runtime/bin/python -m pip install --quiet -r requirements.txt
	data=$$(mktemp -d); DEBUG=true DATA_DIR=$$data .venv-runtime/bin/python manage.py check --fail-level WARNING \
		&& DJANGO_SETTINGS_MODULE=agentops.settings DEBUG=true DATA_DIR=$$data .venv-runtime/bin/python -c "import django; django.setup(); \
		from agentops.celery import app; app.loader.import_default_modules(); print('Celery tasks import.')"; \
		status=$$?; rm -rf $$data .venv-runtime; exit $$status

## lint: ruff (lint and format), then import-linter's contracts (pyproject.toml):
##       a lower app never imports a higher one. CI runs it before the tests.
lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: $(VENV)/.dev-installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .ruff_cache
