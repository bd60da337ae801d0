"""A real `celery worker` process against the test database and the configured broker."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.db_access import database_access

ROOT = Path(__file__).resolve().parents[2]


def database_url_for_subprocess() -> str:
    """The URL of the database the tests are using right now (the test database)."""
    from django.db import connection

    cfg = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(cfg['NAME']).resolve()}"
    auth = cfg["USER"] or ""
    if cfg.get("PASSWORD"):
        auth += f":{cfg['PASSWORD']}"
    host = f"{cfg['HOST'] or '127.0.0.1'}:{cfg['PORT'] or 5432}"
    return f"postgresql://{auth}@{host}/{cfg['NAME']}"


class LiveWorker:
    def __init__(self, queue: str, proc: subprocess.Popen, log_path: Path) -> None:
        self.queue = queue
        self.proc = proc
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_worker(queue: str, log_path: Path, *, lease_seconds: int = 8, beat: bool = False,
                 extra_env: dict | None = None) -> LiveWorker:
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "webapp.config.settings.test",
        "DATABASE_URL": database_url_for_subprocess(),
        "CRUCIBLE_JOB_LEASE_SECONDS": str(lease_seconds),
        "CRUCIBLE_WORKER_HEARTBEAT_SECONDS": "1",
        **(extra_env or {}),
    })
    log = open(log_path, "w")  # noqa: SIM115 - kept open for the worker's lifetime
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webapp.config", "worker", "-Q", queue,
         "--concurrency", "1", "--prefetch-multiplier", "1", "-O", "fair", "-l", "INFO",
         "-n", f"test-{queue}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
         *(["-B", "-s", str(log_path.with_suffix(".beat"))] if beat else [])],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        if "ready." in log_path.read_text(errors="replace"):
            return LiveWorker(queue, proc, log_path)
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    proc.kill()
    raise RuntimeError("celery worker did not start:\n" + log_path.read_text(errors="replace")[-4000:])


def stop_worker(worker: LiveWorker) -> None:
    """Warm shutdown, then make sure nothing of the worker's process group outlives the test."""
    if worker.proc.poll() is None:
        worker.proc.terminate()
        try:
            worker.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
    with contextlib.suppress(ProcessLookupError):  # an embedded beat or pool child left behind
        os.killpg(worker.proc.pid, signal.SIGKILL)
    forget_worker(worker)


def forget_worker(worker: LiveWorker) -> None:
    """Its row on the workers list goes too. A module's worker heartbeats after its last test has
    emptied the tables, so a later test of this process (xdist puts any file after any other)
    would find a stopped worker it never started."""
    from webapp.runs.models import WorkerNode

    with database_access():
        WorkerNode.objects.filter(name__startswith=f"test-{worker.queue}@").delete()


@pytest.fixture(scope="module")
def live_worker(django_db_setup, django_db_blocker, tmp_path_factory):
    """One worker process per test module, on a queue of its own."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    with django_db_blocker.unblock():
        worker = start_worker(queue, tmp_path_factory.mktemp("worker") / "worker.log")
    yield worker
    stop_worker(worker)


def wait_for(predicate, *, timeout: float = 60.0, interval: float = 0.2, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
