"""bench/grpo_logprob_check.py: the real-model check that the fast GRPO paths are exact.

On a tiny model its numbers must show agreement, and a corrupted generation log-prob must
show up as a gap (the check is only worth running if it can fail).
"""

from __future__ import annotations

import sys

import pytest

from tests.bench.bench_scripts import BENCH, SMOLLM2_TOKENIZER, load_bench_script

SCRIPT = BENCH / "grpo_logprob_check.py"


@pytest.fixture(scope="module")
def check():
    return load_bench_script("grpo_logprob_check.py", SMOLLM2_TOKENIZER)


@pytest.fixture(scope="module")
def one_group(check):
    tasks, _ = check.benchmark_tasks(0)
    trainer = check.Ours(tasks[:4], True, 1e-4, 8, False).trainer
    rollouts, _ = trainer.collect(1)
    trainer.job.model.eval()
    return trainer, rollouts.episodes[: check.GENERATIONS]


def test_both_update_paths_match_generation_and_each_other(check, one_group):
    trainer, episodes = one_group
    found = check.check_group(trainer.job.model, episodes, trainer.pad_id, bf16=False)
    assert found["tokens"] > 0 and found["grad_norm"] > 0
    assert found["logp_gap_shared"] < check.TOLERANCE[False]["logp"]
    assert found["logp_gap_full"] < check.TOLERANCE[False]["logp"]
    assert found["grad_rel_diff"] < check.TOLERANCE[False]["grad"]


def test_a_wrong_generation_log_prob_is_reported_as_a_gap(check, one_group):
    import dataclasses

    trainer, episodes = one_group
    bad = dataclasses.replace(episodes[3], completion_logprobs=list(episodes[3].completion_logprobs))
    bad.completion_logprobs[0] += 0.5
    found = check.check_group(trainer.job.model, [*episodes[:3], bad, *episodes[4:]], trainer.pad_id, bf16=False)
    assert found["logp_gap_shared"] == pytest.approx(0.5, abs=1e-3)
    assert found["logp_gap_full"] == pytest.approx(0.5, abs=1e-3)


def test_a_folder_without_adapters_is_refused_before_the_model_loads(tmp_path):
    import subprocess

    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--init-checkpoint", str(tmp_path)], capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert f"--init-checkpoint {tmp_path} holds no LoRA adapters" in result.stderr
