"""Sharded jobs (parallel fsdp) on CPU (gloo): 2 processes train the weights 1 process trains.

FSDP2 shards the tiny Llama's base over the 2 ranks; LoRA adapters stay whole. Shapes are
chosen so that ranks hold uneven work (3 prompts, 3 micro-batches, a validation whose latency
probes run on rank 0 alone), which is what lock step must survive. The tolerance is
test_data_parallel's (1e-5 absolute on the adapters after two AdamW steps at lr 1e-3, where a
wrong update differs by ~1e-3): sharding changes where sums happen, not what is summed.
Measured on 2 CPU cores: LoRA adapters equal bitwise (they are whole on every rank and
summed as under ddp); full weights within 2.3e-7 (FSDP reduce-scatters the gradients and
the clipping norm is summed over shards, in another order than one process).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from test_data_parallel import (  # the helpers of the ddp tests, reused
    TOLERANCE,
    _adapter,
    _events,
    _grpo,
    _max_difference,
    _run,
    _train_samples,
    _write_config,
    common,  # noqa: F401  (fixture)
)

from training.config import validate_run_config
from training.distributed import FIT_FRACTION, resolve_parallel, training_bytes

GIB = 1 << 30


def _ok(result) -> None:
    assert result.returncode == 0, result.stderr[-3000:]


def _logs(run_dir: Path) -> list[str]:
    return [e["message"] for e in _events(run_dir) if e["type"] == "log"]


def _train_metrics(run_dir: Path, *names: str) -> list[tuple]:
    return [tuple(e["metrics"][n] for n in names)
            for e in _events(run_dir) if e["type"] == "metric" and e["split"] == "train"]


def _same_update_metrics(one: Path, two: Path) -> None:
    """grad_norm is what Adam's scale invariance would hide: gradients averaged over 2 ranks
    instead of summed would halve it (and train nearly the same weights)."""
    expected = _train_metrics(one, "grad_norm", "loss")
    assert len(expected) == 2
    assert _train_metrics(two, "grad_norm", "loss") == [pytest.approx(m, rel=1e-4, abs=1e-7) for m in expected]


def _resume_from(source: Path, step: int, target: Path) -> Path:
    """A run folder as `source` was after `step`: its checkpoint and nothing else."""
    name = f"step_{step}"
    shutil.copytree(source / "checkpoints" / name, target / "checkpoints" / name)
    return target


# --- the auto rule -----------------------------------------------------------------------------


def test_auto_is_ddp_where_one_replica_fits_a_device_and_fsdp_where_it_does_not():
    lora = validate_run_config({"kind": "grpo", "dataset": "t.jsonl", "num_processes": 2})
    full = validate_run_config({"kind": "sft", "dataset": "t.jsonl", "adapter": "full", "num_processes": 2})
    full_dpo = validate_run_config({"kind": "dpo", "dataset": "t.jsonl", "adapter": "full",
                                    "preference_pairs": "p.jsonl", "num_processes": 2})
    assert lora.parallel == "auto"
    eight_b_bf16, gpu = 16 * GIB, 80 * GIB
    # LoRA: the frozen base alone counts; 16 GiB on 80 fits, 70 GiB does not
    assert resolve_parallel(lora, eight_b_bf16, gpu) == "ddp"
    assert resolve_parallel(lora, 70 * GIB, gpu) == "fsdp"
    assert resolve_parallel(lora, int(FIT_FRACTION * gpu), gpu) == "ddp"
    # full fine-tuning: weights + gradients + two AdamW moments (4x), + a reference for DPO
    assert training_bytes(full, eight_b_bf16) == 4 * eight_b_bf16
    assert training_bytes(full_dpo, eight_b_bf16) == 5 * eight_b_bf16
    assert resolve_parallel(full, eight_b_bf16, gpu) == "fsdp"
    assert resolve_parallel(full, 2 * GIB, gpu) == "ddp"
    # what the runner loaded decides over the config (an adapter checkpoint trains LoRA)
    assert resolve_parallel(full, eight_b_bf16, gpu, frozen_base=True) == "ddp"
    # on the CPU auto is ddp whatever the size; an explicit choice is kept
    assert resolve_parallel(lora, 10**15, None) == "ddp"
    assert resolve_parallel(SimpleNamespace(parallel="fsdp"), 1, gpu) == "fsdp"
    assert resolve_parallel(SimpleNamespace(parallel="ddp"), 10**15, gpu) == "ddp"


def test_fsdp_is_a_valid_choice_at_any_process_count():
    assert validate_run_config({"kind": "grpo", "dataset": "t.jsonl", "parallel": "fsdp"}).num_processes == 1
    assert validate_run_config({"kind": "grpo", "dataset": "t.jsonl", "parallel": "fsdp",
                                "num_processes": 2}).parallel == "fsdp"


def test_a_gathered_state_keeps_a_tied_head_once_as_save_pretrained_does(tokenizer, tmp_path):
    from training.distributed import SINGLE
    from training.fsdp import full_model_state
    from training.models import tiny_llama

    model = tiny_llama(tokenizer, tied=True)
    model.save_pretrained(tmp_path)
    assert set(full_model_state(model, SINGLE)) == set(load_file(str(tmp_path / "model.safetensors")))


# --- whole jobs --------------------------------------------------------------------------------


@pytest.mark.torchrun
def test_fsdp_trains_the_grpo_weights_of_one_process_and_checkpoints_cross_over(common, tmp_path):  # noqa: F811
    """3 prompts over 2 ranks (uneven generation), 3 micro-batches (a filler on rank 1); then
    the fsdp checkpoint of step 1 resumes in 1 process and the 1-process one under fsdp."""
    values = {"num_prompts_per_step": 3}
    one = _write_config(tmp_path / "one.json", **_grpo(common, **values))
    sharded = _write_config(tmp_path / "fsdp.json", **_grpo(common, num_processes=2, parallel="fsdp", **values))
    _ok(_run(one, tmp_path / "one"))
    _ok(_run(sharded, tmp_path / "fsdp"))
    samples = _train_samples(tmp_path / "one")
    assert samples == _train_samples(tmp_path / "fsdp")
    assert len(samples) == 2 * 3 * 2 and len({s[-1] for s in samples}) > 1
    a, b = _adapter(tmp_path / "one", 2), _adapter(tmp_path / "fsdp", 2)
    assert _max_difference(a, b) < TOLERANCE
    assert max(float(t.abs().max()) for k, t in b.items() if "lora_B" in k) > 100 * TOLERANCE
    assert any("2 processes (fsdp, 99% of the weights sharded)" in m for m in _logs(tmp_path / "fsdp"))
    _same_update_metrics(tmp_path / "one", tmp_path / "fsdp")
    assert [e["type"] for e in _events(tmp_path / "fsdp")].count("done") == 1

    # fsdp -> 1 process, and 1 process -> fsdp: both end at the uninterrupted weights
    for source, config, name in ((tmp_path / "fsdp", one, "to-one"), (tmp_path / "one", sharded, "to-fsdp")):
        resumed = _resume_from(source, 1, tmp_path / name)
        _ok(_run(config, resumed))
        assert any("resuming from checkpoint step_1" in m for m in _logs(resumed))
        assert _max_difference(a, _adapter(resumed, 2)) < TOLERANCE, name


@pytest.mark.torchrun
def test_fsdp_trains_the_sft_weights_of_one_process_with_a_sharded_validation(common, tmp_path):  # noqa: F811
    """3 micro-batches per step over 2 ranks; the validation's latency probes run on rank 0 only."""
    sft = {"kind": "sft", "sft_source": "ground_truth", "micro_batch_size": 2, "gradient_accumulation_steps": 3,
           "max_steps": 2, "eval_interval": 2, "eval_latency_tasks": 4, "checkpoint_interval": 0,
           "max_completion_length": 32, **common}
    _ok(_run(_write_config(tmp_path / "one.json", **sft), tmp_path / "one"))
    _ok(_run(_write_config(tmp_path / "fsdp.json", **sft, num_processes=2, parallel="fsdp"), tmp_path / "fsdp"))
    a, b = _adapter(tmp_path / "one", 2), _adapter(tmp_path / "fsdp", 2)
    assert _max_difference(a, b) < TOLERANCE
    assert max(float(t.abs().max()) for k, t in b.items() if "lora_B" in k) > 100 * TOLERANCE

    def validation(run_dir: Path) -> list[tuple]:
        return sorted((e["step"], e["task_id"], json.dumps(e["turns"]))
                      for e in _events(run_dir) if e["type"] == "trajectory")

    assert validation(tmp_path / "one") == validation(tmp_path / "fsdp") != []
    metrics = [e["metrics"] for e in _events(tmp_path / "fsdp") if e["type"] == "metric" and e["split"] != "train"]
    assert metrics and all(m.get("latency_p50") is not None for m in metrics)


@pytest.mark.torchrun
def test_fsdp_trains_the_dpo_weights_of_one_process(common, json_tasks_file, tmp_path):  # noqa: F811
    tasks = [json.loads(line) for line in json_tasks_file.read_text().splitlines()][:6]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"task_id": t["id"], "chosen": f"yes {i}", "rejected": "no"}) + "\n"
                             for i, t in enumerate(tasks)))
    dpo = {"kind": "dpo", "preference_pairs": str(pairs), "micro_batch_size": 1, "gradient_accumulation_steps": 3,
           "max_steps": 2, "eval_interval": 0, "checkpoint_interval": 0, **common}
    _ok(_run(_write_config(tmp_path / "one.json", **dpo), tmp_path / "one"))
    _ok(_run(_write_config(tmp_path / "fsdp.json", **dpo, num_processes=2, parallel="fsdp"), tmp_path / "fsdp"))
    a, b = _adapter(tmp_path / "one", 2), _adapter(tmp_path / "fsdp", 2)
    assert _max_difference(a, b) < TOLERANCE
    assert max(float(t.abs().max()) for k, t in b.items() if "lora_B" in k) > 100 * TOLERANCE


def _full_weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / f"step_{step}" / "model.safetensors"))


@pytest.mark.torchrun
def test_fsdp_full_fine_tuning_shards_weights_gradients_and_adamw_and_checkpoints_cross_over(common, tmp_path):  # noqa: F811
    """Every weight trains and is sharded; FSDP sums the gradients itself. The checkpoint is
    the full model and a full optimizer state, which 1 process resumes, and fsdp resumes one
    process's."""
    sft = {"kind": "sft", "adapter": "full", "sft_source": "ground_truth", "micro_batch_size": 2,
           "gradient_accumulation_steps": 3, "max_steps": 2, "eval_interval": 0, "checkpoint_interval": 1,
           "keep_top_k": 3, "checkpoint_metric": "train/lr", "max_completion_length": 32, **common}
    one = _write_config(tmp_path / "one.json", **sft)
    sharded = _write_config(tmp_path / "fsdp.json", **sft, num_processes=2, parallel="fsdp")
    _ok(_run(one, tmp_path / "one"))
    _ok(_run(sharded, tmp_path / "fsdp"))
    start = load_file(str(Path(common["model"]) / "model.safetensors"))
    a, b = _full_weights(tmp_path / "one", 2), _full_weights(tmp_path / "fsdp", 2)
    assert _max_difference(a, b) < TOLERANCE
    assert _max_difference({k: start[k] for k in b}, b) > 100 * TOLERANCE
    assert any("2 processes (fsdp, 100% of the weights sharded)" in m for m in _logs(tmp_path / "fsdp"))
    _same_update_metrics(tmp_path / "one", tmp_path / "fsdp")
    for source, config, name in ((tmp_path / "fsdp", one, "to-one"), (tmp_path / "one", sharded, "to-fsdp")):
        resumed = _resume_from(source, 1, tmp_path / name)
        _ok(_run(config, resumed))
        assert any("resuming from checkpoint step_1" in m for m in _logs(resumed))
        assert _max_difference(a, _full_weights(resumed, 2)) < TOLERANCE, name


@pytest.mark.torchrun
def test_a_sharded_eval_job_measures_what_one_process_measures(common, tmp_path):  # noqa: F811
    evaluation = {"kind": "eval", "eval_latency_tasks": 2, **common}
    _ok(_run(_write_config(tmp_path / "one.json", **evaluation), tmp_path / "one"))
    _ok(_run(_write_config(tmp_path / "two.json", **evaluation, num_processes=2, parallel="fsdp"),
             tmp_path / "two"))

    def measured(run_dir: Path) -> tuple:
        events = _events(run_dir)
        rows = sorted((e["task_id"], json.dumps(e["turns"])) for e in events if e["type"] == "trajectory")
        metric = next(e["metrics"] for e in events if e["type"] == "metric")
        return rows, metric["success_rate"], metric["reward_mean"]

    assert measured(tmp_path / "one") == measured(tmp_path / "two")
