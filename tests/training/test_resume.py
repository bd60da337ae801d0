"""Kill the training process after a checkpoint, start the same command again: it resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

from training.checkpoints import latest_checkpoint
from training.events import read_events

REPO = Path(__file__).resolve().parents[2]
MAX_STEPS = 12
SPREAD_VERIFIER = {
    # The tiny random model never writes a valid call, so the built-in verifier would give
    # every sample 0 (no advantage, no update); this reward varies from sample to sample.
    "name": "python",
    "config": {"code": "def verify(task, trajectory):\n"
               "    return float(len(trajectory['turns'][0]['content']) % 2)\n"},
}


def _start(config: Path, run_dir: Path, attempt: int) -> subprocess.Popen:
    env = {**os.environ, "CRUCIBLE_JOB_ATTEMPT": str(attempt), "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "training", "run", "--config", str(config), "--out", str(run_dir)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _wait_for_checkpoint(proc: subprocess.Popen, events_path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events, _ = read_events(events_path)
        if any(e["type"] == "checkpoint" for e in events):
            return
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    raise AssertionError("no checkpoint event within the timeout")


def test_sigkill_after_checkpoint_then_rerun_resumes_and_keeps_learning(
    tiny_model_dir, json_tasks_file, tmp_path
):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({
        "kind": "grpo", "model": str(tiny_model_dir), "dataset": str(json_tasks_file),
        "device": "cpu", "bf16": False, "num_prompts_per_step": 2,
        "num_generations_per_prompt": 4, "max_steps": MAX_STEPS, "max_completion_length": 8,
        "eval_interval": 0, "checkpoint_interval": 2, "keep_top_k": 10, "learning_rate": 1e-2,
        "lr_scheduler": "constant", "verifier": SPREAD_VERIFIER,
    }))
    run_dir = tmp_path / "run"
    first = _start(config, run_dir, attempt=1)
    _wait_for_checkpoint(first, run_dir / "events.jsonl")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL

    resumed_from = latest_checkpoint(run_dir)
    assert resumed_from is not None
    step = int(resumed_from.name.removeprefix("step_"))
    assert step < MAX_STEPS, "the first process finished before it was killed"
    weights_before = load_file(str(resumed_from / "adapter_model.safetensors"))

    second = _start(config, run_dir, attempt=2)
    _, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr.decode()[-2000:]

    events, _ = read_events(run_dir / "events.jsonl")
    mine = [e for e in events if e.get("attempt") == 2]
    assert any(
        e["type"] == "log" and f"resuming from checkpoint step_{step} at step {step}" in e["message"]
        for e in mine
    )
    trained = [e["step"] for e in mine if e["type"] == "metric" and e["split"] == "train"]
    assert trained == list(range(step + 1, MAX_STEPS + 1))  # nothing trained twice
    assert mine[-1]["type"] == "done" and mine[-1]["step"] == MAX_STEPS
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))  # the event log continues, no gaps

    weights_after = load_file(str(run_dir / "checkpoints" / f"step_{MAX_STEPS}" / "adapter_model.safetensors"))
    assert weights_before.keys() == weights_after.keys()
    changed = [k for k in weights_before if not weights_before[k].equal(weights_after[k])]
    assert changed, "no trainable parameter changed after the resume"
