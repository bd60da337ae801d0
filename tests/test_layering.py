"""DESIGN.md's arrows: webapp -> workers -> training -> environments, never backwards.

training/ and environments/ run in worker processes and on GPU hosts without the web app, so
they must not import Django or the packages above them, not even lazily inside a function.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ABOVE_TRAINING = {"django", "webapp", "workers", "celery", "ninja"}
FORBIDDEN = {"training": ABOVE_TRAINING, "environments": ABOVE_TRAINING | {"training"}}


def imported_roots(path: Path) -> set[str]:
    """Top-level package of every absolute import in the file, wherever it appears."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_above_it(package):
    files = sorted((REPO / package).rglob("*.py"))
    assert files
    offenders = {
        str(path.relative_to(REPO)): sorted(imported_roots(path) & FORBIDDEN[package])
        for path in files
        if imported_roots(path) & FORBIDDEN[package]
    }
    assert not offenders, f"{package}/ must not import {sorted(FORBIDDEN[package])}: {offenders}"


def test_imported_roots_sees_lazy_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from django.conf import settings\n    import webapp.x\n")
    assert imported_roots(source) == {"django", "webapp"}


def test_the_training_process_runs_without_django_loaded():
    code = ("import sys, training.cli, training.grpo, training.sft, training.dpo, environments.registry; "
            "sys.exit(sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'webapp'}) or 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# Inside the web app: one floor per app, arrows point down only (docs/architecture.md draws them).
# common is what every app uses; projects is tenancy; a dataset belongs to a project; a verifier
# scores tasks; trajectories are scored attempts at tasks; runs make trajectories, checkpoints
# and jobs. api and dashboard adapt services and selectors to HTTP; config wires the site.
WEBAPP_FLOORS = ["common", "projects", "datasets", "verifiers", "trajectories", "runs", "api", "dashboard", "config"]
DOMAIN_APPS = {"projects", "datasets", "verifiers", "trajectories", "runs"}
# The pages reuse the API's input schemas (one parse of a query for both); the API never imports a page.
SIDEWAYS = {("dashboard", "api")}
# Every domain app has one shape; modules outside these hold nothing (the tests count them).
APP_SHAPE = {"__init__.py", "apps.py", "models.py", "admin.py", "services", "selectors", "migrations", "management"}


def webapp_imports(path: Path) -> set[str]:
    """The webapp modules a file imports (absolute imports only: the web app uses no relative ones)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("webapp."):
            modules.add(node.module)
            modules |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names if alias.name.startswith("webapp.")}
    return modules


def app_of_module(module: str) -> str:
    return module.split(".")[1]


def webapp_arrows() -> dict[tuple[str, str], set[str]]:
    """(from app, to app) -> the files that draw that arrow, for every file of the web app."""
    arrows: dict[tuple[str, str], set[str]] = {}
    for path in sorted((REPO / "webapp").rglob("*.py")):
        parts = path.relative_to(REPO / "webapp").parts
        if len(parts) < 2 or "migrations" in parts:
            continue
        for module in webapp_imports(path):
            target = app_of_module(module)
            if target != parts[0] and target in WEBAPP_FLOORS:
                arrows.setdefault((parts[0], target), set()).add(str(path.relative_to(REPO)))
    return arrows


def test_every_webapp_package_is_on_a_floor():
    packages = {p.name for p in (REPO / "webapp").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(WEBAPP_FLOORS), "add the new app to WEBAPP_FLOORS (and to docs/architecture.md)"


def test_webapp_arrows_point_down():
    up = {
        f"{a} -> {b}": sorted(files)
        for (a, b), files in webapp_arrows().items()
        if WEBAPP_FLOORS.index(b) > WEBAPP_FLOORS.index(a) and (a, b) not in SIDEWAYS
    }
    assert not up, f"an app imports one above it (move the code down, or ask through the lower app's selectors): {up}"


def test_no_domain_app_imports_the_api_or_the_pages():
    offenders = {
        f"{a} -> {b}": sorted(files)
        for (a, b), files in webapp_arrows().items()
        if a in DOMAIN_APPS | {"common"} and b in {"api", "dashboard", "config"}
    }
    assert not offenders, offenders


def test_no_cycle_between_webapp_apps():
    graph: dict[str, set[str]] = {}
    for a, b in webapp_arrows():
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    cycles = sorted(a for a in graph if reaches(a, a, {a}))
    assert not cycles, f"these apps reach themselves through others: {cycles}"


@pytest.mark.parametrize("app", sorted(DOMAIN_APPS))
def test_domain_app_has_the_common_shape(app):
    entries = {p.name for p in (REPO / "webapp" / app).iterdir() if p.name != "__pycache__"}
    assert {"models.py", "services", "selectors", "admin.py"} <= entries
    assert entries <= APP_SHAPE, f"webapp/{app}/ holds {sorted(entries - APP_SHAPE)}: put it in services/ or selectors/"


def test_webapp_arrows_see_a_module_imported_by_name(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from webapp.runs.selectors import failures\nimport webapp.common.bounds\n")
    assert {app_of_module(m) for m in webapp_imports(source)} == {"runs", "common"}


def test_the_web_app_never_imports_the_workers():
    """The web app queues a job by the task's name; only workers import the web app."""
    offenders = sorted(str(p.relative_to(REPO)) for p in (REPO / "webapp").rglob("*.py")
                       if "workers" in imported_roots(p))
    assert not offenders, offenders


# Views and API endpoints adapt services and selectors to HTTP: every ORM query lives in the owning app's
# selectors (reads) or services (writes), so a page and its endpoint read the same rows the same way.
VIEW_AND_ENDPOINT_FOLDERS = ("webapp/dashboard/views", "webapp/api")
# Views and endpoints allowed to query the ORM themselves: none since issue 36 moved the last of them (keep it so).
ORM_IN_VIEWS_ALLOWED: set[str] = set()
# Not an endpoint: the middleware that keeps the API app's own table (TokenFailure, webapp/api/models.py)
# before any endpoint runs. The api app has no services package; this module is its one writer.
NOT_AN_ENDPOINT = {"webapp/api/throttle.py"}


def orm_queries(path: Path) -> list[int]:
    """Lines of the file that reach a model manager (`Model.objects`, `get_user_model().objects`)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
                  if isinstance(node, ast.Attribute) and node.attr == "objects")


def orm_offenders(root: Path, exempt: set[str]) -> dict[str, list[int]]:
    """{file: lines} of the views and endpoint modules under `root` that query the ORM, `exempt` left out."""
    files = sorted(path for folder in VIEW_AND_ENDPOINT_FOLDERS for path in (root / folder).glob("*.py"))
    return {name: lines for name, lines in ((str(p.relative_to(root)), orm_queries(p)) for p in files)
            if lines and name not in exempt}


def test_views_and_endpoints_do_not_query_the_orm():
    exempt = ORM_IN_VIEWS_ALLOWED | NOT_AN_ENDPOINT
    missing = sorted(name for name in exempt if not (REPO / name).exists())
    assert not missing, f"an allowed file is gone: take it off the list: {missing}"
    offenders = orm_offenders(REPO, exempt)
    assert not offenders, ("these views or endpoints query the ORM (lines listed): move each query into a "
                           f"function of the owning app's selectors or services: {offenders}")


def test_orm_offenders_sees_a_reintroduced_manager(tmp_path):
    for folder in VIEW_AND_ENDPOINT_FOLDERS:
        (tmp_path / folder).mkdir(parents=True)
    clean = "def f(project):\n    return run_in_project(project, 1)\n"
    (tmp_path / "webapp/api/clean.py").write_text(clean)
    (tmp_path / "webapp/dashboard/views/page.py").write_text(clean)
    assert orm_offenders(tmp_path, set()) == {}
    (tmp_path / "webapp/dashboard/views/page.py").write_text(
        "from webapp.runs.models import Run\n\ndef f(project):\n    x = 1\n"
        "    return get(Run.objects.select_related('project'), pk=x)\n")
    (tmp_path / "webapp/api/lazy.py").write_text("def f():\n    from django.contrib.auth import get_user_model\n"
                                                 "    return get_user_model().objects.first()\n")
    assert orm_offenders(tmp_path, set()) == {"webapp/dashboard/views/page.py": [5], "webapp/api/lazy.py": [3]}
    assert orm_offenders(tmp_path, {"webapp/api/lazy.py"}) == {"webapp/dashboard/views/page.py": [5]}
