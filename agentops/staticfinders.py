"""Static files that ship inside Python packages, found without copying them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

# URL path under STATIC_URL -> (package, file inside it). Only these files are served:
# the plotly package also holds megabytes of sample data that must not be collected.
PACKAGE_FILES = {
    "vendor/plotly/plotly.min.js": ("plotly", "package_data/plotly.min.js"),
}


def _package_file(package: str, relative: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / relative
    return path if path.is_file() else None


class PackageFileFinder(BaseFinder):
    """Serves single files from installed packages (Plotly's JavaScript bundle)."""

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        entry = PACKAGE_FILES.get(path)
        found = _package_file(*entry) if entry else None
        if found is None:
            # Nothing found is [] whatever find_all says (Django's own finders do the
            # same): django.contrib.staticfiles.finders.find() collects each finder's
            # answer, so a None here came back as [None], a "match" that WhiteNoise
            # then tried to open (a TypeError, so a 500 for any missing static file).
            return []
        return [str(found)] if find_all else str(found)

    def list(self, ignore_patterns):
        for path, (package, relative) in PACKAGE_FILES.items():
            found = _package_file(package, relative)
            if found is not None:
                storage = FileSystemStorage(location=str(found.parent))
                storage.prefix = str(Path(path).parent)
                yield found.name, storage
