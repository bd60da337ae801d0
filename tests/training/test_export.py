"""`python -m training export`: LoRA merged into the base model, loadable without peft."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from environments.json_tool_call import JsonToolCallEnvironment
from training.cli import main
from training.config import validate_run_config
from training.events import EventWriter
from training.export import ExportError, export_checkpoint
from training.runner import build_job, save_checkpoint


def _trained_lora_checkpoint(tiny_model_dir, json_tasks_file, run_dir):
    cfg = validate_run_config({"kind": "sft", "model": str(tiny_model_dir), "device": "cpu",
                               "dataset": str(json_tasks_file), "lora_r": 4})
    with EventWriter(run_dir) as events:
        job = build_job(cfg, run_dir, events, environment=JsonToolCallEnvironment())
        torch.manual_seed(0)
        with torch.no_grad():  # LoRA B starts at zero; give the adapters a visible effect
            for name, param in job.model.named_parameters():
                if "lora_B" in name:
                    param.normal_(std=0.5)
        optimizer = torch.optim.AdamW([p for p in job.model.parameters() if p.requires_grad])
        checkpoint = save_checkpoint(job, 1, optimizer, None)
    return job, checkpoint.path


def test_export_merges_lora_and_gives_the_same_logits(tiny_model_dir, json_tasks_file, tmp_path):
    job, checkpoint = _trained_lora_checkpoint(tiny_model_dir, json_tasks_file, tmp_path / "run")
    out = tmp_path / "exported"
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(out)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([job.tokenizer.encode("Schedule a meeting with Felix on Friday")])
    job.model.eval()
    with torch.no_grad():
        expected = job.model(ids).logits
        got = merged(ids).logits
        untouched = base(ids).logits
    assert not hasattr(merged, "peft_config")
    assert torch.allclose(got, expected, atol=1e-4)
    assert not torch.allclose(untouched, expected, atol=1e-3)  # the adapters did matter
    assert (out / "tokenizer_config.json").is_file()


def test_export_refuses_a_folder_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="neither LoRA adapters nor a full model"):
        export_checkpoint(tmp_path / "empty", tmp_path / "out")
    assert main(["export", "--checkpoint", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 1


def test_eval_of_a_lora_checkpoint_runs_the_merged_model(tiny_model_dir, json_tasks_file, tmp_path):
    """Eval jobs fold adapters in: same logits as base + adapters, without the LoRA overhead."""
    job, checkpoint = _trained_lora_checkpoint(tiny_model_dir, json_tasks_file, tmp_path / "run")
    cfg = validate_run_config({"kind": "eval", "model": str(tiny_model_dir), "device": "cpu",
                               "dataset": str(json_tasks_file), "init_checkpoint": str(checkpoint),
                               "eval_split": "train"})
    with EventWriter(tmp_path / "eval") as events:
        evaluation = build_job(cfg, tmp_path / "eval", events, environment=JsonToolCallEnvironment())
    ids = torch.tensor([job.tokenizer.encode("Schedule a meeting with Felix on Friday")])
    job.model.eval()
    with torch.no_grad():
        expected = job.model(ids).logits
        got = evaluation.model(ids).logits
    assert not evaluation.is_lora and not hasattr(evaluation.model, "peft_config")
    assert torch.allclose(got, expected, atol=1e-4)
