"""bench/slow_clients.py (issue 23): normal requests are still answered while slow clients hold
connections. The end-to-end runs start real gunicorn (and nginx) processes on loopback ports for
a few seconds each; the numbers for the README come from longer runs of the script itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.bench.bench_scripts import BENCH, load_bench_script

SCRIPT = BENCH / "slow_clients.py"
NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None)
needs_nginx = pytest.mark.skipif(NGINX is None, reason="needs an nginx binary (apt install nginx)")


@pytest.fixture(scope="module")
def slow_clients():
    return load_bench_script("slow_clients.py")


def run_script(*arguments: str, **web_env: str) -> subprocess.CompletedProcess:
    """The script with the deploy defaults: any WEB_* of the caller's environment left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEB_")}
    env.update(web_env)
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True,
                          env=env, cwd=BENCH.parent, timeout=180)


def test_the_script_starts_gunicorn_with_the_arguments_of_web_sh(slow_clients):
    assert slow_clients.gunicorn_arguments_of_web_script() == [
        "--config", "deploy/gunicorn.conf.py", "webapp.config.wsgi:application"]


def test_the_nginx_config_is_the_compose_one_on_loopback_addresses(slow_clients, tmp_path):
    conf = slow_clients.nginx_config(tmp_path, 18080, 18000)

    site = (tmp_path / "site.conf").read_text()
    assert "server 127.0.0.1:18000;" in site and "listen 127.0.0.1:18080;" in site
    assert "web:8000" not in site and "resolver" not in site
    assert "proxy_pass http://crucible_web;" in site
    if NGINX:
        result = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(conf), "-e",
                                 str(tmp_path / "error.log")], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("arguments, message", [
    (["--slow-clients", "501"], "--slow-clients must be between 0 and 500"),
    (["--duration", "0"], "--duration must be more than 0"),
    (["--interval", "0"], "--interval must be positive"),
])
def test_unbounded_runs_are_refused(slow_clients, arguments, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        slow_clients.parse_args(arguments)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_the_deployed_config_answers_while_three_times_the_old_workers_are_held():
    result = run_script("--slow-clients", "9", "--duration", "3")

    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "gunicorn as deploy/bin/web.sh runs it: gthread" in result.stdout
    assert "slow clients: 9/9 connected" in result.stdout
    assert "failed 0" in result.stdout and "PASS" in result.stdout


@pytest.mark.slow
def test_the_old_three_sync_workers_are_starved_by_three_slow_clients():
    """The script does see the failure it exists to catch."""
    result = run_script("--sync", "--slow-clients", "3", "--duration", "2", "--request-timeout", "2")

    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    assert "3 sync workers" in result.stdout
    assert "TimeoutError" in result.stdout and "FAIL" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("proxy", [pytest.param(False, id="gunicorn-alone"),
                                   pytest.param(True, id="behind-nginx", marks=needs_nginx)])
def test_more_slow_clients_than_threads_starve_gunicorn_alone_but_not_behind_nginx(proxy):
    """gthread reads headers in its threads: one worker with 2 threads is full with 2 slow
    clients. nginx reads whole requests first, so gunicorn never sees them."""
    arguments = ["--slow-clients", "6", "--duration", "3", "--request-timeout", "2"]
    result = run_script(*arguments, *(["--proxy"] if proxy else []), WEB_WORKERS="1", WEB_THREADS="2")

    assert result.returncode == (0 if proxy else 1), result.stdout + result.stderr[-3000:]
    assert "WEB_WORKERS=1, WEB_THREADS=2" in result.stdout
    assert ("behind nginx" in result.stdout) is proxy
