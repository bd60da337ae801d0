"""Checkpoint folders: atomic commit, crash leftovers, retention, optimizer and RNG resume."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from training.checkpoints import (
    COMPLETE_MARKER,
    begin_checkpoint,
    checkpoints_root,
    commit_checkpoint,
    content_hash,
    discard_incomplete,
    latest_checkpoint,
    list_checkpoints,
    load_training_state,
    retain_checkpoints,
    save_training_state,
)


def _write(run_dir, step, metrics=None, payload=b"weights"):
    tmp = begin_checkpoint(run_dir, step)
    (tmp / "adapter_model.safetensors").write_bytes(payload + str(step).encode())
    return commit_checkpoint(tmp, run_dir, step, metrics)


# --- hashing ------------------------------------------------------------------------------


def test_content_hash_depends_on_paths_and_bytes_not_location(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "w.bin").write_bytes(b"\x00\x01")
        (folder / "config.json").write_text("{}")
    assert content_hash(a) == content_hash(b)
    (b / "sub" / "w.bin").write_bytes(b"\x00\x02")
    assert content_hash(a) != content_hash(b)
    (b / "sub" / "w.bin").write_bytes(b"\x00\x01")
    (b / "sub" / "w.bin").rename(b / "sub" / "v.bin")
    assert content_hash(a) != content_hash(b)


def test_content_hash_frames_file_boundaries(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_bytes(b"ab")
    (a / "y").write_bytes(b"c")
    (b / "x").write_bytes(b"a")
    (b / "y").write_bytes(b"bc")
    assert content_hash(a) != content_hash(b)


# --- commit and discovery -----------------------------------------------------------------


def test_commit_renames_into_step_folder_with_marker(tmp_path):
    checkpoint = _write(tmp_path, 5, {"validation/success_rate": 0.5})
    assert checkpoint.path == checkpoints_root(tmp_path) / "step_5"
    assert (checkpoint.path / COMPLETE_MARKER).is_file()
    assert checkpoint.content_hash == content_hash(checkpoint.path)
    assert [p.name for p in checkpoints_root(tmp_path).iterdir()] == ["step_5"]
    assert list_checkpoints(tmp_path)[0].metrics == {"validation/success_rate": 0.5}


def test_latest_checkpoint_ignores_crash_leftovers(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    _write(tmp_path, 10)
    _write(tmp_path, 20)
    crashed = begin_checkpoint(tmp_path, 30)  # killed before commit
    (crashed / "adapter_model.safetensors").write_bytes(b"half")
    unmarked = checkpoints_root(tmp_path) / "step_40"  # copied by hand, never sealed
    unmarked.mkdir()
    assert latest_checkpoint(tmp_path) == checkpoints_root(tmp_path) / "step_20"
    assert [c.step for c in list_checkpoints(tmp_path)] == [10, 20]

    removed = discard_incomplete(tmp_path)
    assert removed == [crashed]
    assert not crashed.exists()
    assert latest_checkpoint(tmp_path) == checkpoints_root(tmp_path) / "step_20"


def test_latest_checkpoint_orders_steps_numerically(tmp_path):
    for step in (9, 10, 100):
        _write(tmp_path, step)
    assert latest_checkpoint(tmp_path).name == "step_100"


def test_recommitting_a_step_replaces_it(tmp_path):
    first = _write(tmp_path, 3, payload=b"old")
    second = _write(tmp_path, 3, payload=b"new")
    assert first.content_hash != second.content_hash
    assert (second.path / "adapter_model.safetensors").read_bytes() == b"new3"
    assert [p.name for p in checkpoints_root(tmp_path).iterdir()] == ["step_3"]


def test_non_finite_metrics_are_recorded_as_null(tmp_path):
    checkpoint = _write(tmp_path, 1, {"validation/success_rate": float("nan")})
    assert list_checkpoints(tmp_path)[0].metrics == {"validation/success_rate": None}
    assert checkpoint.metrics["validation/success_rate"] is None


# --- retention ----------------------------------------------------------------------------


def _steps(run_dir):
    return [c.step for c in list_checkpoints(run_dir)]


def test_retention_keeps_top_k_by_metric_plus_latest(tmp_path):
    metric = "validation/success_rate"
    for step, score in [(10, 0.2), (20, 0.6), (30, 0.4), (40, 0.7), (50, 0.1)]:
        _write(tmp_path, step, {metric: score})
    deleted = retain_checkpoints(tmp_path, keep_top_k=2, metric=metric)
    assert sorted(p.name for p in deleted) == ["step_10", "step_30"]
    assert _steps(tmp_path) == [20, 40, 50]


def test_retention_with_explicit_scores_and_min_mode(tmp_path):
    for step in (1, 2, 3, 4):
        _write(tmp_path, step)
    retain_checkpoints(
        tmp_path,
        keep_top_k=1,
        metric="validation/latency_p95",
        mode="min",
        scores={1: 3.0, 2: 1.0, 3: 2.0},
    )
    assert _steps(tmp_path) == [2, 4]


def test_retention_deletes_unscored_checkpoints_except_latest(tmp_path):
    _write(tmp_path, 1, {"validation/success_rate": 0.3})
    _write(tmp_path, 2)
    _write(tmp_path, 3, {"validation/success_rate": None})
    _write(tmp_path, 4)
    retain_checkpoints(tmp_path, keep_top_k=3, metric="validation/success_rate")
    assert _steps(tmp_path) == [1, 4]


def test_retention_breaks_ties_towards_later_steps(tmp_path):
    for step in (1, 2, 3):
        _write(tmp_path, step, {"m": 0.5})
    _write(tmp_path, 4, {"m": 0.1})
    retain_checkpoints(tmp_path, keep_top_k=1, metric="m")
    assert _steps(tmp_path) == [3, 4]


def test_retention_rejects_zero_k(tmp_path):
    with pytest.raises(ValueError, match="keep_top_k"):
        retain_checkpoints(tmp_path, keep_top_k=0, metric="m")


# --- training state -----------------------------------------------------------------------


def _train(model, optimizer, scheduler, steps):
    for _ in range(steps):
        loss = model(torch.randn(4, 3)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()


def _fresh(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    return model, optimizer, scheduler


def _draws(generator):
    return (
        random.random(),
        float(np.random.rand()),
        torch.rand(3).tolist(),
        torch.rand(2, generator=generator).tolist(),
    )


def test_training_state_round_trip_restores_optimizer_scheduler_and_rng(tmp_path):
    model, optimizer, scheduler = _fresh(0)
    _train(model, optimizer, scheduler, 3)
    generator = torch.Generator().manual_seed(7)
    torch.rand(5, generator=generator)  # advance it past its seed
    random.seed(1)
    np.random.seed(2)
    save_training_state(tmp_path, optimizer, scheduler, 3, generator)
    expected_draws = _draws(generator)
    expected_state = optimizer.state_dict()

    other_model, other_optimizer, other_scheduler = _fresh(1)
    other_model.load_state_dict(model.state_dict())
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    other_generator = torch.Generator().manual_seed(99)
    step = load_training_state(tmp_path, other_optimizer, other_scheduler, other_generator)

    assert step == 3
    assert _draws(other_generator) == expected_draws
    assert other_scheduler.last_epoch == scheduler.last_epoch
    assert other_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    restored = other_optimizer.state_dict()["state"]
    for index, state in expected_state["state"].items():
        assert restored[index]["step"] == state["step"]
        torch.testing.assert_close(restored[index]["exp_avg"], state["exp_avg"])
        torch.testing.assert_close(restored[index]["exp_avg_sq"], state["exp_avg_sq"])


def test_resumed_training_matches_uninterrupted_training(tmp_path):
    model, optimizer, scheduler = _fresh(0)
    _train(model, optimizer, scheduler, 2)
    save_training_state(tmp_path, optimizer, scheduler, 2)
    saved_weights = {k: v.clone() for k, v in model.state_dict().items()}
    _train(model, optimizer, scheduler, 2)

    resumed, resumed_optimizer, resumed_scheduler = _fresh(5)
    resumed.load_state_dict(saved_weights)
    load_training_state(tmp_path, resumed_optimizer, resumed_scheduler)
    _train(resumed, resumed_optimizer, resumed_scheduler, 2)

    for name, value in model.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value)
    assert not torch.equal(resumed.weight, saved_weights["weight"])


def test_training_state_inside_committed_checkpoint(tmp_path):
    model, optimizer, scheduler = _fresh(0)
    _train(model, optimizer, scheduler, 1)
    tmp = begin_checkpoint(tmp_path, 1)
    save_training_state(tmp, optimizer, scheduler, 1)
    checkpoint = commit_checkpoint(tmp, tmp_path, 1)
    assert load_training_state(latest_checkpoint(tmp_path), optimizer, scheduler) == 1
    assert checkpoint.content_hash == content_hash(checkpoint.path)


def test_loading_from_a_folder_without_state_says_what_to_pick(tmp_path):
    _, optimizer, _ = _fresh(0)
    with pytest.raises(FileNotFoundError, match="checkpoints/step_N"):
        load_training_state(tmp_path, optimizer)
