"""DPO: the loss formula, and training on pairs separates chosen from rejected."""

from __future__ import annotations

import json
import math

import pytest
import torch

from environments.json_tool_call import JsonToolCallEnvironment
from training.cli import execute
from training.config import validate_run_config
from training.data import load_tasks
from training.dpo import dpo_loss
from training.events import EventWriter, read_events


def test_dpo_loss_is_log2_at_the_reference_and_falls_with_the_margin():
    zero = torch.zeros(2)
    losses, rewards = dpo_loss(zero, zero, zero, zero, beta=0.1)
    assert torch.allclose(losses, torch.full((2,), math.log(2)))
    losses, rewards = dpo_loss(torch.tensor([-1.0]), torch.tensor([-5.0]),
                               torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.5)
    assert rewards["chosen"].item() == 0.5 and rewards["rejected"].item() == -1.5
    assert losses.item() == -torch.nn.functional.logsigmoid(torch.tensor(2.0)).item()


@pytest.mark.parametrize("adapter", ["lora", "full"])
def test_dpo_training_prefers_the_chosen_answers(tiny_model_dir, json_tasks_file, tmp_path, adapter):
    """The loss leaves log 2 only if the reference stays put while the policy moves: LoRA's
    reference is the model with adapters disabled, full fine-tuning's a frozen copy."""
    tasks = [t for t in load_tasks(json_tasks_file) if t.split == "train"][:4]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(
        json.dumps({
            "task_id": t.id,
            "chosen": json.dumps({"name": t.ground_truth[0]["name"],
                                  "arguments": t.ground_truth[0]["arguments"]}),
            "rejected": {"turns": [{"role": "assistant", "content": "I cannot help with that."}]},
        }) + "\n"
        for t in tasks
    ))
    cfg = validate_run_config({
        "kind": "dpo", "model": str(tiny_model_dir), "dataset": str(json_tasks_file),
        "preference_pairs": str(pairs), "device": "cpu", "bf16": False, "micro_batch_size": 2,
        "gradient_accumulation_steps": 2, "max_steps": 8, "num_epochs": 8,
        "learning_rate": 3e-3, "lr_scheduler": "constant", "eval_interval": 0,
        "checkpoint_interval": 0, "lora_dropout": 0.0, "dpo_beta": 0.1, "adapter": adapter,
    })
    with EventWriter(tmp_path / "run") as events:
        execute(cfg, tmp_path / "run", events, environment=JsonToolCallEnvironment())
    events, _ = read_events(tmp_path / "run" / "events.jsonl")
    metrics = [e["metrics"] for e in events if e["type"] == "metric"]
    assert abs(metrics[0]["loss"] - math.log(2)) < 1e-3  # step 1 starts at the reference
    assert metrics[-1]["loss"] < 0.5 * math.log(2)
    assert metrics[-1]["rewards/margins"] > 0 and metrics[-1]["rewards/accuracies"] == 1.0
