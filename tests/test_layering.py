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
