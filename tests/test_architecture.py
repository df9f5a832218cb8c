"""The layers of the apps, as import-linter checks them (pyproject.toml,
``[tool.importlinter]``; ``make lint`` runs the same check in CI)."""

import ast
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


# -- services and tasks: one import direction -----------------------------------------
#
# A service queues a task, and a task calls a service: one of the two imports must wait
# until it is used, or each module needs the other loaded first. The rule, the same in
# every app: services import tasks at the top of the module (the dependency is plain to
# a reader and to import-linter); tasks import services inside the function that calls
# them. A services module is one under a ``services`` package, or any module that loads a
# tasks module (billing's ledger and budgets): a tasks module loads neither.


def _project_modules() -> dict[str, Path]:
    """Every module of the project's apps (migrations excluded), by dotted name."""
    modules = {}
    for app in _import_linter_config()["root_packages"]:
        for path in sorted((ROOT / app).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _is_tasks(module: str) -> bool:
    parts = module.split(".")
    return len(parts) >= 2 and parts[1] == "tasks"


def _is_services(module: str) -> bool:
    return "services" in module.split(".")[1:]


def _imports(path: Path, module: str, modules: dict) -> list[tuple[str, bool, int]]:
    """(imported project module, imported inside a function, line) of each import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: from the package, one level up per dot after the first
                    parents = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*parents, base]).strip(".")
                # ``from evals import tasks`` imports the module evals.tasks.
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in child.names]
            else:
                visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))
                continue
            found.extend((name, in_function, child.lineno) for name in dict.fromkeys(names) if name in modules)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def _import_rule_breaches() -> dict[str, list[str]]:
    modules = _project_modules()
    imports = {module: _imports(path, module, modules) for module, path in modules.items()}
    # Module-level imports: what loading a module loads (its target's packages too).
    loads = {
        module: {
            loaded
            for target, in_function, _line in found
            if not in_function
            for loaded in (target, *(target.rsplit(".", n)[0] for n in range(1, target.count(".") + 1)))
            if loaded in modules
        }
        for module, found in imports.items()
    }

    def reaches_tasks(start: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module in seen:
                continue
            seen.add(module)
            if module != start and _is_tasks(module):
                return True
            todo.extend(loads.get(module, ()))
        return False

    breaches: dict[str, list[str]] = {}
    for module, found in imports.items():
        for target, in_function, line in found:
            if _is_tasks(module):
                if not in_function and not _is_tasks(target) and (_is_services(target) or reaches_tasks(target)):
                    breaches.setdefault(module, []).append(
                        f"{module}:{line} imports {target} at module level: a task imports services inside its function"
                    )
            elif in_function and _is_tasks(target):
                breaches.setdefault(module, []).append(
                    f"{module}:{line} imports {target} inside a function: services import tasks at the top"
                )
    return breaches


def test_services_import_tasks_at_the_top_and_tasks_import_services_inside_functions():
    breaches = _import_rule_breaches()
    breaches_found = [line for lines in breaches.values() for line in lines]
    assert not breaches_found, "\n".join(breaches_found)
