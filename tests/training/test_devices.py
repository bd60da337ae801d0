"""Device and dtype discipline: what broke on the first GPU run, reproduced where a CPU can.

The GPU-only checks are marked `gpu` and skip without CUDA; `python -m training gpu-check`
is the one to run first on a GPU worker (tests/training/test_gpu_check.py runs it on a CPU).
"""

from __future__ import annotations

import json

import pytest
import torch

from environments.json_tool_call import JsonToolCallEnvironment
from training.cli import execute
from training.config import validate_run_config
from training.events import EventWriter, read_events
from training.models import load_model_and_tokenizer, tiny_llama
from training.rollout import HFGenerateEngine, SamplingParams, _TokenLogprobRecorder, bucketed
from training.runner import build_job, weights_dtype
from training.system_metrics import SystemMonitor

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PROMPTS = ["Call the weather tool for Paris.", "Say hi."]


def test_logprob_recorder_gathers_on_the_logits_device_whatever_the_index_device():
    """The H200 crash: finish() got a host index for device logits. Meta tensors stand in for
    the GPU here: a gather that mixes meta and CPU tensors raises just as CUDA's does."""
    recorder = _TokenLogprobRecorder(temperature=1.0)
    scores = torch.empty(4, 10, device="meta")
    recorder(torch.zeros(4, 3, dtype=torch.long, device="meta"), scores)
    recorder(torch.zeros(4, 4, dtype=torch.long, device="meta"), scores)
    logprobs = recorder.finish(torch.zeros(4, dtype=torch.long))  # a host index, as before the fix
    assert logprobs.device.type == "meta" and logprobs.shape == (4, 2)


def test_bf16_autocast_generation_of_a_float32_model_with_shared_prefill(tokenizer):
    """Under autocast a float32 model caches float32 keys and bf16 values; transformers up to
    5.17 allocated a static cache in one dtype and failed in index_copy_."""
    model = tiny_llama(tokenizer, seed=0)
    engine = HFGenerateEngine(model, tokenizer, "cpu", autocast=True)
    groups = engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=6, n=3, seed=0))
    assert [len(g) for g in groups] == [3, 3]
    assert all(len(g.completion_ids) == len(g.logprobs) > 0 for group in groups for g in group)


def test_bf16_model_generates_and_its_cache_is_bf16(tokenizer):
    """A bf16 base (what a GPU LoRA run loads) writes one dtype; sampling matches its logprobs."""
    model = tiny_llama(tokenizer, seed=0).to(torch.bfloat16)
    engine = HFGenerateEngine(model, tokenizer, "cpu", autocast=True)
    cache = engine._prefill(*_padded(tokenizer), n=2, max_new_tokens=4)
    assert cache.layers[0].keys.dtype == torch.bfloat16 == cache.layers[0].values.dtype
    groups = engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=4, n=2, seed=0))
    assert all(all(lp <= 0 for lp in g.logprobs) for group in groups for g in group)


def _padded(tokenizer):
    from training.rollout import left_pad

    return left_pad([tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS], tokenizer.pad_token_id, "cpu")


def test_generation_never_compiles_unless_asked(tokenizer, tiny_model):
    assert HFGenerateEngine(tiny_model, tokenizer)._generation_config(SamplingParams()).disable_compile is True
    compiled = HFGenerateEngine(tiny_model, tokenizer, compile=True)
    assert compiled._generation_config(SamplingParams()).disable_compile is False


@pytest.mark.parametrize(("length", "bucket"), [(1, 64), (64, 64), (65, 128), (300, 512), (1024, 1024)])
def test_compiled_cache_lengths_are_bucketed_to_powers_of_two(length, bucket):
    assert bucketed(length) == bucket


def test_models_load_without_hub_kernels_and_without_hub_lookups(tiny_model_dir, monkeypatch):
    """transformers 5.x turns Hub kernels on for every from_pretrained model; model.train()
    then downloads kernels. A folder must load and train with the Hub unreachable."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, _ = load_model_and_tokenizer(str(tiny_model_dir))
    assert not getattr(model, "use_kernels", False)
    model.train()  # where the offline GPU worker failed


def _job_config(tiny_model_dir, json_tasks_file, **values):
    return validate_run_config({"kind": "grpo", "model": str(tiny_model_dir), "dataset": str(json_tasks_file),
                                "device": "cpu", "bf16": False, "max_completion_length": 8,
                                "num_prompts_per_step": 2, "num_generations_per_prompt": 2, "max_steps": 1,
                                "eval_interval": 0, "checkpoint_interval": 0, **values})


@pytest.mark.parametrize(
    ("values", "device", "autocast", "expected"),
    [
        ({}, "cpu", True, torch.float32),  # the CPU recipe's numbers were measured in float32
        ({}, "cuda", True, torch.bfloat16),  # a frozen LoRA base on a GPU
        ({"kind": "eval"}, "cuda", True, torch.bfloat16),
        ({"adapter": "full"}, "cuda", True, torch.float32),  # master weights of full fine-tuning
        ({}, "cuda", False, torch.float32),  # bf16 off
        ({"base_dtype": "bfloat16"}, "cpu", False, torch.bfloat16),
        ({"base_dtype": "float32"}, "cuda", True, torch.float32),
    ],
)
def test_weights_dtype_rule(tiny_model_dir, json_tasks_file, values, device, autocast, expected):
    cfg = _job_config(tiny_model_dir, json_tasks_file, **values)
    assert weights_dtype(cfg, torch.device(device), autocast) == expected


def test_grpo_step_on_a_bf16_base_keeps_adapters_optimizer_and_loss_in_float32(tiny_model_dir, json_tasks_file, tmp_path):
    """The GPU layout (bf16 frozen base, float32 LoRA) on a CPU: the same code path, dtypes checked."""
    cfg = _job_config(tiny_model_dir, json_tasks_file, base_dtype="bfloat16", bf16=True)
    with EventWriter(tmp_path) as events:
        job = build_job(cfg, tmp_path, events, environment=JsonToolCallEnvironment())
        from training.grpo import GRPOTrainer

        trainer = GRPOTrainer(job)
        metrics = trainer.step(1)
    frozen = {p.dtype for p in job.model.parameters() if not p.requires_grad}
    trained = {p.dtype for p in job.model.parameters() if p.requires_grad}
    assert frozen == {torch.bfloat16} and trained == {torch.float32}
    states = [s for s in trainer.optimizer.state.values() if s]
    assert states and all(s["exp_avg"].dtype == torch.float32 for s in states)
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] >= 0


def test_every_step_and_evaluation_records_system_metrics_and_the_time_split(tiny_model_dir, json_tasks_file, tmp_path):
    cfg = _job_config(tiny_model_dir, json_tasks_file, eval_interval=1, max_steps=1)
    with EventWriter(tmp_path) as events:
        execute(cfg, tmp_path, events, environment=JsonToolCallEnvironment())
    metrics, _ = read_events(tmp_path / "events.jsonl")
    by_split = {(e["split"], e["step"]): e["metrics"] for e in metrics if e["type"] == "metric"}
    train, validation = by_split[("train", 1)], by_split[("validation", 1)]
    for values in (train, validation):
        assert values["system/memory_rss_mb"] > 10 and values["system/cpu_percent"] >= 0
        assert values["generation/tokens_per_second"] > 0 and values["timing/scoring"] >= 0
    parts = train["timing/generation"] + train["timing/scoring"] + train["timing/training"]
    assert parts <= train["timing/step"] + 1e-6 and parts > 0.5 * train["timing/step"]
    assert not any(k.startswith("system/gpu") for k in train)  # a CPU run invents no GPU numbers


def test_system_monitor_reports_cpu_use_of_the_phase_only():
    """A busy phase after an idle one (and the reverse) reads its own use, not the process's total.

    The busy phase spins until it has used 0.3 s of CPU; on a loaded machine its wall time
    grows, so only "well above the idle phase" is asserted, not "near one core"."""
    import resource
    import time

    def cpu_seconds() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    monitor = SystemMonitor("cpu")
    monitor.start()
    time.sleep(0.3)
    idle = monitor.sample()["system/cpu_percent"]
    monitor.start()
    spent = cpu_seconds()
    while cpu_seconds() - spent < 0.3:
        sum(range(10_000))
    busy = monitor.sample()["system/cpu_percent"]
    assert idle < 10 and busy > 10 and busy > 3 * idle


@pytest.mark.gpu
@cuda
def test_engine_on_cuda_returns_host_lists_and_float32_logprobs(tokenizer):
    model = tiny_llama(tokenizer, seed=0).to("cuda", torch.bfloat16)
    engine = HFGenerateEngine(model, tokenizer, "cuda", autocast=True)
    groups = engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=8, n=4, seed=0))
    assert all(isinstance(g.logprobs[0], float) for group in groups for g in group)


@pytest.mark.gpu
@cuda
def test_losses_on_cuda_are_float32_with_a_bf16_model(tokenizer):
    from training.losses import policy_loss

    logp = torch.randn(4, 6, device="cuda", dtype=torch.float32, requires_grad=True)
    loss, _ = policy_loss(logp, logp.detach(), torch.randn(4, device="cuda"), torch.ones(4, 6, device="cuda"),
                          loss_type="dapo", eps_low=0.2, eps_high=0.2, max_completion_length=6,
                          num_items_in_batch=24.0)
    assert loss.dtype == torch.float32 and loss.device.type == "cuda"


@pytest.mark.gpu
@cuda
def test_grpo_step_on_cuda_with_lora_and_bf16(tiny_model_dir, json_tasks_file, tmp_path):
    cfg = _job_config(tiny_model_dir, json_tasks_file, device="cuda", bf16="auto")
    with EventWriter(tmp_path) as events:
        execute(cfg, tmp_path, events, environment=JsonToolCallEnvironment())
    events_read, _ = read_events(tmp_path / "events.jsonl")
    train = [e["metrics"] for e in events_read if e["type"] == "metric" and e["split"] == "train"]
    assert train and train[0]["system/gpu_memory_peak_mb"] > 0
    assert json.dumps(train)  # finite, serialisable metrics
