"""The layers of the apps, as import-linter checks them (pyproject.toml,
``[tool.importlinter]``; ``make lint`` runs the same check in CI)."""

import subprocess
import sys
import tomllib
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


def _import_linter_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def test_no_app_imports_a_higher_layer_nor_breaks_another_import_contract():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_app_of_the_project_is_checked_and_has_its_layer():
    project_apps = {app for app in settings.INSTALLED_APPS if "." not in app and (ROOT / app / "apps.py").exists()}
    config = _import_linter_config()
    (layers,) = [contract for contract in config["contracts"] if contract["id"] == "layers"]
    assert set(config["root_packages"]) == project_apps
    assert project_apps <= {layer.strip("()") for layer in layers["layers"]}
