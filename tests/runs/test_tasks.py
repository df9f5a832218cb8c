"""The import rule of runs' tasks and services (runs/tasks.py's docstring): services
import the tasks at the top, tasks import services inside their functions, and no other
import hides inside a function, so no two modules of runs import each other."""

import ast
from pathlib import Path

import runs

RUNS = Path(runs.__file__).parent


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return []


def _imports_inside_functions(path: Path) -> list[str]:
    found = []
    for function in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                found += [f"{name} (line {node.lineno})" for name in _imported(node)]
    return found


def test_no_module_of_runs_but_the_tasks_imports_runs_inside_a_function():
    hidden = []
    for path in sorted(RUNS.rglob("*.py")):
        relative = path.relative_to(RUNS).as_posix()
        # apps.py: Django imports models and registrations in AppConfig.ready(), by design.
        if relative in {"tasks.py", "apps.py"} or relative.startswith("migrations/"):
            continue
        for found in _imports_inside_functions(path):
            module = found.split(" ")[0]
            if module.startswith("runs."):
                hidden.append(f"runs/{relative}: {found}")
    assert hidden == [], "import at the top (a cycle, if any, is a layering mistake to fix)"


def test_the_tasks_import_no_service_at_the_top():
    tree = ast.parse((RUNS / "tasks.py").read_text())
    top = [name for node in tree.body for name in _imported(node)]
    assert [name for name in top if name.startswith(("runs.services", "runs.execution"))] == []
