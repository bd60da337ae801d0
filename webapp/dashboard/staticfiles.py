"""Serves plotly.js from the `plotly` package's own bundled file: no CDN, no copy in the repo.

A staticfiles finder, so `{% static 'vendor/plotly.min.js' %}`, runserver, whitenoise and
collectstatic all see the file where pip put it, and upgrading the package upgrades it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


def plotly_bundle() -> Path | None:
    """plotly.min.js inside the installed plotly package (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


class PlotlyFinder(BaseFinder):
    def check(self, **kwargs) -> list[Error]:
        if plotly_bundle() is None:
            return [Error("plotly.min.js was not found in the plotly package", hint="pip install plotly",
                          id="crucible.E001")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs):
        bundle = plotly_bundle()
        if path != PLOTLY_STATIC_PATH or bundle is None:
            return [] if find_all else None
        return [str(bundle)] if find_all else str(bundle)

    def list(self, ignore_patterns):
        """For collectstatic: the one file, from a storage whose prefix puts it under vendor/."""
        bundle = plotly_bundle()
        if bundle is not None:
            storage = FileSystemStorage(location=str(bundle.parent))
            storage.prefix = PLOTLY_STATIC_PATH.rsplit("/", 1)[0]
            yield bundle.name, storage
