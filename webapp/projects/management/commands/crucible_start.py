"""Start the web process and a real Celery worker (with the reaper's beat) together.

This is the embedded default's process model: two processes, no servers to
install. Ctrl-C (or SIGTERM) stops both; if either dies the other is stopped too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand

ALL_QUEUES = "default,verify,rollout,train"


class Command(BaseCommand):
    help = "Run the web app and a Celery worker for all queues (embedded default)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--queues", default=os.environ.get("CRUCIBLE_WORKER_QUEUES", ALL_QUEUES))

    def handle(self, *args, host: str, port: int, queues: str, **options) -> None:
        python = sys.executable
        manage = str(settings.BASE_DIR / "manage.py")
        web = subprocess.Popen([python, manage, "runserver", f"{host}:{port}", "--noreload"], cwd=settings.BASE_DIR)
        worker = subprocess.Popen([
            python, "-m", "celery", "-A", "webapp.config", "worker", "-B", "-Q", queues,
            "--concurrency", "1", "--prefetch-multiplier", "1", "-O", "fair", "-l", "INFO",
        ], cwd=settings.BASE_DIR)
        self.stdout.write(self.style.SUCCESS(f"\nCrucible is running at http://{host}:{port}/  (Ctrl-C stops it)\n"))
        code = _supervise([web, worker])
        raise SystemExit(code)


def _supervise(procs: list[subprocess.Popen]) -> int:
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not stopping and all(p.poll() is None for p in procs):
        time.sleep(0.5)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
    return 0 if stopping else 1
