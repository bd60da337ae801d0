"""The training process's command line.

    python -m training run --config run.json --out RUN_DIR   run one job (eval, sft, grpo, dpo)
    python -m training export --checkpoint DIR --out DIR     merge LoRA into the base model
    python -m training schema                                print the run-config JSON schema
    python -m training gpu-check [--device cuda|cpu] [--model tiny|smollm2|PATH] [--out DIR]
                                                             every phase on this worker, one table

`run` appends events to RUN_DIR/events.jsonl (training/events.py) and checkpoints under
RUN_DIR/checkpoints/; running the same command again on the same RUN_DIR resumes from the
latest checkpoint. The job attempt comes from $CRUCIBLE_JOB_ATTEMPT when a worker starts it.
Any failure becomes an `error` event with a message for the person, and exit status 1.

With num_processes > 1 in the config, `run` starts torchrun itself (one host: standalone;
several: --nnodes, --node-rank and --rdzv-endpoint, the same on every host) and torchrun
starts this command once per rank; see training/distributed.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from environments.cli_output import run_quietly_into_pipes
from training.config import RUN_CONFIG_SCHEMA, ConfigError, RunConfig, validate_run_config
from training.distributed import (
    PEER_LOST,
    SINGLE,
    Rendezvous,
    World,
    clear_ranks,
    die_with_parent,
    end_rank_process,
    is_peer_failure,
    join_world,
    launch,
    launched_by_torchrun,
    rank_errors,
    write_rank_error,
)
from training.events import EventWriter, SilentEventWriter, read_events

ATTEMPT_VARIABLE = "CRUCIBLE_JOB_ATTEMPT"


def read_config(path: str | Path) -> RunConfig:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {file} does not exist")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"config file {file} is not valid JSON: {exc}") from exc
    return validate_run_config(data)


def _attempt() -> int | None:
    value = os.environ.get(ATTEMPT_VARIABLE)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"${ATTEMPT_VARIABLE} must be an integer, got {value!r}") from None


def execute(cfg: RunConfig, run_dir: str | Path, events: EventWriter, **overrides: Any) -> dict[str, Any]:
    """Build the job and run its kind's loop; returns what the done event reports.

    `overrides` (model, tokenizer, environment, verifier, tasks, world) let tests and
    benchmarks pass objects instead of names.
    """
    from training.runner import build_job

    job = build_job(cfg, run_dir, events, **overrides)
    processes = ""
    if job.world.parallel:
        how = job.parallel
        if job.lockstep:
            from training.fsdp import sharded_fraction

            how += f", {sharded_fraction(job.model):.0%} of the weights sharded"
        processes = f", {job.world.size} processes ({how})"
    events.log(
        f"{cfg.kind} job on {job.device} (bf16 autocast {'on' if job.autocast else 'off'}, "
        f"{'LoRA' if job.is_lora else 'full weights'}{processes})"
    )
    if cfg.kind == "eval":
        from training.evaluate import run_eval

        return run_eval(job)
    if cfg.kind == "sft":
        from training.sft import run_sft

        return run_sft(job)
    if cfg.kind == "dpo":
        from training.dpo import run_dpo

        return run_dpo(job)
    from training.grpo import run_grpo

    return run_grpo(job)


def _error_message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    known = (ConfigError, FileNotFoundError, ValueError, LookupError)
    return text if isinstance(exc, known) else f"{type(exc).__name__}: {text}"


def run_command(config: str, out: str, rendezvous: Rendezvous | None = None) -> int:
    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    if launched_by_torchrun():
        end_rank_process(_run_rank(config, run_dir))
    events = EventWriter(run_dir)
    try:
        events.attempt = _attempt()
        cfg = read_config(config)
        if cfg.num_processes > 1:
            (rendezvous or Rendezvous()).check(cfg.num_processes)
            events.close()  # rank 0 owns the event log while the ranks run
            return _launch_ranks(config, run_dir, cfg, rendezvous or Rendezvous())
        summary = execute(cfg, run_dir, events)
        events.done(**summary)
        return 0
    except Exception as exc:  # every failure must reach the event log as an error event
        message = _error_message(exc)
        with EventWriter(run_dir, attempt=events.attempt) as writer:  # the first may be closed
            writer.error(message, traceback=traceback.format_exc())
        print(f"error: {message}", file=sys.stderr)
        return 1
    finally:
        events.close()


def _run_rank(config: str, run_dir: Path) -> int:
    """One rank of a torchrun job: rank 0 writes the events, every rank its heartbeat.

    A rank that fails leaves its message in ranks/rank-N.error for the launching process,
    which reports it when torchrun has stopped the others.
    """
    die_with_parent()
    world: World = SINGLE
    events: EventWriter | None = None
    try:
        cfg = read_config(config)
        world = join_world(cfg.device, cfg.num_processes)
        events = EventWriter(run_dir) if world.is_main else SilentEventWriter()
        events.attempt = _attempt()
        summary = execute(cfg, run_dir, events, world=world)
        events.done(**summary)
        return 0
    except Exception as exc:  # the launcher turns this into the run's error event
        message = _error_message(exc)
        peer_lost = world.parallel and is_peer_failure(exc)
        write_rank_error(run_dir, _rank_from_environment(world), message, peer_lost=peer_lost)
        if events is not None and world.is_main and not peer_lost:
            # A lost peer is a symptom: the launcher names the rank that died instead.
            events.error(message, traceback=traceback.format_exc())
        print(f"error (rank {_rank_from_environment(world).rank}): {message}", file=sys.stderr)
        return 1
    finally:
        if events is not None:
            events.close()
        world.close()


def _rank_from_environment(world: World) -> World:
    """The failing rank, even when it failed before joining the process group."""
    if world.parallel:
        return world
    return World(rank=int(os.environ.get("RANK", "0")), size=int(os.environ.get("WORLD_SIZE", "1")))


def _launch_ranks(config: str, run_dir: Path, cfg: RunConfig, rendezvous: Rendezvous) -> int:
    """Start torchrun for num_processes ranks; on failure, make sure the run says why."""
    clear_ranks(run_dir)
    log = run_dir / "events.jsonl"
    before = log.stat().st_size if log.exists() else 0
    status = launch(config, run_dir, cfg.num_processes, rendezvous)
    if status == 0:
        return 0
    if not _ended_since(log, before):
        with EventWriter(run_dir, attempt=_attempt()) as events:
            events.error(_ranks_failure_message(run_dir, status, cfg.num_processes))
    print(f"error: torchrun exited with status {status}", file=sys.stderr)
    return 1


def _ended_since(log: Path, offset: int) -> bool:
    """Whether rank 0 wrote a done or error event after `offset` of the event log."""
    if not log.exists():
        return False
    events, _ = read_events(log, from_offset=offset)
    return any(event.get("type") in ("done", "error") for event in events)


def _ranks_failure_message(run_dir: Path, status: int, size: int) -> str:
    """The run's error: the first rank's own failure, else the rank that died without one.

    Ranks whose collective only lost a peer are symptoms, reported after the cause.
    """
    errors = rank_errors(run_dir)
    causes = {rank: text for rank, text in errors.items() if not text.startswith(PEER_LOST)}
    if causes:
        rank = min(causes)
        return f"rank {rank} of {size} failed: {causes[rank]}"
    silent = sorted(set(range(size)) - set(errors))
    # Only when every other rank reported losing its peer is the silent one known to be the cause.
    who = f"rank {silent[0]} of this {size}-process job" if len(silent) == 1 else f"a process of this {size}-process job"
    lost = f" (rank {', '.join(map(str, sorted(errors)))} then lost it)" if errors else ""
    return (
        f"{who} ended without an error message (killed, or out of memory?){lost}; torchrun stopped the "
        f"others and exited with status {status}. The worker log has torchrun's report of how it ended."
    )


def export_command(checkpoint: str, out: str) -> int:
    from training.export import export_checkpoint

    try:
        path = export_checkpoint(checkpoint, out)
    except Exception as exc:  # reported as one line; the traceback helps nobody running the CLI
        print(f"error: {_error_message(exc)}", file=sys.stderr)
        return 1
    print(f"exported {checkpoint} to {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one command; a reader that stops early (`schema | head`) ends it quietly."""
    return run_quietly_into_pipes(lambda: _dispatch(argv))


def _dispatch(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one job from a run config")
    run.add_argument("--config", required=True, help="run config JSON file")
    run.add_argument("--out", required=True, help="run directory (events, checkpoints)")
    hosts = run.add_argument_group("several hosts (num_processes > 1; passed to torchrun)")
    hosts.add_argument("--nnodes", type=int, default=1, help="hosts taking part (default 1)")
    hosts.add_argument("--node-rank", type=int, default=0, help="this host's index, 0..nnodes-1")
    hosts.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT where the hosts meet (host 0)")
    hosts.add_argument("--rdzv-id", default="crucible", help="the job's id, the same on every host")
    export = commands.add_parser("export", help="merge a LoRA checkpoint into its base model")
    export.add_argument("--checkpoint", required=True, help="RUN_DIR/checkpoints/step_N")
    export.add_argument("--out", required=True, help="output folder (Hugging Face format)")
    commands.add_parser("schema", help="print the run-config JSON schema")
    from training.gpu_check import add_arguments, gpu_check_command

    check = commands.add_parser(
        "gpu-check", help="run eval, SFT, GRPO, DPO, resume and export on this worker; print one table"
    )
    add_arguments(check)
    args = parser.parse_args(argv)
    if args.command == "run":
        rendezvous = Rendezvous(nnodes=args.nnodes, node_rank=args.node_rank,
                                endpoint=args.rdzv_endpoint, run_id=args.rdzv_id)
        return run_command(args.config, args.out, rendezvous)
    if args.command == "export":
        return export_command(args.checkpoint, args.out)
    if args.command == "gpu-check":
        return gpu_check_command(args)
    json.dump(RUN_CONFIG_SCHEMA, sys.stdout, indent=2)
    print()
    return 0
