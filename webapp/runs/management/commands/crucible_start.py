"""Start the web process and real Celery workers together.

This is the embedded default's process model, no servers to install: the web
process, a worker for the long jobs (train, rollout) and a worker for the light
ones (default, verify) that also runs celery beat (the reaper, the experiment
sweep), so periodic work never waits behind an hour of training. Ctrl-C (or
SIGTERM) stops all of them; if one dies the others are stopped too.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

from django.conf import settings
from django.core.management.base import BaseCommand

LONG_QUEUES = "train,rollout"
LIGHT_QUEUES = "default,verify"


class Command(BaseCommand):
    help = "Run the web app and Celery workers for all queues (embedded default)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host: str, port: int, **options) -> None:
        python = sys.executable
        manage = str(settings.BASE_DIR / "manage.py")
        web = subprocess.Popen([python, manage, "runserver", f"{host}:{port}", "--noreload"], cwd=settings.BASE_DIR)
        workers = [
            _worker(python, "long", LONG_QUEUES, beat=False),
            _worker(python, "light", LIGHT_QUEUES, beat=True),
        ]
        procs = [web, *workers]
        url = f"http://{host}:{port}/"
        if _wait_until_answering(f"{url}login/", procs):
            self._banner(url)
        code = _supervise(procs)
        raise SystemExit(code)


    def _banner(self, url: str) -> None:
        """Said last, once the web answers: where to go and, on a first run, how to log in."""
        from webapp.runs.services.demo import first_login_to_show

        lines = [f"Crucible is running at {url}  (Ctrl-C stops it)"]
        login = first_login_to_show()
        if login is not None:
            lines.append(f"Log in as {login.username} / {login.password}  (shown until you change it: "
                         f"python manage.py changepassword {login.username})")
        self.stdout.write(self.style.SUCCESS("\n" + "\n".join(lines) + "\n"))
        self.stdout.flush()


def _wait_until_answering(url: str, procs: list[subprocess.Popen], timeout: float = 120) -> bool:
    """Poll the login page until the web process answers (False if a process died or time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            time.sleep(0.3)
    return False


def _worker(python: str, name: str, queues: str, *, beat: bool) -> subprocess.Popen:
    beat_args = ["-B", "-s", str(settings.DATA_DIR / "celerybeat-schedule")] if beat else []
    return subprocess.Popen([
        python, "-m", "celery", "-A", "webapp.config", "worker", "-n", f"{name}@%h", "-Q", queues, *beat_args,
        "--concurrency", "1", "--prefetch-multiplier", "1", "-O", "fair", "-l", "INFO",
    ], cwd=settings.BASE_DIR)


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
