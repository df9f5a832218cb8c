"""The docs stay true to the code: every path docs/api.md names is a route of the URLconf,
every method it names for a path is one the route's view serves, and the permission its
endpoint tables give each one is the one the view declares; and every link between the
README and docs/ leads to a file and section that exist."""

import re
from pathlib import Path

import pytest
from django.urls import Resolver404, resolve

ROOT = Path(__file__).resolve().parent.parent

# A path starts at a backtick, a space or a line start (not inside a file name such as
# runs/api/urls.py) and ends at whatever cannot be in a URL in prose.
PATH = re.compile(r"(?:\b(GET|POST|PUT|PATCH|DELETE|HEAD) +)?(?<![\w/.~-])(/(?:api|o)/[^\s`\"'<>()|,]*)")
# A row of an endpoint table: | `METHOD /path` | `permission` (or who may call it) | ...
ROW = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/api/[^`]*)` \| *(?:`([a-z_]+:[a-z_]+)`)?")
# Bases the text names as such, not endpoints.
PREFIXES = {"/api/", "/api/v1/", "/api/v1/otlp", "/api/v1/otlp/"}
SAMPLES = {"org": "acme", "project": "agent", "provider": "mistral", "session_id": "s-1"}


def _sample(placeholder: str) -> str:
    name = placeholder.strip("{}")
    return SAMPLES.get(name, "1" if name == "id" or name.endswith("_id") else name)


def named_paths(doc: str) -> list[tuple[int, str | None, str]]:
    """(line, method or None, path) for every path the document names."""
    found = []
    for number, line in enumerate((ROOT / doc).read_text().splitlines(), start=1):
        for method, path in PATH.findall(line):
            path = path.rstrip(".:;")
            if path in PREFIXES or path.endswith(("...", "…")):
                continue
            found.append((number, method or None, path))
    return found


def _resolve(path: str):
    return resolve(re.sub(r"\{\w+\}", lambda match: _sample(match[0]), path.split("?")[0]))


def stale(doc: str) -> list[str]:
    problems = []
    for number, method, path in named_paths(doc):
        try:
            match = _resolve(path)
        except Resolver404:
            problems.append(f"{doc}:{number}: {path} is no route")
            continue
        view_class = getattr(match.func, "view_class", None)
        if method and view_class is not None and not hasattr(view_class, method.lower()):
            problems.append(f"{doc}:{number}: {method} {path}: {view_class.__name__} has no {method}")
    return problems


def test_the_api_reference_names_paths_at_all():
    assert len(named_paths("docs/api.md")) >= 100


@pytest.mark.parametrize("doc", ["docs/api.md"])
def test_every_path_the_docs_name_resolves(doc):
    assert stale(doc) == []


def test_every_permission_the_endpoint_tables_name_is_the_views():
    rows = [ROW.match(line) for line in (ROOT / "docs/api.md").read_text().splitlines()]
    rows = [row.groups() for row in rows if row]
    assert len(rows) >= 40
    wrong = []
    for method, path, permission in rows:
        declared = getattr(_resolve(path).func.view_class, "permissions", {}).get(method)
        if declared != permission:
            wrong.append(f"{method} {path}: the docs say {permission}, the view declares {declared}")
    assert wrong == []


# -- links between the documents ------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)


def _documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "cli/README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the document's headings: lower case, punctuation dropped,
    spaces as dashes, "-1", "-2"... on repeats."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#+ (.*)$", CODE_BLOCK.sub("", document.read_text()), re.M):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(f"{anchor}-{seen[anchor]}" if anchor in seen else anchor)
        seen[anchor] = seen.get(anchor, 0) + 1
    return anchors


def test_every_link_between_the_documents_leads_somewhere():
    """A reader who follows a link of the README or docs/ to a file or a section finds it."""
    broken = []
    for document in _documents():
        for link in LINK.findall(CODE_BLOCK.sub("", document.read_text())):
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = link.partition("#")
            target = (document.parent / path).resolve() if path else document
            name = document.relative_to(ROOT)
            if not target.exists():
                broken.append(f"{name}: {link}: no such file")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{name}: {link}: no such section")
    assert broken == []
