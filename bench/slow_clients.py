"""Slow clients against the web process: are normal requests still answered?

Issue 23: three clients sending their headers one line per second stopped gunicorn with three
sync workers from answering anyone. This script starts gunicorn exactly as deploy/bin/web.sh does
(the `exec gunicorn ...` line read from the script, so deploy/gunicorn.conf.py and its WEB_*
variables), on a free loopback port, with the embedded settings (SQLite in a temporary data
directory, migrated first like web.sh does; collectstatic is skipped, only the login page is
fetched). It then opens --slow-clients connections that each send a request line and one more
header line every --interval seconds without ever finishing (reconnecting when the server drops
them), and meanwhile times plain GET /login/ requests, one after another, for --duration seconds.

    python bench/slow_clients.py                        # the deployed config, 9 slow clients
    python bench/slow_clients.py --sync --slow-clients 3  # the old command: 3 sync workers
    python bench/slow_clients.py --slow-clients 60      # more slow clients than gunicorn threads
    python bench/slow_clients.py --proxy --slow-clients 60  # the same through nginx (deploy/nginx)

--proxy puts nginx (a local `nginx` binary) in front, configured from deploy/nginx/docker.conf and
deploy/nginx/crucible-proxy.conf with only the addresses changed, as in the compose file.

It prints p50 and max latency and the failures (errors, timeouts, non-200 answers), and exits 1
when a request failed or the slowest took longer than --threshold seconds. Every connection goes
to 127.0.0.1; the number of clients and the time are bounded.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import select
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WEB_SCRIPT = REPO_ROOT / "deploy" / "bin" / "web.sh"
NGINX_DIR = REPO_ROOT / "deploy" / "nginx"
HOST = "127.0.0.1"  # loopback only, whatever the options
PATH = "/login/"
OLD_SYNC_WORKERS = 3
MAX_SLOW_CLIENTS = 500
MAX_DURATION = 600.0


def gunicorn_arguments_of_web_script() -> list[str]:
    """The arguments web.sh gives gunicorn: its `exec gunicorn ...` line, split like the shell."""
    lines = [line.strip() for line in WEB_SCRIPT.read_text().splitlines()]
    execs = [line for line in lines if line.startswith("exec gunicorn ")]
    if len(execs) != 1:
        raise SystemExit(f"{WEB_SCRIPT} should have exactly one `exec gunicorn ...` line")
    arguments = shlex.split(execs[0])[2:]
    if any("$" in argument for argument in arguments):
        raise SystemExit(f"{WEB_SCRIPT}: the gunicorn line uses shell variables; cannot reuse it")
    return arguments


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def get(port: int, timeout: float) -> tuple[bool, float, str]:
    """(answered 200, seconds, what went wrong) for one GET on a new connection."""
    start = time.monotonic()
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.request("GET", PATH, headers={"Host": f"{HOST}:{port}"})
        response = connection.getresponse()
        response.read()
        ok = response.status == 200
        return ok, time.monotonic() - start, "" if ok else f"HTTP {response.status}"
    except (OSError, http.client.HTTPException) as exc:
        return False, time.monotonic() - start, type(exc).__name__
    finally:
        connection.close()


def wait_until_serving(port: int, process: subprocess.Popen, log: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        if get(port, timeout=2.0)[0]:
            return
        time.sleep(0.2)
    raise SystemExit(f"the server did not answer {PATH} within {seconds:.0f} s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, seconds: float = 40.0) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class SlowClient(threading.Thread):
    """Sends a request line, then one header line every `interval` seconds, never the blank line
    that ends the headers. A server that drops it (408, reset, close) is noted, and it connects
    again, as an attacker would."""

    def __init__(self, index: int, port: int, interval: float, stop_event: threading.Event):
        super().__init__(daemon=True, name=f"slow-client-{index}")
        self.index, self.port, self.interval, self.stop_event = index, port, interval, stop_event
        self.connections = 0
        self.dropped = 0
        self.lines = 0
        self.started_sending = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                sock = socket.create_connection((HOST, self.port), timeout=5)
            except OSError:
                self.stop_event.wait(self.interval)
                continue
            self.connections += 1
            try:
                self.hold(sock)
            finally:
                sock.close()

    def hold(self, sock: socket.socket) -> None:
        try:
            sock.sendall(f"GET {PATH} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n".encode())
            self.started_sending.set()
            line = 0
            while not self.stop_event.wait(self.interval):
                # Anything to read now is an answer (408) or the end of the connection.
                if select.select([sock], [], [], 0)[0]:
                    self.dropped += 1
                    return
                line += 1
                sock.sendall(f"X-Slow-{self.index}: {line}\r\n".encode())
                self.lines += 1
        except OSError:
            self.dropped += 1


def nginx_config(prefix: Path, listen_port: int, upstream_port: int) -> Path:
    """deploy/nginx/docker.conf with the compose addresses replaced by loopback ones, inside a
    minimal nginx.conf that keeps every file in `prefix`."""
    site = (NGINX_DIR / "docker.conf").read_text()
    replacements = [
        # Docker's DNS and the `resolve` parameter (nginx 1.27.3+) only find the `web` service.
        (r"^\s*resolver .*;\n", ""),
        (r"server web:8000 resolve;", f"server {HOST}:{upstream_port};"),
        (r"listen 80;", f"listen {HOST}:{listen_port};"),
        (r"include snippets/crucible-proxy\.conf;", f"include {NGINX_DIR / 'crucible-proxy.conf'};"),
    ]
    for pattern, replacement in replacements:
        site, count = re.subn(pattern, replacement, site, flags=re.M)
        if count != 1:
            raise SystemExit(f"deploy/nginx/docker.conf changed: expected one match of {pattern!r}")
    (prefix / "site.conf").write_text(site)
    temp = {name: prefix / name for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir()
    conf = prefix / "nginx.conf"
    conf.write_text(
        "daemon off;\nmaster_process off;\nworker_processes 1;\n"
        f"pid {prefix / 'nginx.pid'};\nerror_log {prefix / 'error.log'} warn;\n"
        "events { worker_connections 2048; }\n"
        "http {\n  access_log off;\n"
        + "".join(f"  {name}_temp_path {path};\n" for name, path in temp.items())
        + f"  include {prefix / 'site.conf'};\n}}\n"
    )
    return conf


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow-clients", type=int, default=3 * OLD_SYNC_WORKERS,
                        help="connections that send one header line per --interval (default 9: "
                             "three times the old 3 sync workers)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two header lines")
    parser.add_argument("--duration", type=float, default=20.0,
                        help="seconds of normal requests while the slow clients hold their connections")
    parser.add_argument("--threshold", type=float, default=2.0,
                        help="slowest acceptable normal request, in seconds (exit 1 above it)")
    parser.add_argument("--request-timeout", type=float, default=10.0,
                        help="a normal request not answered within this counts as failed")
    parser.add_argument("--gap", type=float, default=0.2, help="seconds between two normal requests")
    parser.add_argument("--sync", action="store_true",
                        help=f"the old command instead of web.sh's: {OLD_SYNC_WORKERS} sync workers")
    parser.add_argument("--proxy", action="store_true",
                        help="put nginx in front, configured from deploy/nginx (needs an nginx binary)")
    args = parser.parse_args(argv)
    if not 0 <= args.slow_clients <= MAX_SLOW_CLIENTS:
        parser.error(f"--slow-clients must be between 0 and {MAX_SLOW_CLIENTS}")
    if not 0 < args.duration <= MAX_DURATION:
        parser.error(f"--duration must be more than 0 and at most {MAX_DURATION:.0f} seconds")
    for name in ("interval", "threshold", "request_timeout", "gap"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def server_environment(data_dir: Path, port: int) -> dict[str, str]:
    """The embedded settings on a fresh data directory: SQLite and the filesystem broker, whatever
    DATABASE_URL or CELERY_BROKER_URL the caller has set."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.config.settings.local",
        DEBUG="false",
        CRUCIBLE_DATA_DIR=str(data_dir),
        WEB_BIND=f"{HOST}:{port}",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        LOG_LEVEL="WARNING",
    )
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    nginx = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None)
    if args.proxy and nginx is None:
        print("--proxy needs an nginx binary (apt install nginx)", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="crucible-slow-clients-") as tmp:
        tmp_path = Path(tmp)
        data_dir = tmp_path / "data"
        gunicorn_port = free_port()
        env = server_environment(data_dir, gunicorn_port)
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO_ROOT,
                       env=env, check=True, stdout=subprocess.DEVNULL, timeout=300)

        if args.sync:
            gunicorn = ["webapp.config.wsgi:application", "--bind", f"{HOST}:{gunicorn_port}",
                        "--workers", str(OLD_SYNC_WORKERS)]
            described = f"gunicorn, the old command: {OLD_SYNC_WORKERS} sync workers"
        else:
            gunicorn = gunicorn_arguments_of_web_script()
            described = (f"gunicorn as deploy/bin/web.sh runs it: {env.get('WEB_WORKER_CLASS') or 'gthread'}, "
                         f"WEB_WORKERS={env.get('WEB_WORKERS') or 'default'}, "
                         f"WEB_THREADS={env.get('WEB_THREADS') or 'default'}")
        log = tmp_path / "server.log"
        processes: list[tuple[subprocess.Popen, int]] = []
        stop_event = threading.Event()
        clients: list[SlowClient] = []
        try:
            with log.open("w") as log_file:
                server = subprocess.Popen([sys.executable, "-m", "gunicorn", *gunicorn], cwd=REPO_ROOT,
                                          env=env, stdout=log_file, stderr=subprocess.STDOUT)
                processes.append((server, signal.SIGTERM))
                wait_until_serving(gunicorn_port, server, log)
                port = gunicorn_port
                if args.proxy:
                    port = free_port()
                    conf = nginx_config(tmp_path, port, gunicorn_port)
                    proxy = subprocess.Popen([nginx, "-p", str(tmp_path), "-c", str(conf), "-e",
                                              str(tmp_path / "error.log")],
                                             stdout=log_file, stderr=subprocess.STDOUT)
                    processes.append((proxy, signal.SIGQUIT))
                    wait_until_serving(port, proxy, log)
                    described += ", behind nginx (deploy/nginx/docker.conf)"

            print(described)
            print(f"{args.slow_clients} slow clients (one header line every {args.interval:g} s) on "
                  f"{HOST}:{port}; normal GET {PATH} for {args.duration:g} s")
            clients = [SlowClient(i, port, args.interval, stop_event) for i in range(args.slow_clients)]
            for client in clients:
                client.start()
            for client in clients:
                client.started_sending.wait(timeout=10)
            # Long enough for each server to hand every slow connection to a worker or thread.
            time.sleep(min(2.0, args.interval * 1.5))

            latencies, failures = [], []
            end = time.monotonic() + args.duration
            while time.monotonic() < end:
                ok, seconds, problem = get(port, args.request_timeout)
                latencies.append(seconds)
                if not ok:
                    failures.append(problem)
                time.sleep(args.gap)
        finally:
            stop_event.set()
            for client in clients:
                client.join(timeout=args.interval + 6)
            for process, sig in reversed(processes):
                stop(process, sig)

        held = sum(1 for c in clients if c.connections)
        dropped = sum(c.dropped for c in clients)
        print(f"slow clients: {held}/{len(clients)} connected, {sum(c.lines for c in clients)} header lines "
              f"sent, dropped by the server {dropped} times")
        print(f"normal requests: {len(latencies)}, failed {len(failures)}"
              + (f" ({', '.join(sorted(set(failures)))})" if failures else ""))
        print(f"latency: p50 {statistics.median(latencies):.3f} s, p95 {percentile(latencies, 0.95):.3f} s, "
              f"max {max(latencies):.3f} s (threshold {args.threshold:g} s)")
        passed = not failures and max(latencies) <= args.threshold
        print("PASS: normal requests answered while slow clients held connections" if passed
              else "FAIL: slow clients kept normal requests from being answered in time")
        return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
