"""SFT: demonstrations from ground truth, loss on assistant tokens only, and it learns."""

from __future__ import annotations

import json

import pytest
import torch

from environments.json_tool_call import JsonToolCallEnvironment
from environments.types import Task
from training.cli import execute
from training.config import validate_run_config
from training.data import load_tasks
from training.events import EventWriter, read_events
from training.runner import build_job
from training.sft import (
    conversation_sequence,
    ground_truth_sequence,
    sft_micro_loss,
    sft_sequences,
    step_items,
)


def test_only_the_target_call_and_its_end_of_turn_are_trained(tokenizer, json_tasks_file):
    task = load_tasks(json_tasks_file)[0]
    sequence = ground_truth_sequence(tokenizer, JsonToolCallEnvironment(), task)
    trained = [t for t, m in zip(sequence.completion_ids, sequence.completion_mask, strict=True) if m]
    text = tokenizer.decode(trained)
    assert text.endswith(tokenizer.eos_token)
    call = json.loads(text.removesuffix(tokenizer.eos_token))
    assert call == {"name": task.ground_truth[0]["name"], "arguments": task.ground_truth[0]["arguments"]}
    assert "Tools:" in tokenizer.decode(sequence.prompt_ids)  # the prompt is never trained on


def test_tool_output_in_a_reviewed_trajectory_is_masked(tokenizer):
    task = Task(id="t", messages=[{"role": "user", "content": "Find Ana's email"}])
    turns = [
        {"role": "assistant", "content": '{"name": "lookup", "arguments": {}}'},
        {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "ana@example.com"},
        {"role": "assistant", "content": "It is ana@example.com"},
    ]
    sequence = conversation_sequence(tokenizer, JsonToolCallEnvironment(), task, turns)
    trained = tokenizer.decode([t for t, m in zip(sequence.completion_ids, sequence.completion_mask, strict=True) if m])
    masked = tokenizer.decode([t for t, m in zip(sequence.completion_ids, sequence.completion_mask, strict=True) if not m])
    assert "lookup" in trained and "It is ana@example.com" in trained
    assert "ana@example.com" in masked and "It is" not in masked


def test_step_items_cover_each_epoch_once():
    items = list(range(10))
    epoch = [i for step in range(1, 6) for i in step_items(items, step, 2, seed=3)]
    assert sorted(epoch) == items
    assert step_items(items, 4, 2, seed=3) == step_items(items, 4, 2, seed=3)


def test_sft_lowers_the_loss_and_checkpoints(tokenizer, tiny_model_dir, json_tasks_file, tmp_path, capsys):
    cfg = validate_run_config({
        "kind": "sft", "model": str(tiny_model_dir), "dataset": str(json_tasks_file),
        "device": "cpu", "bf16": False, "max_tasks": 4, "micro_batch_size": 2,
        "gradient_accumulation_steps": 2, "max_steps": 12, "num_epochs": 20,
        "learning_rate": 3e-3, "lr_scheduler": "constant", "eval_interval": 0,
        "checkpoint_interval": 6, "adapter": "full",
    })
    with EventWriter(tmp_path) as events:
        summary = execute(cfg, tmp_path, events, environment=JsonToolCallEnvironment())
    assert summary["step"] == 12
    events, _ = read_events(tmp_path / "events.jsonl")
    losses = [e["metrics"]["loss"] for e in events if e["type"] == "metric"]
    assert len(losses) == 12
    assert losses[-1] < losses[0] - 2.0, losses  # ~10.8 (uniform over 49k tokens) to ~7.4
    metrics = [e for e in events if e["type"] == "metric"][-1]["metrics"]
    for name in ("loss", "lr", "grad_norm", "tokens_per_second", "cost/trained_tokens"):
        assert metrics[name] is not None
    assert [e["step"] for e in events if e["type"] == "checkpoint"] == [6, 12]
    progress = capsys.readouterr().err
    assert "step 12/12 loss" in progress and "reward" not in progress  # no validation, no made-up reward


def test_prompt_is_left_truncated_like_rollouts_and_the_target_kept(tokenizer, json_tasks_file):
    task = load_tasks(json_tasks_file)[0]
    whole = ground_truth_sequence(tokenizer, JsonToolCallEnvironment(), task)
    clipped = ground_truth_sequence(tokenizer, JsonToolCallEnvironment(), task, max_prompt_tokens=40)
    assert clipped.prompt_ids == whole.prompt_ids[-40:]
    assert clipped.completion_ids == whole.completion_ids
    assert clipped.completion_mask == whole.completion_mask


def test_step_gradient_does_not_depend_on_how_the_step_is_split(tiny_model_dir, json_tasks_file, tmp_path):
    """Micro-batches are regrouped by length; every grouping must give the same gradient."""
    cfg = validate_run_config({"kind": "sft", "model": str(tiny_model_dir), "dataset": str(json_tasks_file),
                               "device": "cpu", "bf16": False, "adapter": "full", "max_tasks": 4})
    with EventWriter(tmp_path) as events:
        job = build_job(cfg, tmp_path, events, environment=JsonToolCallEnvironment())
    batch = sft_sequences(job)[:4]
    assert len({s.length for s in batch}) > 1  # padding differs between groupings
    loss_of = sft_micro_loss(job, job.tokenizer.pad_token_id)

    def gradient(groups):
        job.model.zero_grad(set_to_none=True)
        for group in groups:
            loss_of(group, batch)[0].backward()
        return torch.cat([p.grad.flatten() for p in job.model.parameters() if p.grad is not None])

    whole = gradient([batch])
    by_length = sorted(batch, key=lambda s: s.length)
    assert torch.allclose(gradient([by_length[:2], by_length[2:]]), whole, atol=1e-5)
    assert torch.allclose(gradient([[s] for s in batch]), whole, atol=1e-5)


def _right_turns(task):
    call = task.ground_truth[0]
    return [{"role": "assistant", "content": json.dumps({"name": call["name"], "arguments": call["arguments"]})}]


def _reviewed_file(path, tasks, extra_rows=()):
    rows = [{"task_id": t.id, "turns": _right_turns(t)} for t in tasks]
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, *extra_rows]))
    return path


def test_lora_sft_from_reviewed_trajectories_trains_only_the_adapters(
    tokenizer, tiny_model_dir, json_tasks_file, tmp_path
):
    from safetensors.torch import load_file

    tasks = [t for t in load_tasks(json_tasks_file) if t.split == "train"][:3]
    reviewed = _reviewed_file(tmp_path / "reviewed.jsonl", tasks)
    cfg = validate_run_config({
        "kind": "sft", "model": str(tiny_model_dir), "dataset": str(json_tasks_file),
        "sft_source": "reviewed", "reviewed_trajectories": str(reviewed), "adapter": "lora",
        "device": "cpu", "bf16": False, "micro_batch_size": 3, "max_steps": 8, "num_epochs": 20,
        "learning_rate": 1e-2, "lr_scheduler": "constant", "eval_interval": 0,
        "checkpoint_interval": 8, "lora_dropout": 0.0,
    })
    run_dir = tmp_path / "run"
    with EventWriter(run_dir) as events:
        execute(cfg, run_dir, events, environment=JsonToolCallEnvironment())
    written, _ = read_events(run_dir / "events.jsonl")
    losses = [e["metrics"]["loss"] for e in written if e["type"] == "metric"]
    # A random 49k-way head moves slowly under LoRA alone (it has no adapter): a trend, not a drop.
    assert len(losses) == 8 and sum(losses[-3:]) / 3 < losses[0] - 0.1, losses
    # 3 demonstrations per step: the reviewed rows, not the dataset's 24 training tasks.
    demonstrations = [conversation_sequence(tokenizer, JsonToolCallEnvironment(), t, _right_turns(t)) for t in tasks]
    first = next(e for e in written if e["type"] == "metric")
    assert first["metrics"]["cost/trained_tokens"] == sum(sum(d.completion_mask) for d in demonstrations)
    checkpoint = run_dir / "checkpoints" / "step_8"
    adapters = load_file(str(checkpoint / "adapter_model.safetensors"))
    assert adapters and all("lora_" in name for name in adapters)
    assert any(value.abs().sum() > 0 for name, value in adapters.items() if "lora_B" in name)  # B starts at 0
    assert not (checkpoint / "model.safetensors").exists()  # the base model is not copied


def test_reviewed_rows_without_an_assistant_turn_or_known_task_are_refused(
    tokenizer, tiny_model_dir, json_tasks_file, tmp_path
):
    from training.data import DataError

    tasks = [t for t in load_tasks(json_tasks_file) if t.split == "train"][:1]
    for bad, message in (
        ({"task_id": tasks[0].id, "turns": [{"role": "user", "content": "hi"}]}, r"reviewed.jsonl:2: no assistant turn"),
        ({"task_id": "nope", "turns": []}, r"reviewed.jsonl:2: task_id 'nope' is not in the dataset"),
    ):
        reviewed = _reviewed_file(tmp_path / "reviewed.jsonl", tasks, [bad])
        cfg = validate_run_config({
            "kind": "sft", "model": str(tiny_model_dir), "dataset": str(json_tasks_file),
            "sft_source": "reviewed", "reviewed_trajectories": str(reviewed), "device": "cpu",
            "bf16": False,
        })
        with EventWriter(tmp_path / "run") as events:
            job = build_job(cfg, tmp_path / "run", events, environment=JsonToolCallEnvironment())
        with pytest.raises(DataError, match=message):
            sft_sequences(job)
