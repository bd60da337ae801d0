"""`python -m training run | schema`: the process contract the worker relies on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from training.cli import main
from training.events import read_events

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "CRUCIBLE_JOB_ATTEMPT": "3", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "training", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _config(path: Path, **values) -> Path:
    path.write_text(json.dumps(values))
    return path


def test_schema_command_prints_the_run_config_schema(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False
    assert "num_generations_per_prompt" in schema["properties"]


def test_grpo_then_eval_of_its_checkpoint_from_the_command_line(tiny_model_dir, json_tasks_file, tmp_path):
    tasks = {json.loads(line)["id"] for line in json_tasks_file.read_text().splitlines()}
    common = {"model": str(tiny_model_dir), "dataset": str(json_tasks_file), "device": "cpu",
              "bf16": False, "max_completion_length": 8}
    grpo = _config(tmp_path / "grpo.json", kind="grpo", num_prompts_per_step=2,
                   num_generations_per_prompt=2, max_steps=2, eval_interval=2,
                   checkpoint_interval=1, **common)
    result = _run(["run", "--config", str(grpo), "--out", str(tmp_path / "grpo")])
    assert result.returncode == 0, result.stderr[-2000:]
    # The progress line for people: step, reward, loss and a measured (non-zero) tokens/s.
    line = re.search(r"step 2/2 reward (\S+) loss (\S+) tokens/s (\S+)", result.stderr)
    assert line, result.stderr[-2000:]
    assert 0.0 <= float(line[1]) <= 1.0 and float(line[3]) > 0
    events, _ = read_events(tmp_path / "grpo" / "events.jsonl")
    assert all(e["attempt"] == 3 for e in events)
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "done" and "error" not in kinds
    trajectories = [e for e in events if e["type"] == "trajectory"]
    assert {e["task_id"] for e in trajectories} <= tasks
    train = [e for e in trajectories if e["split"] == "train"]
    assert len(train) == 2 * 2 * 2  # steps x prompts x generations
    assert {(e["step"], e["task_id"], e["sample_index"]) for e in train}.__len__() == len(train)
    validation = [e for e in events if e["type"] == "metric" and e["split"] == "validation"]
    assert [e["step"] for e in validation] == [0, 2]
    checkpoints = [e for e in events if e["type"] == "checkpoint"]
    assert [c["step"] for c in checkpoints] == [1, 2] and checkpoints[-1]["kind"] == "adapter"
    # progress moves during the evaluations too (the step-0 validation is not 0% throughout),
    # never goes back, and ends at 1
    progress = [e for e in events if e["type"] == "progress"]
    fractions = [e["fraction"] for e in progress]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(e["step"] == 0 and e["fraction"] > 0 for e in progress)
    assert {e["step"] for e in progress} == {0, 1, 2}

    evaluation = _config(tmp_path / "eval.json", kind="eval",
                         init_checkpoint=checkpoints[-1]["path"], **common)
    result = _run(["run", "--config", str(evaluation), "--out", str(tmp_path / "eval")])
    assert result.returncode == 0, result.stderr[-2000:]
    events, _ = read_events(tmp_path / "eval" / "events.jsonl")
    trajectories = [e for e in events if e["type"] == "trajectory"]
    assert trajectories and all(e["step"] == 2 and e["split"] == "validation" for e in trajectories)
    (metric,) = [e for e in events if e["type"] == "metric"]
    assert metric["step"] == 2 and metric["metrics"]["success_rate"] == 0.0
    assert metric["metrics"]["num_trajectories"] == len(trajectories)


def test_missing_split_becomes_an_error_event_and_a_nonzero_exit(json_tasks_file, tmp_path):
    config = _config(tmp_path / "run.json", kind="eval", model=str(tmp_path / "not-loaded"),
                     dataset=str(json_tasks_file), eval_split="nope", device="cpu")
    assert main(["run", "--config", str(config), "--out", str(tmp_path / "out")]) == 1
    events, _ = read_events(tmp_path / "out" / "events.jsonl")
    assert events[-1]["type"] == "error"
    message = events[-1]["message"]
    assert f"dataset file {json_tasks_file} has no tasks in split 'nope'" in message
    assert "'train'" in message  # and it lists the splits that exist


def test_bad_config_key_is_named_in_the_error_event(tmp_path):
    config = _config(tmp_path / "run.json", kind="grpo", num_generation=4)
    assert main(["run", "--config", str(config), "--out", str(tmp_path / "out")]) == 1
    events, _ = read_events(tmp_path / "out" / "events.jsonl")
    assert events[-1]["type"] == "error"
    assert "num_generation" in events[-1]["message"] and "did you mean" in events[-1]["message"]


def test_seed_style_held_out_eval_runs_the_named_eval_on_the_held_out_split(tiny_model_dir, json_tasks_file, tmp_path):
    lines = json_tasks_file.read_text().splitlines()
    held_out = [json.dumps({**json.loads(line), "split": "held_out", "id": json.loads(line)["id"] + "-h"})
                for line in lines[:3]]
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text("\n".join(lines + held_out) + "\n")
    config = _config(tmp_path / "grpo.json", kind="grpo", model=str(tiny_model_dir), dataset=str(dataset),
                     device="cpu", bf16=False, max_completion_length=4, num_prompts_per_step=1,
                     num_generations_per_prompt=2, max_steps=1, eval_interval=100, checkpoint_interval=1,
                     reward="tool_call_verifier", held_out_eval="tool_call_eval")
    result = _run(["run", "--config", str(config), "--out", str(tmp_path / "run")])
    assert result.returncode == 0, result.stderr[-2000:]
    events, _ = read_events(tmp_path / "run" / "events.jsonl")
    held = [e for e in events if e["type"] == "metric" and e["split"] == "held_out"]
    assert len(held) == 1 and held[0]["step"] == 1 and held[0]["metrics"]["num_trajectories"] == 3
    assert not [e for e in events if e["type"] == "log" and "skipped" in e.get("message", "")]
