"""scripts/cpu_recipe.py end to end on a tiny random model: every stage is a real
`python -m training run`, the table comes out, and a second run keeps finished stages."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from environments.workplace.generator import NOVEL_PAIR_TEMPLATES, REWORDED_TEMPLATES

REPO_ROOT = Path(__file__).resolve().parents[2]
STAGES = ("baseline", "sft", "grpo", "sft_held_out", "grpo_held_out", "sft_validation", "grpo_validation",
          "sft_novel_pairs", "grpo_novel_pairs")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def recipe(out: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/cpu_recipe.py", "--tiny", "--out", str(out), *options],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=850,
    )


def test_tiny_recipe_runs_every_stage_and_a_rerun_keeps_them(tmp_path):
    first = recipe(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    for stage in STAGES:
        events = [json.loads(line) for line in (tmp_path / stage / "events.jsonl").open()]
        assert events[-1]["type"] == "done", stage
    held_out = [json.loads(line) for line in (tmp_path / "grpo_held_out" / "events.jsonl").open()]
    assert sum(e["type"] == "trajectory" for e in held_out) == 8
    assert "after SFT + GRPO" in first.stdout and "held-out tasks: 8" in first.stdout
    assert "novel pairs: 4" in first.stdout
    novel = [json.loads(line) for line in (tmp_path / "tasks_novel_pairs.jsonl").open()]
    held_templates = {json.loads(line)["metadata"]["template"] for line in (tmp_path / "tasks.jsonl").open()
                      if json.loads(line)["split"] == "held_out"}
    assert held_templates <= REWORDED_TEMPLATES
    assert {t["metadata"]["template"] for t in novel} <= NOVEL_PAIR_TEMPLATES and len(novel) == 4
    grpo_novel = [json.loads(line) for line in (tmp_path / "grpo_novel_pairs" / "events.jsonl").open()]
    assert {e["task_id"] for e in grpo_novel if e["type"] == "trajectory"} == {t["id"] for t in novel}
    per_template = first.stdout.split("held-out template", 1)[1].splitlines()[1:]
    assert sum(int(line.split()[-1]) for line in per_template if " / " in line) == 8 + 4

    (tmp_path / "grpo_validation" / "events.jsonl").unlink()  # as if the last stage had died
    second = recipe(tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    kept = [line for line in second.stdout.splitlines() if line.endswith(", kept")]
    assert len(kept) == len(STAGES) - 1
    assert "grpo_validation: finished earlier" not in second.stdout

    # Packed as the demo's example run is: only what the import reads, no weights.
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    from record_example_run import STAGES as PACKED
    from record_example_run import TASKS_FILE, pack

    manifest = pack(tmp_path, tmp_path / "packed")
    with tarfile.open(tmp_path / "packed" / "cpu-recipe-example.tar.xz", "r:xz") as tar:
        names = [m.name for m in tar.getmembers()]
    assert {n.split("/")[0] for n in names} == {*PACKED, TASKS_FILE}
    kept = {n.rsplit("/", 1)[1] for n in names if "/" in n}
    assert {"events.jsonl", "run.json", "COMPLETE"} <= kept <= {"events.jsonl", "run.json", "COMPLETE", "run_config.json"}
    assert any(n.startswith("grpo/checkpoints/step_") for n in names)
    assert "success_rate" in manifest["stages"]["grpo_held_out"]["held_out"]
    assert sum(manifest["tasks"].values()) == len((tmp_path / TASKS_FILE).read_text().splitlines())
    assert json.loads((tmp_path / "packed" / "manifest.json").read_text()) == manifest


def test_skip_baseline_and_no_novel_pairs_leave_those_out_and_sft_micro_batch_keeps_sixteen_per_step(tmp_path):
    run = recipe(tmp_path, "--skip-baseline", "--novel-pairs", "0", "--sft-micro-batch", "2")
    assert run.returncode == 0, run.stderr[-2000:]
    assert not (tmp_path / "baseline").exists()
    assert not (tmp_path / "sft_novel_pairs").exists() and not (tmp_path / "grpo_novel_pairs").exists()
    assert "novel pairs: 0" in run.stdout
    assert "baseline (base model)" not in run.stdout and "after SFT + GRPO" in run.stdout
    sft = json.loads((tmp_path / "sft" / "run.json").read_text())
    assert (sft["micro_batch_size"], sft["gradient_accumulation_steps"]) == (2, 8)
