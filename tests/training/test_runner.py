"""The job plumbing shared by every kind: schedules, checkpoints as written, resume, retention."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from test_grpo import TextIs, grpo_config, likely_first_token, peaked_model, toy_tasks

from environments.json_tool_call import JsonToolCallEnvironment
from training.checkpoints import (
    RNG_STATE_FILE,
    STATE_FILE,
    TRAINING_STATE_FILE,
    content_hash,
    latest_checkpoint,
)
from training.cli import execute
from training.config import validate_run_config
from training.events import EventWriter, read_events
from training.models import tiny_llama
from training.runner import (
    ADAPTER_WEIGHTS,
    FULL_WEIGHTS,
    RUN_CONFIG_FILE,
    build_job,
    make_optimizer,
    resume,
    save_checkpoint,
)


def _lrs(lr_scheduler: str, warmup: int, steps: int = 6) -> list[float]:
    cfg = validate_run_config({"kind": "sft", "learning_rate": 1.0, "lr_scheduler": lr_scheduler,
                               "warmup_steps": warmup, "max_steps": steps})
    job = SimpleNamespace(cfg=cfg, model=torch.nn.Linear(2, 2))
    optimizer, scheduler = make_optimizer(job, steps)
    seen = []
    for _ in range(steps):
        seen.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return seen


def test_constant_schedule_honours_warmup():
    assert _lrs("constant", 0) == [1.0] * 6
    assert _lrs("constant", 2) == [0.0, 0.5, 1.0, 1.0, 1.0, 1.0]


def test_linear_and_cosine_warm_up_then_decay_towards_zero():
    linear = _lrs("linear", 2)
    assert linear[:3] == [0.0, 0.5, 1.0]
    assert linear[3:] == pytest.approx([0.75, 0.5, 0.25])
    cosine = _lrs("cosine", 2)
    assert cosine[:3] == [0.0, 0.5, 1.0]
    expected = [0.5 * (1 + math.cos(math.pi * k / 4)) for k in (1, 2, 3)]
    assert cosine[3:] == pytest.approx(expected)


def _job(tokenizer, run_dir, events, *, adapter: str, seed: int, tied: bool = False):
    cfg = validate_run_config({"kind": "grpo", "adapter": adapter, "device": "cpu", "bf16": False,
                               "max_steps": 4, "lora_dropout": 0.0, "lr_scheduler": "constant"})
    model = tiny_llama(tokenizer, seed=seed, tied=tied)
    return build_job(cfg, run_dir, events, model=model, tokenizer=tokenizer,
                     environment=JsonToolCallEnvironment(), verifier=TextIs("x"), tasks=toy_tasks())


def _trainable(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _perturb(model) -> None:
    """Move every trainable tensor off its initial value (LoRA's B starts at zero)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.1)


@pytest.mark.parametrize(
    ("adapter", "weights", "tied"),
    [("lora", ADAPTER_WEIGHTS, False), ("full", FULL_WEIGHTS, False), ("full", FULL_WEIGHTS, True)],
)
def test_resume_loads_the_checkpoints_weights_into_a_differently_initialised_model(
    tokenizer, tmp_path, adapter, weights, tied
):
    """Tied: the saved file has no lm_head (save_pretrained drops tied copies); that is fine."""
    with EventWriter(tmp_path) as events:
        job = _job(tokenizer, tmp_path, events, adapter=adapter, seed=0, tied=tied)
        _perturb(job.model)
        optimizer, scheduler = make_optimizer(job, 4)
        save_checkpoint(job, 2, optimizer, scheduler)
        saved = _trainable(job.model)

        other = _job(tokenizer, tmp_path, events, adapter=adapter, seed=1, tied=tied)
        before = _trainable(other.model)
        assert any(not before[n].equal(saved[n]) for n in saved)  # a real difference to undo
        other_optimizer, other_scheduler = make_optimizer(other, 4)
        assert resume(other, other_optimizer, other_scheduler) == 2
    after = _trainable(other.model)
    assert after.keys() == saved.keys()
    for name, value in saved.items():
        assert torch.equal(after[name], value), name
    assert (latest_checkpoint(tmp_path) / weights).is_file()
    if tied:
        assert other.model.lm_head.weight.data_ptr() == other.model.model.embed_tokens.weight.data_ptr()


def test_resume_refuses_full_weights_without_the_head_of_an_untied_model(tokenizer, tmp_path):
    from safetensors.torch import load_file, save_file

    from training.runner import JobError

    with EventWriter(tmp_path) as events:
        job = _job(tokenizer, tmp_path, events, adapter="full", seed=0)
        optimizer, scheduler = make_optimizer(job, 4)
        folder = save_checkpoint(job, 2, optimizer, scheduler).path
        state = load_file(str(folder / FULL_WEIGHTS))
        del state["lm_head.weight"]
        save_file(state, str(folder / FULL_WEIGHTS))
        other = _job(tokenizer, tmp_path, events, adapter="full", seed=1)
        before = _trainable(other.model)
        other_optimizer, other_scheduler = make_optimizer(other, 4)
        with pytest.raises(JobError, match="missing .*lm_head.weight"):
            resume(other, other_optimizer, other_scheduler)
    after = _trainable(other.model)  # refused before any weight was loaded: nothing half-applied
    assert all(torch.equal(after[name], value) for name, value in before.items())


def test_a_checkpoint_holds_weights_tokenizer_config_and_state_and_its_event_hash_matches(
    tokenizer, tmp_path
):
    with EventWriter(tmp_path) as events:
        job = _job(tokenizer, tmp_path, events, adapter="lora", seed=0)
        optimizer, scheduler = make_optimizer(job, 4)
        save_checkpoint(job, 1, optimizer, scheduler, {"validation/success_rate": 0.5})
    folder = tmp_path / "checkpoints" / "step_1"
    for name in (ADAPTER_WEIGHTS, "adapter_config.json", "tokenizer_config.json", RUN_CONFIG_FILE,
                 TRAINING_STATE_FILE, RNG_STATE_FILE, STATE_FILE):
        assert (folder / name).is_file(), name
    assert not list((tmp_path / "checkpoints").glob(".*"))  # no temporary folder left behind
    events_written, _ = read_events(tmp_path / "events.jsonl")
    (event,) = [e for e in events_written if e["type"] == "checkpoint"]
    assert event["step"] == 1 and event["path"] == str(folder)
    assert event["content_hash"] == content_hash(folder)
    assert event["metrics"]["validation/success_rate"] == 0.5


def test_a_run_keeps_the_best_validated_checkpoints_plus_the_latest(tokenizer, tmp_path):
    """keep_top_k in a real GRPO run: validation every step, checkpoints every step."""
    model = peaked_model(tokenizer)
    target = likely_first_token(model, tokenizer)
    cfg = grpo_config(max_steps=4, eval_interval=1, checkpoint_interval=1, keep_top_k=1,
                      checkpoint_metric="validation/reward_mean", learning_rate=5e-3)
    with EventWriter(tmp_path) as events:
        execute(cfg, tmp_path, events, model=model, tokenizer=tokenizer,
                environment=JsonToolCallEnvironment(), verifier=TextIs(target), tasks=toy_tasks())
    written, _ = read_events(tmp_path / "events.jsonl")
    checkpoints = {e["step"]: e["metrics"] for e in written if e["type"] == "checkpoint"}
    assert sorted(checkpoints) == [1, 2, 3, 4]
    scores = {step: m["validation/reward_mean"] for step, m in checkpoints.items()}
    assert all(score is not None for score in scores.values())
    best = max(sorted(scores), key=lambda step: (scores[step], step))  # ties go to the later step
    kept = sorted(int(p.name.removeprefix("step_")) for p in (tmp_path / "checkpoints").glob("step_*"))
    assert kept == sorted({best, 4})


def test_resume_reads_a_sharded_full_checkpoint(tokenizer, tmp_path):
    """Full fine-tunes above save_pretrained's shard size are written as several files."""
    with EventWriter(tmp_path) as events:
        job = _job(tokenizer, tmp_path, events, adapter="full", seed=0)
        _perturb(job.model)
        optimizer, scheduler = make_optimizer(job, 4)
        folder = save_checkpoint(job, 2, optimizer, scheduler).path
        (folder / FULL_WEIGHTS).unlink()
        job.model.save_pretrained(folder, max_shard_size="2MB")
        assert len(list(folder.glob("model-*.safetensors"))) > 1
        saved = _trainable(job.model)
        other = _job(tokenizer, tmp_path, events, adapter="full", seed=1)
        other_optimizer, other_scheduler = make_optimizer(other, 4)
        assert resume(other, other_optimizer, other_scheduler) == 2
    after = _trainable(other.model)
    assert all(torch.equal(after[name], value) for name, value in saved.items())
