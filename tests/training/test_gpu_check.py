"""`python -m training gpu-check`: run on a CPU here so the command a GPU worker runs cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # the check's subprocesses train and generate: about a minute


REPO = Path(__file__).resolve().parents[2]
SMALL = ["--prompts", "2", "--generations", "2", "--max-new-tokens", "8", "--eval-tasks", "2",
         "--micro-batch-size", "2", "--sft-steps", "2", "--grpo-steps", "2"]


def _gpu_check(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "training", "gpu-check", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_every_phase_passes_on_a_cpu_and_the_table_says_so(tokenizer, tmp_path):
    result = _gpu_check("--device", "cpu", "--out", str(tmp_path), *SMALL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "phase" not in line]
    assert [row.split("|")[1].strip() for row in rows] == ["eval", "sft", "grpo", "dpo", "resume", "export"]
    assert all(row.split("|")[2].strip() == "ok" for row in rows)
    assert "torch: " in result.stdout and "transformers: " in result.stdout and "hub kernels: off" in result.stdout
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    phases = {p["phase"]: p for p in report["phases"]}
    assert phases["grpo"]["generated_tokens_per_second"] > 0 and phases["sft"]["trained_tokens_per_second"] > 0
    assert phases["grpo"]["peak_gpu_memory_mb"] is None  # no GPU: no made-up GPU numbers
    assert phases["export"]["detail"]["parameters"] > 0
    assert (tmp_path / "merged" / "config.json").is_file()

    # Run again into the same folder (the default one is): each phase starts afresh, so the
    # resume phase still finds a checkpoint one step back and the timings are of real steps.
    again = _gpu_check("--device", "cpu", "--out", str(tmp_path), "--phases", "sft,grpo,resume", *SMALL)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rerun = {p["phase"]: p for p in json.loads((tmp_path / "gpu-check.json").read_text())["phases"]}
    assert rerun["grpo"]["generated_tokens_per_second"] > 0 and rerun["sft"]["trained_tokens_per_second"] > 0


def test_a_failing_phase_is_named_and_the_exit_status_is_non_zero(tokenizer, tmp_path):
    result = _gpu_check("--device", "cpu", "--out", str(tmp_path), "--model", str(tmp_path / "no-such-model"),
                        "--phases", "eval,export", *SMALL)
    assert result.returncode == 1
    assert "FAILED eval:" in result.stdout and "FAILED export:" in result.stdout
    assert "| eval | failed |" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_asking_for_cuda_without_one_says_what_to_do():
    result = _gpu_check("--device", "cuda")
    assert result.returncode == 2
    assert "no CUDA device is visible" in result.stderr and "--device cpu" in result.stderr


def test_bad_sizes_and_unknown_phases_are_refused():
    assert _gpu_check("--device", "cpu", "--prompts", "0").returncode == 2
    result = _gpu_check("--device", "cpu", "--phases", "eval,warp")
    assert result.returncode == 2 and "unknown phases ['warp']" in result.stderr
