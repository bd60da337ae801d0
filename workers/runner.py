"""Runs one job attempt: claim, mark running, heartbeat in the background, finish.

A handler does the work for one job kind. It receives a JobContext and checks
`ctx.should_stop()` between units of work; the heartbeat thread extends the
lease and notices cancel requests and lost leases, so a handler never has to.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import close_old_connections

from webapp.runs.models import Job, Run
from webapp.runs.services import jobs as job_services

logger = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class JobCancelled(Exception):
    """Raised by a handler (via ctx.check()) when the job was cancelled."""


class LeaseLost(Exception):
    """Raised by a handler (via ctx.check()) when another attempt owns the job now."""


@dataclass
class JobContext:
    job_id: int
    attempt: int
    kind: str
    payload: dict
    run_id: int | None
    progress: float = 0.0
    log_lines: list[str] = field(default_factory=list)
    output_tail: str = ""  # the last lines a supervised process printed
    processes: list[dict] | None = None  # a data-parallel job's ranks (their heartbeats), for the Jobs page
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    lease_lost: threading.Event = field(default_factory=threading.Event)

    def log(self, line: str) -> None:
        self.log_lines.append(line.rstrip("\n"))
        del self.log_lines[:-200]

    def log_tail(self) -> str:
        notes = "\n".join(self.log_lines)
        if not self.output_tail:
            return notes
        return f"{notes}\n--- process output ---\n{self.output_tail}"

    def set_progress(self, fraction: float) -> None:
        self.progress = fraction

    def should_stop(self) -> bool:
        return self.cancel_requested.is_set() or self.lease_lost.is_set()

    def check(self) -> None:
        """Raise if the handler must stop now."""
        if self.lease_lost.is_set():
            raise LeaseLost(f"job {self.job_id} attempt {self.attempt} lost its lease")
        if self.cancel_requested.is_set():
            raise JobCancelled(f"job {self.job_id} was cancelled")


Handler = Callable[[JobContext], None]
HANDLERS: dict[str, Handler] = {}
# Modules whose @handler functions serve the other job kinds (imported on first use,
# after Django is set up).
HANDLER_MODULES = ("workers.training_process", "workers.verification_jobs", "workers.export", "workers.delete_jobs")


def load_handlers() -> dict[str, Handler]:
    for module in HANDLER_MODULES:
        importlib.import_module(module)
    return HANDLERS


def handler(kind: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[kind] = fn
        return fn

    return register


@handler("noop")
def run_noop(ctx: JobContext) -> None:
    """A trivial job for smoke tests and health checks: N steps of `sleep` seconds."""
    steps = int(ctx.payload.get("steps", 3))
    pause = float(ctx.payload.get("sleep", 0.1))
    for i in range(steps):
        ctx.check()
        time.sleep(pause)
        ctx.set_progress((i + 1) / steps)
        ctx.log(f"step {i + 1}/{steps}")
    if ctx.payload.get("fail"):
        raise RuntimeError(str(ctx.payload.get("fail")))


def run_job(job_id: int, *, worker: str | None = None) -> str:
    """Claim and execute one job; returns the outcome (for logs and tests)."""
    load_handlers()
    close_old_connections()
    job = job_services.job_claim(job_id=job_id, worker=worker or worker_name())
    if job is None:
        logger.info("job %s: not claimable (taken, finished, cancelled or gone)", job_id)
        return "skipped"
    ctx = JobContext(job_id=job.pk, attempt=job.attempt, kind=job.kind, payload=job.payload, run_id=job.run_id)
    try:
        job_services.job_mark_running(job_id=job.pk, attempt=job.attempt)
    except job_services.StaleAttempt:
        return "stale"
    beat = _Heartbeater(ctx, interval=max(1.0, settings.CRUCIBLE_JOB_LEASE_SECONDS / 4))
    beat.start()
    try:
        outcome = _execute(ctx, job)
    finally:
        beat.stop()
    _advance_pipeline(job)
    close_old_connections()
    return outcome


def _advance_pipeline(job: Job) -> None:
    """If the job's run is an experiment stage, start the next stage now (the sweep is the fallback)."""
    experiment_id = Run.objects.filter(pk=job.run_id).values_list("experiment_id", flat=True).first()
    if experiment_id is None:
        return
    from webapp.runs.services.experiments import experiment_advance

    try:
        experiment_advance(experiment_id=experiment_id)
    except Exception:  # the periodic sweep retries; never fail the finished job over it
        logger.exception("could not advance experiment %s", experiment_id)


def _execute(ctx: JobContext, job: Job) -> str:
    fn = HANDLERS.get(job.kind)
    try:
        if fn is None:
            raise RuntimeError(
                f"No handler for job kind {job.kind!r} on this worker; known kinds: {', '.join(sorted(HANDLERS))}."
            )
        fn(ctx)
        ctx.check()
    except LeaseLost:
        logger.warning("job %s attempt %s: lease lost, abandoning", ctx.job_id, ctx.attempt)
        return "stale"
    except JobCancelled:
        return _finish_quietly(job_services.job_mark_cancelled, ctx, "cancelled")
    except Exception as exc:  # the job failed; record why for the person who reads it
        ctx.log(traceback.format_exc())
        error = f"{type(exc).__name__}: {exc}"
        return _finish_quietly(job_services.job_fail, ctx, "failed", error=error)
    return _finish_quietly(job_services.job_succeed, ctx, "succeeded")


def _finish_quietly(fn, ctx: JobContext, outcome: str, **kwargs) -> str:
    try:
        fn(job_id=ctx.job_id, attempt=ctx.attempt, log_tail=ctx.log_tail(), processes=ctx.processes, **kwargs)
    except job_services.StaleAttempt:
        return "stale"
    return outcome


class _Heartbeater:
    """Extends the lease every `interval` seconds on its own DB connection."""

    def __init__(self, ctx: JobContext, *, interval: float) -> None:
        self.ctx = ctx
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{ctx.job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self._beat()
        finally:
            close_old_connections()
            from django.db import connection

            connection.close()

    def _beat(self) -> None:
        try:
            beat = job_services.job_heartbeat(
                job_id=self.ctx.job_id, attempt=self.ctx.attempt,
                progress=self.ctx.progress, log_tail=self.ctx.log_tail(), processes=self.ctx.processes,
            )
        except job_services.StaleAttempt:
            self.ctx.lease_lost.set()
            return
        except Exception:  # a transient DB error must not kill the job; the lease has slack
            logger.exception("heartbeat for job %s failed", self.ctx.job_id)
            return
        if beat.cancel_requested:
            self.ctx.cancel_requested.set()
