"""`python -m training gpu-check`: prove a new worker trains, through the path a job takes.

On a GPU worker (or `--device cpu` anywhere) it prints the environment, then runs, each as
`python -m training run` would (training.cli.run_command on a run.json, in this process so
that peak GPU memory can be read per phase):

    eval      8 tasks of the validation split
    sft       3 steps
    grpo      3 steps of 8 prompts x 8 generations x 256 new tokens, from the SFT checkpoint
    dpo       2 steps on preference pairs made from the tasks
    resume    the GRPO run again with one more step: it must continue from its checkpoint
    export    the GRPO checkpoint merged into a plain model folder, then loaded back

and one table: phase, status, seconds, seconds per step, generated and trained tokens/s,
peak GPU memory and mean GPU utilisation. It exits 1 when any phase failed, naming the
phase and its error. Everything is offline (HF_HUB_OFFLINE=1): the model is a folder.

Models: `tiny` (the default: a random 2-layer Llama over the SmolLM2 tokenizer), the
random-weight shapes `smollm2-shape` (SmolLM2-135M) and `qwen2.5-1.5b-shape` (Qwen2.5-1.5B
over the same tokenizer), `smollm2` (the offline default's real weights), or a model folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PHASES = ("eval", "sft", "grpo", "dpo", "resume", "export")
SHAPES = ("tiny", "smollm2-shape", "qwen2.5-1.5b-shape")


@dataclass
class Sizes:
    """How big each phase is; the defaults are the issue's 8 x 8 x 256."""

    prompts: int = 8
    generations: int = 8
    max_new_tokens: int = 256
    eval_tasks: int = 8
    sft_steps: int = 3
    grpo_steps: int = 3
    dpo_steps: int = 2
    micro_batch_size: int = 8


@dataclass
class PhaseResult:
    phase: str
    status: str = "skipped"
    seconds: float = 0.0
    step_seconds: float | None = None
    generated_tokens_per_second: float | None = None
    trained_tokens_per_second: float | None = None
    peak_gpu_memory_mb: float | None = None
    gpu_utilization_percent: float | None = None
    error: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _driver_version() -> str:
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return "unknown (no nvidia-smi)"
    try:
        out = subprocess.run([nvidia_smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"


def environment(device: str) -> dict[str, Any]:
    """What the check ran on: the rows a person pastes into an issue or docs/benchmarks.md."""
    import torch

    from training.models import bf16_supported

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda runtime": torch.version.cuda or "none",
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "device": device,
        "bf16": "native" if bf16_supported(device) else "no (emulated or absent)",
        "hub kernels": {"0": "off", "1": "on"}.get(os.environ.get("USE_HUB_KERNELS", ""), "transformers' default"),
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "unset"),
    }
    if device == "cuda" and torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        info.update({
            "gpu": f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}",
            "driver": _driver_version(),
            "gpu memory free / total (GiB)": f"{free / 2**30:.1f} / {total / 2**30:.1f}",
        })
    else:
        info["cpu"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    return info


# ---------------------------------------------------------------------------------------
# The model and the data
# ---------------------------------------------------------------------------------------


def _shape_config(name: str, tokenizer: Any) -> Any:
    """transformers config of a random-weight model shaped like a real one."""
    from transformers import LlamaConfig, Qwen2Config

    tokens = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
              "pad_token_id": tokenizer.pad_token_id, "vocab_size": len(tokenizer)}
    if name == "smollm2-shape":  # HuggingFaceTB/SmolLM2-135M-Instruct's config.json
        return LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                           num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
                           rms_norm_eps=1e-5, tie_word_embeddings=True, **tokens)
    # Qwen/Qwen2.5-1.5B-Instruct's config.json, over the SmolLM2 vocabulary
    return Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                       num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, **tokens)


def prepare_model(spec: str, folder: Path, device: str) -> str:
    """A model folder (or the offline default's alias) for the phases' configs.

    Random shapes are initialised on `device` (a 1.5B model initialises in seconds on a GPU,
    minutes on two CPU cores) and saved once, as a job would find them.
    """
    if spec not in SHAPES:
        return spec
    if (folder / "config.json").is_file():
        return str(folder)
    import torch
    from transformers import AutoModelForCausalLM

    from training.models import default_tokenizer, tiny_llama

    tokenizer = default_tokenizer()
    torch.manual_seed(0)
    if spec == "tiny":
        model = tiny_llama(tokenizer, seed=0)
    else:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(_shape_config(spec, tokenizer))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def write_data(folder: Path, sizes: Sizes) -> tuple[Path, Path]:
    """tasks.jsonl (train + validation) and DPO pairs.jsonl: ground truth chosen, a refusal rejected."""
    from environments.json_tool_call_tasks import workplace_json_tasks

    tasks = workplace_json_tasks(400, seed=0)
    train = [t for t in tasks if t.split == "train"][: max(sizes.prompts * (sizes.grpo_steps + 1), 16)]
    validation = [t for t in tasks if t.split == "validation"][: sizes.eval_tasks]
    folder.mkdir(parents=True, exist_ok=True)
    tasks_file = folder / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in train + validation))
    pairs_file = folder / "pairs.jsonl"
    pairs_file.write_text("".join(
        json.dumps({"task_id": t.id,
                    "chosen": json.dumps({"name": t.ground_truth[0]["name"], "arguments": t.ground_truth[0]["arguments"]}),
                    "rejected": "I cannot help with that."}) + "\n"
        for t in train[: sizes.micro_batch_size * sizes.dpo_steps]
    ))
    return tasks_file, pairs_file


# ---------------------------------------------------------------------------------------
# Phases
# ---------------------------------------------------------------------------------------


def phase_configs(model: str, tasks: Path, pairs: Path, device: str, sizes: Sizes) -> dict[str, dict[str, Any]]:
    """The run.json of each training phase, as the worker would write them."""
    common = {"model": model, "dataset": str(tasks), "environment": "json_tool_call", "device": device,
              "bf16": "auto", "eval_interval": 0, "seed": 0, "max_completion_length": sizes.max_new_tokens,
              "micro_batch_size": sizes.micro_batch_size, "gradient_accumulation_steps": 1}
    return {
        "eval": {**common, "kind": "eval", "eval_split": "validation", "eval_latency_tasks": 1},
        "sft": {**common, "kind": "sft", "max_steps": sizes.sft_steps, "num_epochs": 100, "checkpoint_interval": 0},
        "grpo": {**common, "kind": "grpo", "max_steps": sizes.grpo_steps, "num_prompts_per_step": sizes.prompts,
                 "num_generations_per_prompt": sizes.generations, "checkpoint_interval": sizes.grpo_steps,
                 **_grpo_batch_split(sizes)},
        "dpo": {**common, "kind": "dpo", "preference_pairs": str(pairs), "max_steps": sizes.dpo_steps,
                "num_epochs": 100, "checkpoint_interval": 0},
    }


def _grpo_batch_split(sizes: Sizes) -> dict[str, int]:
    """Micro-batches that add up to the generation batch (one update per generation batch)."""
    batch = sizes.prompts * sizes.generations
    micro = sizes.micro_batch_size if batch % sizes.micro_batch_size == 0 else batch
    return {"micro_batch_size": micro, "gradient_accumulation_steps": batch // micro}


def _events(run_dir: Path) -> list[dict[str, Any]]:
    from training.events import read_events

    path = run_dir / "events.jsonl"
    return read_events(path)[0] if path.is_file() else []


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _train_metrics(events: list[dict[str, Any]], name: str) -> list[float]:
    return [float(e["metrics"][name]) for e in events
            if e["type"] == "metric" and e.get("split") == "train" and e["metrics"].get(name) is not None]


def _all_metrics(events: list[dict[str, Any]], name: str) -> list[float]:
    return [float(e["metrics"][name]) for e in events
            if e["type"] == "metric" and e["metrics"].get(name) is not None]


def summarise_run(result: PhaseResult, events: list[dict[str, Any]]) -> None:
    """Fill the table's rates from the phase's own metric events; its error from its error event."""
    errors = [e["message"] for e in events if e["type"] == "error"]
    if errors:
        result.status, result.error = "failed", errors[-1]
    result.step_seconds = _mean(_train_metrics(events, "timing/step"))
    result.generated_tokens_per_second = _mean(_all_metrics(events, "generation/tokens_per_second"))
    if result.phase in ("sft", "dpo"):
        result.trained_tokens_per_second = _mean(_train_metrics(events, "tokens_per_second"))
    trained = _train_metrics(events, "cost/trained_tokens")
    times = _train_metrics(events, "timing/training")
    if result.phase in ("grpo", "resume") and trained and times:
        result.trained_tokens_per_second = sum(trained) / max(sum(times), 1e-9)
    result.gpu_utilization_percent = _mean(_all_metrics(events, "system/gpu_utilization_percent"))


class _GpuPeak:
    """Peak memory allocated on the GPU between enter and exit (None on a CPU)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.peak_mb: float | None = None

    def __enter__(self) -> _GpuPeak:
        if self.device == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device == "cuda":
            import torch

            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20


def run_phase(name: str, device: str, work: Callable[[PhaseResult], None]) -> PhaseResult:
    """Time one phase and catch its failure; a phase never stops the ones after it."""
    result = PhaseResult(name, status="ok")
    started = time.perf_counter()
    with _GpuPeak(device) as peak:
        try:
            work(result)
        except Exception as exc:  # the table reports it; the exit status says the check failed
            result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - started
    result.peak_gpu_memory_mb = peak.peak_mb
    _free_gpu_memory(device)
    return result


def _free_gpu_memory(device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def _training_phase(config: dict[str, Any], out: Path) -> Callable[[PhaseResult], None]:
    """One run from scratch. An earlier check's folder is removed first: `python -m training run`
    would resume it (a finished run trains nothing), and the phase would time no step."""
    def work(result: PhaseResult) -> None:
        from training.cli import run_command

        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        config_path = out / "run.json"
        config_path.write_text(json.dumps(config, indent=2))
        code = run_command(str(config_path), str(out))
        events = _events(out)
        summarise_run(result, events)
        if code != 0 and result.status == "ok":
            result.status, result.error = "failed", f"exit status {code}"
        result.detail["events"] = len(events)

    return work


def _resume_phase(config: dict[str, Any], out: Path) -> Callable[[PhaseResult], None]:
    """The GRPO run once more with one more step: it must say it resumed and train that step."""
    grpo_step = config["max_steps"]

    def work(result: PhaseResult) -> None:
        from training.cli import run_command

        before = len(_events(out))
        config_path = out / "run.resume.json"
        config_path.write_text(json.dumps({**config, "max_steps": grpo_step + 1}, indent=2))
        code = run_command(str(config_path), str(out))
        events = _events(out)[before:]
        summarise_run(result, events)
        resumed = any(e["type"] == "log" and f"resuming from checkpoint step_{grpo_step}" in e.get("message", "")
                      for e in events)
        steps = sorted({e["step"] for e in events if e["type"] == "metric" and e.get("split") == "train"})
        if result.status == "ok" and (code != 0 or not resumed or steps != [grpo_step + 1]):
            result.status = "failed"
            result.error = (f"expected to resume from step_{grpo_step} and train step {grpo_step + 1}; "
                            f"resumed={resumed}, trained steps {steps}, exit status {code}")

    return work


def _export_phase(grpo_dir: Path, out: Path) -> Callable[[PhaseResult], None]:
    def work(result: PhaseResult) -> None:
        from transformers import AutoModelForCausalLM

        from training.checkpoints import latest_checkpoint
        from training.export import export_checkpoint

        checkpoint = latest_checkpoint(grpo_dir)
        if checkpoint is None:
            raise RuntimeError(f"no checkpoint in {grpo_dir} to export (did grpo fail?)")
        if out.exists():
            shutil.rmtree(out)
        folder = export_checkpoint(checkpoint, out)
        merged = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        result.detail["parameters"] = sum(p.numel() for p in merged.parameters())
        del merged

    return work


def run_check(model: str, out: Path, device: str, sizes: Sizes, *, only: tuple[str, ...] = PHASES) -> list[PhaseResult]:
    """Every phase in order; a later phase uses an earlier one's checkpoint when it has one."""
    tasks, pairs = write_data(out / "data", sizes)
    configs = phase_configs(model, tasks, pairs, device, sizes)
    sft_checkpoint = out / "sft" / "checkpoints" / f"step_{sizes.sft_steps}"
    plan: list[tuple[str, Callable[[], Callable[[PhaseResult], None]]]] = [
        ("eval", lambda: _training_phase(configs["eval"], out / "eval")),
        ("sft", lambda: _training_phase(configs["sft"], out / "sft")),
        ("grpo", lambda: _training_phase(_from_checkpoint(configs["grpo"], sft_checkpoint), out / "grpo")),
        ("dpo", lambda: _training_phase(configs["dpo"], out / "dpo")),
        ("resume", lambda: _resume_phase(_from_checkpoint(configs["grpo"], sft_checkpoint), out / "grpo")),
        ("export", lambda: _export_phase(out / "grpo", out / "merged")),
    ]
    results = []
    for name, make in plan:
        if name in only:
            result = run_phase(name, device, make())
            _print_progress(result)
            results.append(result)
    return results


def _from_checkpoint(config: dict[str, Any], checkpoint: Path) -> dict[str, Any]:
    """GRPO starts from the SFT checkpoint when SFT wrote one, as an experiment does."""
    return {**config, "init_checkpoint": str(checkpoint)} if (checkpoint / "COMPLETE").is_file() else config


def _print_progress(result: PhaseResult) -> None:
    line = f"[gpu-check] {result.phase}: {result.status} in {result.seconds:.1f} s"
    print(line + (f" - {result.error}" if result.error else ""), file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------

COLUMNS = ("phase", "status", "seconds", "s/step", "gen tok/s", "train tok/s", "peak GPU MiB", "GPU util %")


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table_rows(results: list[PhaseResult]) -> Iterator[tuple[str, ...]]:
    for r in results:
        yield (r.phase, r.status, _cell(r.seconds), _cell(r.step_seconds, 2), _cell(r.generated_tokens_per_second, 0),
               _cell(r.trained_tokens_per_second, 0), _cell(r.peak_gpu_memory_mb, 0),
               _cell(r.gpu_utilization_percent, 0))


def markdown_table(results: list[PhaseResult]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(results)]
    return "\n".join(lines)


def report(info: dict[str, Any], results: list[PhaseResult], model: str, sizes: Sizes) -> str:
    head = [f"{key}: {value}" for key, value in info.items()]
    head.append(f"model: {model}; {sizes.prompts} prompts x {sizes.generations} generations x "
                f"{sizes.max_new_tokens} new tokens, micro-batch {sizes.micro_batch_size}")
    failures = [f"FAILED {r.phase}: {r.error}" for r in results if r.status != "ok"]
    return "\n".join([*head, "", markdown_table(results), *([""] + failures if failures else [])])


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (the default: a GPU worker's check) or cpu")
    parser.add_argument("--model", default="tiny",
                        help=f"{', '.join(SHAPES)} (random weights), smollm2, or a model folder")
    parser.add_argument("--out", default=None, help="folder for runs, data and gpu-check.json "
                        "(default: $CRUCIBLE_DATA_DIR/gpu-check)")
    defaults = Sizes()
    for name in ("prompts", "generations", "max_new_tokens", "eval_tasks", "sft_steps", "grpo_steps",
                 "dpo_steps", "micro_batch_size"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name),
                            help=f"default {getattr(defaults, name)}")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")


def gpu_check_command(args: argparse.Namespace) -> int:
    """Run the check; 0 when every phase passed, 1 otherwise, 2 when it cannot start."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a download attempt fails loudly instead of hiding
    import torch

    from training.models import allow_hub_kernels, default_data_dir

    allow_hub_kernels(False)  # what every job does unless its config sets hub_kernels

    sizes = Sizes(**{name: getattr(args, name) for name in Sizes.__dataclass_fields__})
    bad = [name for name, value in vars(sizes).items() if value < 1]
    only = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = sorted(set(only) - set(PHASES))
    if bad or unknown:
        print(f"error: {', '.join(bad)} must be >= 1" if bad else
              f"error: unknown phases {unknown}; choose from {', '.join(PHASES)}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device is visible to torch "
              f"(torch {torch.__version__}, CUDA runtime {torch.version.cuda or 'none'}); check the driver and "
              "CUDA_VISIBLE_DEVICES, or run `python -m training gpu-check --device cpu` to check the CPU path",
              file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else default_data_dir() / "gpu-check"
    out.mkdir(parents=True, exist_ok=True)
    info = environment(args.device)
    print("\n".join(f"{k}: {v}" for k, v in info.items()), file=sys.stderr, flush=True)
    try:
        model = prepare_model(args.model, out / f"model-{args.model}", args.device)
    except Exception as exc:
        print(f"error: could not prepare model {args.model!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    results = run_check(model, out, args.device, sizes, only=only)
    text = report(info, results, args.model, sizes)
    print(text)
    (out / "gpu-check.json").write_text(json.dumps(
        {"environment": info, "model": args.model, "sizes": vars(sizes),
         "phases": [vars(r) for r in results]}, indent=2, default=str))
    return 0 if all(r.status == "ok" for r in results) else 1
