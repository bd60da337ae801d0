"""bench/run_delete.py, at a few hundred trajectories: it fills, deletes the run, finds the other run whole,
and prints what it measured (the numbers for docs/benchmarks.md come from the script at 1,000,000)."""

from __future__ import annotations

import json
import sys

from tests.bench.bench_scripts import load_bench_script
from webapp.projects.models import Project
from webapp.trajectories.models import Trajectory


def test_the_script_deletes_the_big_run_and_reports_each_statement(db, settings, tmp_path, monkeypatch, capsys):
    settings.CRUCIBLE_RUNS_DIR = tmp_path / "runs"
    script = load_bench_script("run_delete.py")
    monkeypatch.setattr(sys, "argv", ["bench/run_delete.py", "--n", "300", "--other", "40", "--reviews", "12",
                                      "--orm", "30"])
    script.main()
    printed = json.loads(capsys.readouterr().out)
    assert printed["plan"]["trajectories"] == 300 and printed["plan"]["reviews"] == 12
    assert printed["delete"]["removed"]["trajectories"] == 300 and printed["delete"]["removed"]["reviews"] == 12
    assert printed["kept_run_rows_intact"] == 40 and printed["delete"]["freed_bytes"] == 8 * 2 ** 20
    assert set(printed["delete"]["step_seconds"]) >= {"trajectories", "commit"}
    assert not Project.objects.filter(name="bench run delete").exists() and not Trajectory.objects.exists()
    assert not any((tmp_path / "runs").iterdir())
