"""Data parallelism over several processes: torchrun starts them, torch.distributed joins them.

One job, N processes (config `num_processes`), one replica of the model each. Every rank
generates and scores its share of a step's prompts; the rollouts are gathered, so every rank
holds the step's whole batch, computes the same group advantages and trains on its share of
the micro-batches; the gradients are then summed over ranks with one all-reduce, every
micro-batch's loss having been normalised for the *global* batch. So N processes make the
update one process makes on the same global batch, and (sampling being seeded per prompt)
the same weights come out at any process count, up to float summation order.

Why one all-reduce after accumulation rather than the `DistributedDataParallel` wrapper:
the GRPO forward runs the model twice per micro-batch (a shared prompt, then its
completions on the prompt's cache), ranks may hold different numbers of micro-batches (the
groups dynamic sampling keeps do not split evenly), and the trainable LoRA gradients are a
few MB. DDP's `no_sync` accumulation followed by a final synchronised backward needs every
rank to run that last backward; a flat all-reduce of the accumulated gradients is the same
arithmetic (DDP sums buckets with all-reduce too) without that constraint. What is given up
is DDP's overlap of communication with the backward pass, which matters for full
fine-tuning of large models, not for adapters.

Rank 0 writes the events, trajectories (every rank's, gathered) and checkpoints; the others
write nothing to the run folder but their heartbeat (ranks/rank-N.json) and, on failure,
their error (ranks/rank-N.error), which the launching process reports.

Backends: gloo on CPU (how CI tests it), NCCL on CUDA with one GPU per process.

The config's `parallel` (resolve_parallel): ddp is the above with a whole replica per rank;
fsdp is the same data parallelism with the model's weights sharded over the ranks
(training/fsdp.py); auto picks ddp where one replica fits one device.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch

WORLD_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
RANKS_FOLDER = "ranks"
_MASK = (1 << 64) - 1


class DistributedError(RuntimeError):
    """The processes of a job cannot be started or joined as configured."""


# ---------------------------------------------------------------------------------------
# Seeds that do not depend on which rank draws them
# ---------------------------------------------------------------------------------------


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def seed_for(*parts: int) -> int:
    """A 63-bit seed mixed from integers: (run seed, step, draw, prompt position) and the like.

    A pure function, so a prompt's samples are the same whichever rank generates them.
    """
    value = 0
    for part in parts:
        value = _splitmix64(value ^ (int(part) & _MASK))
    return value >> 1


# ---------------------------------------------------------------------------------------
# The process group
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """This process's place among the job's processes; a world of 1 does no communication."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.size > 1

    # --- sharding ----------------------------------------------------------------------

    def share(self, count: int) -> range:
        """This rank's contiguous share of `count` items (the first ranks take one more)."""
        return shard_range(count, self.rank, self.size)

    # --- collectives (no-ops in a world of 1) --------------------------------------------

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order, on every rank (picklable objects)."""
        if not self.parallel:
            return [value]
        gathered: list[Any] = [None] * self.size
        torch.distributed.all_gather_object(gathered, value)
        return gathered

    def sum_floats(self, values: dict[str, float]) -> dict[str, float]:
        """Sum a dict of floats over ranks (each rank may hold different keys)."""
        if not self.parallel:
            return dict(values)
        total: dict[str, float] = {}
        for part in self.gather(dict(values)):
            for key, value in part.items():
                total[key] = total.get(key, 0.0) + float(value)
        return total

    def sum_gradients(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        """Sum the accumulated gradients of `parameters` over ranks, in one flat all-reduce.

        A parameter without a gradient on this rank (it trained on no micro-batch) takes
        part with zeros, so every rank sends buffers of the same size.
        """
        if not self.parallel or not parameters:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
        offset = 0
        for param, grad in zip(parameters, grads, strict=True):
            count = grad.numel()
            summed = flat[offset : offset + count].view_as(grad).to(grad.dtype)
            param.grad = summed
            offset += count

    def barrier(self) -> None:
        if self.parallel:
            torch.distributed.barrier()

    def close(self) -> None:
        if self.parallel and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


SINGLE = World()


def shard_range(count: int, rank: int, size: int) -> range:
    """Contiguous split of `count` items over `size` ranks; sizes differ by at most one."""
    base, extra = divmod(count, size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def launched_by_torchrun() -> bool:
    """Whether this process is one rank of a torchrun job (torchrun sets these variables)."""
    return all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def join_world(device: str, expected_size: int) -> World:
    """Join the process group torchrun prepared; a world of 1 outside torchrun.

    `device` is the config's (auto, cpu or cuda): cpu joins over gloo, cuda over NCCL with
    GPU LOCAL_RANK. `expected_size` is the config's num_processes, checked against what
    torchrun started, so a run never trains at a world size nobody asked for.
    """
    if not launched_by_torchrun():
        if expected_size > 1:
            raise DistributedError(
                f"num_processes is {expected_size} but this process was not started by torchrun; "
                "start it with `python -m training run`, which launches torchrun itself"
            )
        return SINGLE
    size = int(os.environ["WORLD_SIZE"])
    if size != expected_size:
        raise DistributedError(
            f"torchrun started {size} processes but the config's num_processes is {expected_size}; "
            "launch with --nproc-per-node * --nnodes equal to num_processes"
        )
    world = World(rank=int(os.environ["RANK"]), size=size, local_rank=int(os.environ["LOCAL_RANK"]))
    if size == 1:
        return world
    cuda = uses_gpus(device)
    if cuda:
        _claim_gpu(world)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
    return world


def local_processes() -> int:
    """Processes of this job on this host (torchrun's LOCAL_WORLD_SIZE; 1 outside torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def uses_gpus(device: str) -> bool:
    """Whether this job's processes run on GPUs: cuda always; auto when this host has one per process.

    With fewer GPUs than processes, auto runs every process on the CPU rather than sharing a
    GPU or failing: the job's first log line says which it chose.
    """
    if device == "cuda":
        return True
    return device == "auto" and torch.cuda.is_available() and torch.cuda.device_count() >= local_processes()


def _claim_gpu(world: World) -> None:
    visible = torch.cuda.device_count()
    if world.local_rank >= visible:
        raise DistributedError(
            f"rank {world.rank} needs GPU {world.local_rank} but this host sees {visible}; "
            "num_processes on one host may not exceed its GPUs (CUDA_VISIBLE_DEVICES)"
        )
    torch.cuda.set_device(world.local_rank)


def rank_device(world: World, device: torch.device, configured: str = "auto") -> torch.device:
    """One GPU per process: cuda becomes cuda:LOCAL_RANK; a CPU stays the CPU.

    `configured` is the config's device: auto with fewer GPUs than processes on this host is
    the CPU (uses_gpus), as the process group's backend (gloo) was chosen.
    """
    if not world.parallel:
        return device
    if device.type == "cuda" and uses_gpus(configured):
        return torch.device("cuda", world.local_rank)
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------
# ddp or fsdp: the config's `parallel`, auto resolved here
# ---------------------------------------------------------------------------------------

FIT_FRACTION = 0.7
"""Share of one device's memory the weights may take for auto to choose ddp; the rest is for
activations, the KV cache of generation and (LoRA) the adapters with their AdamW state."""

FULL_FINE_TUNING_COPIES = 4
"""Full fine-tuning holds the weights, their gradients and AdamW's two moments, each in the
weights' dtype (torch's AdamW keeps its state in the parameter's dtype)."""


def training_bytes(cfg: Any, weights_bytes: int, *, frozen_base: bool | None = None) -> int:
    """Device memory one replica's weights need: the frozen base alone (LoRA, evals), or
    weights + gradients + AdamW moments (full fine-tuning), plus the reference copy that full
    fine-tuning keeps when beta > 0 or for DPO."""
    if frozen_base is None:
        frozen_base = cfg.kind == "eval" or cfg.adapter == "lora"
    if frozen_base:
        return weights_bytes
    reference = cfg.beta > 0 or cfg.kind == "dpo"
    return weights_bytes * (FULL_FINE_TUNING_COPIES + (1 if reference else 0))


def resolve_parallel(
    cfg: Any, weights_bytes: int, device_memory_bytes: int | None, *, frozen_base: bool | None = None
) -> str:
    """The config's `parallel` made concrete: "ddp" or "fsdp" (the rule of its description).

    auto: ddp when one replica fits one device (training_bytes <= FIT_FRACTION of its memory),
    fsdp otherwise; on the CPU (device_memory_bytes None) always ddp, as the processes share
    the host's memory either way. `weights_bytes` is the model in its load dtype; `frozen_base`
    defaults to what the config says (LoRA or eval), the runner passes what it loaded.
    """
    if cfg.parallel != "auto":
        return cfg.parallel
    if device_memory_bytes is None:
        return "ddp"
    needed = training_bytes(cfg, weights_bytes, frozen_base=frozen_base)
    return "ddp" if needed <= FIT_FRACTION * device_memory_bytes else "fsdp"


def device_memory(device: torch.device) -> int | None:
    """Total memory of a GPU (bytes); None for the CPU."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(device).total_memory)


# ---------------------------------------------------------------------------------------
# Heartbeats and errors of ranks (rank 0 owns the event log)
# ---------------------------------------------------------------------------------------


def ranks_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / RANKS_FOLDER


def write_heartbeat(run_dir: str | Path, world: World, device: torch.device, step: int | None) -> None:
    """ranks/rank-N.json: pid, device, step and time, rewritten atomically (the worker reads it)."""
    folder = ranks_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {"rank": world.rank, "world_size": world.size, "pid": os.getpid(), "device": str(device),
               "host": os.uname().nodename, "step": step, "time": time.time()}
    tmp = folder / f".rank-{world.rank}.json.tmp"
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, folder / f"rank-{world.rank}.json")


PEER_LOST = "[peer lost] "
"""Marks a rank error that only reports another rank's death (its collective lost the peer)."""

_PEER_FAILURE_SIGNS = ("Connection closed by peer", "Connection reset by peer", "gloo/transport", "NCCL",
                       "Broken pipe", "recvBytes", "Read error")


def is_peer_failure(exc: BaseException) -> bool:
    """Whether `exc` is a collective failing because another rank went away (not this rank's fault)."""
    dist_error = getattr(torch.distributed, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    return isinstance(exc, RuntimeError) and any(sign in str(exc) for sign in _PEER_FAILURE_SIGNS)


def write_rank_error(run_dir: str | Path, world: World, message: str, *, peer_lost: bool = False) -> None:
    folder = ranks_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    text = f"{PEER_LOST}{message}" if peer_lost else message
    (folder / f"rank-{world.rank}.error").write_text(text, encoding="utf-8")


def read_heartbeats(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every rank's last heartbeat, by rank (for the worker and the Jobs page)."""
    beats = []
    for path in sorted(ranks_dir(run_dir).glob("rank-*.json")):
        try:
            beats.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(beats, key=lambda beat: beat.get("rank", 0))


def rank_errors(run_dir: str | Path) -> dict[int, str]:
    errors = {}
    for path in sorted(ranks_dir(run_dir).glob("rank-*.error")):
        try:
            errors[int(path.stem.split("-")[1])] = path.read_text(encoding="utf-8").strip()
        except (OSError, ValueError, IndexError):
            continue
    return errors


def clear_ranks(run_dir: str | Path) -> None:
    """Forget the previous attempt's heartbeats and errors before a new one starts."""
    folder = ranks_dir(run_dir)
    if folder.is_dir():
        for path in folder.iterdir():
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------
# Launching: `python -m training run` with num_processes > 1 starts torchrun itself
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendezvous:
    """Where the processes of a job meet. One host: standalone. Several: the same endpoint
    and id on every host, each with its own node_rank (what a person or a scheduler passes)."""

    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None
    run_id: str = "crucible"

    def check(self, num_processes: int) -> int:
        """Processes per node; an error when the hosts cannot share num_processes evenly."""
        if self.nnodes < 1:
            raise DistributedError(f"--nnodes must be >= 1, got {self.nnodes}")
        if num_processes % self.nnodes:
            raise DistributedError(
                f"num_processes {num_processes} does not split evenly over --nnodes {self.nnodes}"
            )
        if self.nnodes > 1 and not self.endpoint:
            raise DistributedError("several hosts need --rdzv-endpoint HOST:PORT (the same on every host)")
        if not 0 <= self.node_rank < self.nnodes:
            raise DistributedError(f"--node-rank must be in [0, {self.nnodes}), got {self.node_rank}")
        return num_processes // self.nnodes


def torchrun_command(config: str | Path, out: str | Path, num_processes: int, rendezvous: Rendezvous) -> list[str]:
    """The torchrun command line that runs this same `training run` as num_processes ranks."""
    per_node = rendezvous.check(num_processes)
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={per_node}"]
    if rendezvous.nnodes == 1 and not rendezvous.endpoint:
        command.append("--standalone")
    else:
        command += [f"--nnodes={rendezvous.nnodes}", f"--node-rank={rendezvous.node_rank}",
                    "--rdzv-backend=c10d", f"--rdzv-endpoint={rendezvous.endpoint}",
                    f"--rdzv-id={rendezvous.run_id}"]
    command += ["--max-restarts=0", "-m", "training", "run", "--config", str(config), "--out", str(out)]
    return command


def end_rank_process(status: int) -> NoReturn:
    """Leave a rank's process now, with `status`, skipping the interpreter's finalization.

    Everything a rank owns is closed by then (event log, checkpoints committed, process group
    destroyed). What finalization would add is a race: a collective backend's C++ threads (gloo's,
    holding finished work and its tensors) may let go of a tensor while Python tears down, and a
    thread that asks for the GIL then is ended mid-destructor, which aborts the rank
    ("terminate called without an active exception", SIGABRT) after its job succeeded. torchrun
    then reports a failed job. CI saw it once at the end of a 2-process fsdp run on a loaded
    2-core machine, too rarely to reproduce on demand; exiting here takes the race away.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe must not turn success into failure
            stream.flush()
    logging.shutdown()
    os._exit(status)


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux; elsewhere nothing happens).

    torchrun starts each rank in a session of its own, so a worker that kills its job's
    process group reaches the launcher and torchrun but not the ranks. The chain launcher ->
    torchrun -> ranks, each dying with its parent, leaves no rank behind.
    """
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def launch(config: str | Path, out: str | Path, num_processes: int, rendezvous: Rendezvous) -> int:
    """Run torchrun in the foreground and return its exit status.

    torchrun ends every rank when one fails (its default); the exit status is then non-zero
    and the caller reports which rank failed and why (rank_errors). torchrun stays in this
    process's group and dies with this process, and its ranks die with it (die_with_parent),
    so killing the job's process group on cancel ends every rank.
    """
    command = torchrun_command(config, out, num_processes, rendezvous)
    env = {k: v for k, v in os.environ.items() if k not in WORLD_VARIABLES}
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, num_processes))))
    proc = subprocess.Popen(command, env=env, preexec_fn=die_with_parent)  # noqa: PLW1509 - only prctl
    try:
        return proc.wait()
    except BaseException:
        proc.terminate()  # SIGTERM: torchrun stops its ranks before it exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
