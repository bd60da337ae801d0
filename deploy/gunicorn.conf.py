"""gunicorn settings of the web process: `gunicorn --config deploy/gunicorn.conf.py`, run by
deploy/bin/web.sh (compose, systemd) and by bench/slow_clients.py, so both serve the same way.

Threads, not sync workers. A sync worker serves one connection at a time and reads the request
itself, so three clients sending their headers one line per second stopped three sync workers
from answering anyone. A gthread worker serves WEB_THREADS connections at once and keeps idle
kept-alive ones in its main loop, not in a thread; but a thread reads its request's headers, so
about WEB_WORKERS x WEB_THREADS slow-header clients still fill it. The real
defence is the buffering reverse proxy in front (deploy/nginx/): nginx reads whole requests
before gunicorn sees them, and drops clients that are too slow. Never publish gunicorn directly.

Every value comes from an environment variable (deploy/.env.example documents them); a bad
value stops the start with a message instead of serving with a surprise.
"""

import os


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"Environment variable {name}={raw!r} is not a whole number.") from None
    if value < 1:
        raise SystemExit(f"Environment variable {name}={value} must be at least 1.")
    return value


def _worker_class() -> str:
    value = os.environ.get("WEB_WORKER_CLASS", "").strip() or "gthread"
    if value not in ("gthread", "sync"):
        # gevent/eventlet would need their packages and a green-aware database driver set-up.
        raise SystemExit(f"Environment variable WEB_WORKER_CLASS={value!r}: use gthread (or sync).")
    return value


# Where gunicorn listens. In compose only the proxy reaches it, on the compose network; the
# systemd unit sets WEB_BIND=127.0.0.1:8000 for nginx on the same machine.
bind = [os.environ.get("WEB_BIND", "").strip() or "0.0.0.0:8000"]

worker_class = _worker_class()
# Processes (one Python interpreter each): about the number of cores the web host can spare.
workers = _positive_int("WEB_WORKERS", 3)
# Requests served at once per process. Each thread may keep one PostgreSQL connection open
# (CONN_MAX_AGE), so WEB_WORKERS x WEB_THREADS must stay well under PostgreSQL's
# max_connections (100 by default) minus what the Celery workers use.
# (gunicorn turns sync workers with more than one thread into gthread ones, hence 1 for sync.)
threads = 1 if worker_class == "sync" else _positive_int("WEB_THREADS", 16)
# Connections one process takes at a time: its threads plus a few kept alive. A process whose
# threads are all busy (slow clients among them) soon stops accepting, and new connections go to
# a process with a free thread instead of queueing behind the busy ones; beyond that they wait in
# the listen backlog. With gunicorn's default, 1000, one process took in more slow clients than it
# had threads while the others idled: 30 slow clients starved the 3 x 16 defaults, which now
# stand up to about 36 (bench/slow_clients.py). Keep-alive beyond the 4 is closed, not refused.
worker_connections = threads + 4
# A worker whose main loop stays silent this long is killed and replaced. For gthread it is a
# heartbeat, not a limit on one request (nginx's proxy_read_timeout is that).
timeout = _positive_int("WEB_TIMEOUT", 30)
# On SIGTERM, running requests get this long to finish (compose's stop_grace_period and
# systemd's TimeoutStopSec leave 60 s).
graceful_timeout = _positive_int("WEB_GRACEFUL_TIMEOUT", 30)
# Seconds an idle kept-alive connection stays open. A gthread worker holds it in its main loop,
# not in a thread. Longer than nginx's upstream keepalive_timeout (4 s), so that gunicorn never
# closes a connection that nginx is just reusing.
keepalive = _positive_int("WEB_KEEPALIVE", 5)

# The heartbeat file in memory: on a container's overlay filesystem a write can stall long
# enough for the arbiter to kill a healthy worker.
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"
