"""Job handler for eval / sft / grpo / dpo: a supervised `python -m training run` process.

The training process runs in its own process group with its own deadline; this
side writes its config, tails RUN_DIR/events.jsonl and ingests batches of events,
mirrors progress and the log tail into the Job row (the heartbeat thread carries
them), and on cancel or a lost lease terminates the whole process group.

RUN_DIR is stable across attempts (CRUCIBLE_DATA_DIR/runs/<run id>), so a
re-queued attempt starts the same command on the same folder and the training
process resumes from its latest checkpoint; ingestion is idempotent, so events
replayed by the resumed process add nothing twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from django.conf import settings

from webapp.runs.models import Run
from webapp.runs.services.ingest import EventIngestor, discard_superseded_rows
from webapp.runs.services.run_config import run_process_config
from webapp.verifiers.services.judge import run_judge_environ
from workers.registration import detect_gpus
from workers.runner import JobContext, handler, worker_name

POLL_SECONDS = 0.5
STDERR_TAIL_LINES = 100
READ_BYTES = 8 * 1024 * 1024


def run_dir_for(run: Run) -> Path:
    return Path(settings.CRUCIBLE_RUNS_DIR) / run.folder_name


class TrainingProcessFailed(RuntimeError):
    pass


class DeviceUnavailable(RuntimeError):
    """The run asks for a device this worker does not have; said before the process starts."""


def refuse_device_this_worker_lacks(config: dict, *, worker_gpus: list[dict]) -> None:
    """A `device: cuda` run on a worker without a GPU fails now, with what to do, not mid-run.

    `auto` runs anywhere (cuda where there is one, else cpu), so only an explicit cuda is refused.
    """
    if config.get("device") == "cuda" and not worker_gpus:
        raise DeviceUnavailable(
            f"this run asks for device 'cuda' but worker {worker_name()} has no CUDA GPU visible to torch. "
            "Start a GPU worker for the train and rollout queues (docs/deploy.md, then "
            "`python -m training gpu-check` on it), or set the run's device to auto or cpu."
        )
    processes = int(config.get("num_processes") or 1)
    if config.get("device") == "cuda" and processes > len(worker_gpus):
        raise DeviceUnavailable(
            f"this run asks for {processes} processes on cuda (one GPU each) but worker {worker_name()} sees "
            f"{len(worker_gpus)} GPU(s). Start it on a worker with {processes} GPUs (CRUCIBLE_WORKER_GPUS must "
            "not promise more than CUDA sees), or lower num_processes."
        )


def _training_command(config_path: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "training", "run", "--config", str(config_path), "--out", str(run_dir)]


def run_training_process(ctx: JobContext) -> None:
    run = Run.objects.select_related("dataset", "verifier_version__verifier", "model", "parent_checkpoint").get(
        pk=ctx.run_id
    )
    run_dir = run_dir_for(run)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_process_config(run, run_dir)  # this process's one validation, before anything spawns (see there)
    refuse_device_this_worker_lacks(config, worker_gpus=detect_gpus())
    config_path = run_dir / "run.json"
    config_path.write_text(json.dumps(config, indent=2))
    resumed_from = _latest_checkpoint_step(run_dir)
    discard_superseded_rows(run, resumed_from=resumed_from)
    if resumed_from is not None:
        ctx.log(f"attempt {ctx.attempt} resumes from the checkpoint of step {resumed_from}")
    deadline = time.monotonic() + float(ctx.payload.get("timeout_seconds", settings.CRUCIBLE_JOB_TIMEOUT_SECONDS))
    stderr_path = run_dir / f"stderr.attempt{ctx.attempt}.log"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            _training_command(config_path, run_dir), cwd=settings.BASE_DIR, stdout=stderr, stderr=subprocess.STDOUT,
            env={**os.environ, **run_judge_environ(run), "CRUCIBLE_JOB_ATTEMPT": str(ctx.attempt),
                 "PYTHONUNBUFFERED": "1"},
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        ctx.log(f"started training process {proc.pid} in {run_dir}")
        _supervise(ctx, EventIngestor(run, attempt=ctx.attempt, resumed_from=resumed_from), proc, run_dir,
                   stderr_path, deadline, ranks=int(config.get("num_processes") or 1))


def _die_with_parent() -> None:
    """In the child: SIGKILL it when the supervising worker dies (kill -9), so that a
    re-queued attempt never shares the run folder with an orphan of the last one."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _latest_checkpoint_step(run_dir: Path) -> int | None:
    from training.checkpoints import list_checkpoints

    checkpoints = list_checkpoints(run_dir)
    return checkpoints[-1].step if checkpoints else None


def _supervise(ctx: JobContext, ingestor: EventIngestor, proc: subprocess.Popen, run_dir: Path, stderr_path: Path,
               deadline: float, *, ranks: int = 1) -> None:
    from training.distributed import read_heartbeats  # torch only where training runs

    events_path = run_dir / "events.jsonl"
    offset, error = 0, None
    try:
        while True:
            exited = proc.poll() is not None
            offset, error = _ingest_available(ctx, ingestor, events_path, offset, error)
            _mirror_stderr(ctx, stderr_path)
            if ranks > 1:
                ctx.processes = read_heartbeats(run_dir)
            if exited:
                break
            ctx.check()
            if time.monotonic() > deadline:
                raise TrainingProcessFailed("the training process ran past its deadline and was stopped")
            time.sleep(POLL_SECONDS)
    finally:
        _stop_process_group(proc)
    offset, error = _ingest_available(ctx, ingestor, events_path, offset, error)
    if proc.returncode != 0:
        raise TrainingProcessFailed(error or f"training process exited with code {proc.returncode}; see the log tail")


def _ingest_available(ctx: JobContext, ingestor: EventIngestor, path: Path, offset: int, error: str | None):
    from training.events import read_events

    while True:
        events, new_offset = read_events(path, offset, max_bytes=READ_BYTES)
        if not events:
            return new_offset, error
        report = ingestor.ingest(events)
        for event in report.other:
            error = _apply_side_event(ctx, event) or error
        offset = new_offset


def _apply_side_event(ctx: JobContext, event: dict) -> str | None:
    kind = event.get("type")
    if kind == "progress":
        total = max(1, int(event.get("total") or 1))
        ctx.set_progress(float(event.get("fraction", int(event.get("step") or 0) / total)))
    elif kind == "log":
        ctx.log(str(event.get("message", "")))
    elif kind == "error":
        return str(event.get("message") or "the training process reported an error")
    return None


def _mirror_stderr(ctx: JobContext, stderr_path: Path) -> None:
    """Keep the job's log tail equal to the last lines the process printed."""
    try:
        with open(stderr_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
            lines = deque(f.read().decode(errors="replace").splitlines(), maxlen=STDERR_TAIL_LINES)
    except FileNotFoundError:
        return
    ctx.output_tail = "\n".join(lines)


def _stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the whole group, then SIGKILL what is left after a grace period."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


for _kind in ("eval", "sft", "grpo", "dpo"):
    handler(_kind)(run_training_process)
