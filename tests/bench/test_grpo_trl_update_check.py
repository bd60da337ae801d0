"""bench/grpo_trl_update_check.py: our GRPO update against TRL's `_compute_loss` on one batch.

TRL is a bench-only dependency, so the comparison itself is skipped where trl is not
installed; the argument check runs everywhere. On a tiny model the two gradients must agree,
and a wrong loss normaliser on TRL's side must show up (the check is only worth running if
it can fail).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.bench.bench_scripts import BENCH, SMOLLM2_TOKENIZER, TRL, load_bench_script

SCRIPT = BENCH / "grpo_trl_update_check.py"


@pytest.fixture(scope="module")
def check():
    return load_bench_script("grpo_trl_update_check.py", SMOLLM2_TOKENIZER, TRL)


@pytest.fixture(scope="module")
def setup(check):
    tasks, _ = check.benchmark_tasks(0)
    trainer = check.Ours(tasks[:4], True, 1e-4, check.MICRO_BATCH, False).trainer
    check.disable_dropout(trainer.job.model)
    rollouts, groups = trainer.collect(1)
    batch = trainer.advantages(rollouts, groups)
    batch.advantages = torch.tensor([1.0 if i % 3 else -2.0 for i in range(len(batch.episodes))])
    theirs = check.trl_trainer(trainer.job.model, trainer.job.tokenizer, tasks)
    return trainer, batch, theirs


def _trl_gradient(check, trainer, batch, theirs, scale_items: float = 1.0):
    model = trainer.job.model
    inputs = check.trl_inputs(batch.episodes, batch.advantages, trainer.pad_id, next(model.parameters()).device)
    for micro in inputs:
        micro["num_items_in_batch"] = micro["num_items_in_batch"] * scale_items
    return check.trl_gradient(theirs, model, inputs)


def test_our_update_equals_trls_on_the_same_batch(check, setup):
    trainer, batch, theirs = setup
    ours = check.our_gradient(trainer, batch)
    trl = _trl_gradient(check, trainer, batch, theirs)
    assert float(trl.norm()) > 0
    assert float((ours - trl).norm() / trl.norm()) < check.TOLERANCE


def test_a_wrong_normaliser_is_reported(check, setup):
    trainer, batch, theirs = setup
    ours = check.our_gradient(trainer, batch)
    halved = _trl_gradient(check, trainer, batch, theirs, scale_items=0.5)  # TRL's gradient doubles
    assert float((ours - halved).norm() / halved.norm()) == pytest.approx(0.5, rel=1e-3)


def test_reading_our_gradient_moves_no_weight_and_restores_the_optimizer(check, setup):
    trainer, batch, _ = setup
    model = trainer.job.model
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    step, zero_grad = trainer.optimizer.step, trainer.optimizer.zero_grad
    check.our_gradient(trainer, batch)
    after = [p.detach() for p in model.parameters() if p.requires_grad]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert trainer.optimizer.step == step and trainer.optimizer.zero_grad == zero_grad


def test_a_folder_without_adapters_is_refused_before_the_model_loads(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--init-checkpoint", str(tmp_path)], capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert f"--init-checkpoint {tmp_path} holds no LoRA adapters" in result.stderr
