"""The deployment files agree with each other and start each process with the exact commands the
README and CI use. Docker and systemd do not run here, so the compose file and the units are
parsed, and the start scripts run against stub `python`, `gunicorn` and `celery` executables that
record how they were called."""

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
BIN = DEPLOY / "bin"
SYSTEMD = DEPLOY / "systemd"
INSTALL_ROOT = "/opt/crucible"

WEB_COMMANDS = [
    "python manage.py migrate --noinput",
    "python manage.py collectstatic --noinput",
    "gunicorn --config deploy/gunicorn.conf.py webapp.config.wsgi:application",
]
GUNICORN_CONF = DEPLOY / "gunicorn.conf.py"
NGINX = DEPLOY / "nginx"
NGINX_SNIPPET = "snippets/crucible-proxy.conf"
CPU_WORKER_COMMAND = "celery -A webapp.config worker -Q default,verify -l INFO --concurrency 2"
GPU_WORKER_COMMAND = (
    "celery -A webapp.config worker -Q train,rollout -l INFO --concurrency 1"
    " --prefetch-multiplier 1 -O fair"
)
BEAT_COMMAND = "celery -A webapp.config beat -l INFO"

SERVICE_SCRIPTS = {
    "web": "web.sh",
    "worker-cpu": "worker-cpu.sh",
    "worker-gpu": "worker-gpu.sh",
    "beat": "beat.sh",
}
SETTINGS_VARIABLES = [
    "SECRET_KEY",
    "DEBUG",
    "ALLOWED_HOSTS",
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "CRUCIBLE_DATA_DIR",
    "CSRF_TRUSTED_ORIGINS",
    "SECURE_COOKIES",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "CRUCIBLE_WORKER_QUEUES",
    "CRUCIBLE_JOB_MAX_ATTEMPTS",
    "CRUCIBLE_JOB_LEASE_SECONDS",
    "DJANGO_SETTINGS_MODULE",
]

STUB = """#!/bin/sh
# Records its pid, working directory and arguments (each in brackets), then exits with 1 if its
# name is in $STUB_FAIL.
name=$(basename "$0")
{
  printf '%s|%s|%s' "$$" "$PWD" "$name"
  for arg in "$@"; do printf '[%s]' "$arg"; done
  printf '\\n'
} >> "$STUB_RECORD"
case " $STUB_FAIL " in *" $name "*) exit 1 ;; esac
exit 0
"""


def bracketed(command: str) -> str:
    """A command line in the stubs' record format: program name, then each argument bracketed."""
    program, *args = shlex.split(command)
    return program + "".join(f"[{arg}]" for arg in args)


def run_start_script(
    script: str, tmp_path: Path, **extra_env: str
) -> tuple[int, int, list[tuple[int, str, str]]]:
    """Run a deploy/bin script from an unrelated directory with the stubs first on PATH.

    Returns (exit status, the script's pid, [(pid, working directory, command) per stub call]).
    """
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    for name in ("python", "gunicorn", "celery"):
        stub = stubs / name
        stub.write_text(STUB)
        stub.chmod(0o755)
    record = tmp_path / "record.txt"
    record.write_text("")
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_RECORD": str(record), **extra_env}
    process = subprocess.Popen([str(BIN / script)], cwd=tmp_path, env=env)
    status = process.wait(timeout=20)
    calls = []
    for line in record.read_text().splitlines():
        pid, cwd, command = line.split("|", 2)
        calls.append((int(pid), cwd, command))
    return status, process.pid, calls


def load_compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def load_unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str
    parser.read_string(path.read_text())
    return parser


def seconds(duration: str) -> int:
    """Seconds in a compose ("5m", "60s") or systemd ("5min", "60s") duration."""
    match = re.fullmatch(r"(\d+)\s*(s|m|min)", duration)
    assert match, f"unexpected duration {duration!r}"
    return int(match[1]) * (1 if match[2] == "s" else 60)


# Start scripts


def test_web_script_migrates_collects_static_then_becomes_gunicorn(tmp_path):
    status, script_pid, calls = run_start_script("web.sh", tmp_path)

    assert status == 0
    assert [command for _, _, command in calls] == [bracketed(c) for c in WEB_COMMANDS]
    assert {cwd for _, cwd, _ in calls} == {str(REPO_ROOT)}
    # gunicorn replaces the shell (exec), so that SIGTERM reaches it directly.
    assert calls[-1][0] == script_pid
    assert calls[0][0] != script_pid


def test_web_script_does_not_serve_when_migration_fails(tmp_path):
    status, _, calls = run_start_script("web.sh", tmp_path, STUB_FAIL="python")

    assert status != 0
    assert [command for _, _, command in calls] == [bracketed(WEB_COMMANDS[0])]


@pytest.mark.parametrize(
    ("script", "command"),
    [
        ("worker-cpu.sh", CPU_WORKER_COMMAND),
        ("worker-gpu.sh", GPU_WORKER_COMMAND),
        ("beat.sh", BEAT_COMMAND),
    ],
)
def test_celery_script_becomes_the_exact_celery_command(tmp_path, script, command):
    status, script_pid, calls = run_start_script(script, tmp_path)

    assert status == 0
    assert calls == [(script_pid, str(REPO_ROOT), bracketed(command))]


@pytest.mark.parametrize(
    ("script", "command", "default_queues"),
    [
        ("worker-cpu.sh", CPU_WORKER_COMMAND, "default,verify"),
        ("worker-gpu.sh", GPU_WORKER_COMMAND, "train,rollout"),
    ],
)
def test_worker_queues_are_replaced_by_crucible_worker_queues(
    tmp_path, script, command, default_queues
):
    _, _, calls = run_start_script(script, tmp_path, CRUCIBLE_WORKER_QUEUES="rollout")

    expected = command.replace(f"-Q {default_queues}", "-Q rollout")
    assert expected != command
    assert [command for _, _, command in calls] == [bracketed(expected)]


@pytest.mark.parametrize("script", sorted(SERVICE_SCRIPTS.values()))
def test_start_script_is_strict_executable_bash(script):
    path = BIN / script
    text = path.read_text()

    assert os.access(path, os.X_OK), f"{path} is not executable: chmod +x it"
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=10)


def test_every_start_script_has_a_process_in_compose_and_systemd():
    scripts = {path.name for path in BIN.glob("*.sh")}
    units = {
        Path(load_unit(path)["Service"]["ExecStart"]).name for path in SYSTEMD.glob("*.service")
    }

    assert scripts == set(SERVICE_SCRIPTS.values())
    assert units == scripts


# docker-compose.yml


def test_compose_has_the_stack_services():
    services = load_compose()["services"]

    assert set(services) == {"postgres", "redis", "proxy", *SERVICE_SCRIPTS}
    assert services["postgres"]["image"] == "postgres:16"
    assert services["redis"]["image"] == "redis:7"
    for name in ("postgres", "redis"):
        assert services[name]["healthcheck"]["test"], f"{name} needs a healthcheck"


@pytest.mark.parametrize(("service", "script"), sorted(SERVICE_SCRIPTS.items()))
def test_compose_process_runs_its_start_script_on_shared_data(service, script):
    compose = load_compose()
    spec = compose["services"][service]

    assert spec["command"] == [f"deploy/bin/{script}"]
    assert spec["env_file"] == ".env"
    assert spec["environment"]["DJANGO_SETTINGS_MODULE"] == "webapp.config.settings.production"
    data_dir = spec["environment"]["CRUCIBLE_DATA_DIR"]
    assert f"crucible-data:{data_dir}" in spec["volumes"]
    assert "crucible-data" in compose["volumes"]
    assert spec["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
    }
    assert (DEPLOY / spec["build"]["context"]).resolve() == REPO_ROOT
    assert (REPO_ROOT / spec["build"]["dockerfile"]).is_file()


def test_compose_builds_web_without_torch_and_gpu_worker_with_gpu_extras():
    services = load_compose()["services"]

    assert services["web"]["build"]["dockerfile"] == "deploy/Dockerfile.web"
    for name in ("worker-cpu", "worker-gpu", "beat"):
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile.worker"
    assert services["worker-gpu"]["build"]["args"] == {"EXTRAS": "train,gpu"}
    assert "args" not in services["worker-cpu"]["build"]


def test_compose_gpu_worker_reserves_nvidia_gpus():
    services = load_compose()["services"]
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]

    assert [(d["driver"], d["capabilities"]) for d in devices] == [("nvidia", ["gpu"])]
    assert all("deploy" not in services[name] for name in ("web", "worker-cpu", "beat"))


def test_compose_variables_are_documented_in_env_example():
    used = set(re.findall(r"\$\{(\w+)", (DEPLOY / "docker-compose.yml").read_text()))
    documented = set(re.findall(r"^#?\s*(\w+)=", (DEPLOY / ".env.example").read_text(), re.M))

    assert used, "expected ${...} references for the database and Redis passwords"
    assert used <= documented


@pytest.mark.parametrize("service", ["web", "worker-cpu", "worker-gpu"])
def test_compose_and_systemd_allow_the_same_graceful_stop(service):
    compose_grace = load_compose()["services"][service]["stop_grace_period"]
    unit = load_unit(SYSTEMD / f"crucible-{service}.service")

    assert seconds(compose_grace) == seconds(unit["Service"]["TimeoutStopSec"])


# Dockerfiles


def pip_install_lines(dockerfile: str) -> list[str]:
    text = (DEPLOY / dockerfile).read_text().replace("\\\n", " ")
    return [line for line in text.splitlines() if line.startswith("RUN") and "pip install" in line]


def test_web_image_installs_the_core_only():
    installs = pip_install_lines("Dockerfile.web")

    assert any(re.search(r"pip install \.(\s|$)", line) for line in installs)
    for line in installs:
        assert "[" not in line and "train" not in line and "torch" not in line, line


def test_worker_image_installs_the_extras_of_its_build_argument():
    text = (DEPLOY / "Dockerfile.worker").read_text()

    assert re.search(r"^ARG EXTRAS=train$", text, re.M)
    assert any(
        'pip install ".[${EXTRAS}]"' in line for line in pip_install_lines("Dockerfile.worker")
    )


@pytest.mark.parametrize("dockerfile", ["Dockerfile.web", "Dockerfile.worker"])
def test_image_is_slim_python_311_running_as_non_root_from_existing_sources(dockerfile):
    text = (DEPLOY / dockerfile).read_text()
    users = re.findall(r"^USER (\S+)$", text, re.M)
    copied = [
        source
        for line in re.findall(r"^COPY (?:--\S+ )*(.+)$", text, re.M)
        for source in line.split()[:-1]
    ]

    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert copied
    missing = [source for source in copied if not (REPO_ROOT / source).exists()]
    assert not missing, f"{dockerfile} copies paths the repository lacks: {missing}"


# systemd units


@pytest.mark.parametrize("unit_path", sorted(SYSTEMD.glob("*.service")), ids=lambda p: p.name)
def test_systemd_unit_runs_a_start_script_with_the_shared_env_file(unit_path):
    service = load_unit(unit_path)["Service"]
    exec_start = service["ExecStart"]

    assert exec_start.startswith(f"{INSTALL_ROOT}/deploy/bin/")
    script = REPO_ROOT / Path(exec_start).relative_to(INSTALL_ROOT)
    assert os.access(script, os.X_OK), f"{exec_start} has no executable script in deploy/bin"
    assert service["EnvironmentFile"] == "/etc/crucible/crucible.env"
    assert service["WorkingDirectory"] == INSTALL_ROOT
    assert service["Restart"] == "always"
    assert service["KillMode"] == "mixed"
    assert service["User"] not in ("root", "0")


@pytest.mark.parametrize("unit", ["crucible-worker-cpu.service", "crucible-worker-gpu.service"])
def test_worker_units_wait_minutes_for_celery_warm_shutdown(unit):
    service = load_unit(SYSTEMD / unit)["Service"]

    assert seconds(service["TimeoutStopSec"]) >= 300


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_accepts_the_units(tmp_path):
    env_file = tmp_path / "crucible.env"
    env_file.write_text("")
    for unit in SYSTEMD.glob("*.service"):
        text = unit.read_text().replace("/etc/crucible/crucible.env", str(env_file))
        (tmp_path / unit.name).write_text(text.replace(INSTALL_ROOT, str(REPO_ROOT)))
    units = sorted(str(path) for path in tmp_path.glob("*.service"))

    result = subprocess.run(
        ["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0 and result.stderr == "", result.stderr


# .env.example


def test_env_example_documents_every_setting_with_a_comment():
    lines = (DEPLOY / ".env.example").read_text().splitlines()
    assignments = {}
    for index, line in enumerate(lines):
        match = re.fullmatch(r"#?\s*([A-Z_]+)=(.*)", line)
        if match:
            assignments[match[1]] = (index, match[2])

    for name in SETTINGS_VARIABLES:
        assert name in assignments, f".env.example does not mention {name}"
        index, value = assignments[name]
        assert lines[index - 1].startswith("# "), f"{name} has no comment line above it"
        assert not value.startswith(("'", '"')), f"{name}: systemd and compose keep quotes"
    assert not any(line.startswith("export ") for line in lines)


# Serving: gunicorn's workers and the reverse proxy in front (issue 23: three slow clients must
# not stop the site; bench/slow_clients.py measures it)


def gunicorn_settings(config: Path = GUNICORN_CONF, **web_env: str) -> tuple[int, dict[str, str]]:
    """(exit status, {setting: value}) as gunicorn reads `config`, in an environment without the
    caller's WEB_* variables plus `web_env`; "output" holds what gunicorn printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEB_")}
    env.update(web_env)
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "--print-config", "--config", str(config),
         "webapp.config.wsgi:application"],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60,
    )
    settings = dict(re.findall(r"^(\w+)\s+= (.*)$", result.stdout, re.M))
    settings["output"] = result.stdout + result.stderr
    return result.returncode, settings


def nginx_directives(path: Path) -> dict[str, list[str]]:
    """Every one-line `name value;` directive of an nginx file (comments left out), by name."""
    text = re.sub(r"#.*", "", path.read_text())
    found: dict[str, list[str]] = {}
    for name, value in re.findall(r"^\s*([a-z_0-9]+)\s+([^;{}\n]*?)\s*;", text, re.M):
        found.setdefault(name, []).append(value)
    return found


def nginx_seconds(value: str) -> int:
    match = re.fullmatch(r"(\d+)(s|m)?", value)
    assert match, f"unexpected nginx duration {value!r}"
    return int(match[1]) * (60 if match[2] == "m" else 1)


def test_web_script_runs_gunicorn_with_threads_not_sync_workers(tmp_path):
    _, _, calls = run_start_script("web.sh", tmp_path)
    arguments = re.findall(r"\[([^\]]*)\]", calls[-1][2])
    config = REPO_ROOT / arguments[arguments.index("--config") + 1]

    status, settings = gunicorn_settings(config)

    assert status == 0, settings["output"]
    assert settings["worker_class"] == "gthread"
    assert int(settings["workers"]) >= 2
    # More requests at once than the old three sync workers, several per process.
    assert int(settings["threads"]) >= 8
    # A process whose threads are all busy stops taking connections; others answer them.
    assert int(settings["threads"]) < int(settings["worker_connections"]) <= 2 * int(settings["threads"])
    assert settings["bind"] == "['0.0.0.0:8000']"  # what the compose proxy connects to
    assert 0 < int(settings["timeout"]) <= 120
    assert int(settings["graceful_timeout"]) < seconds(load_compose()["services"]["web"]["stop_grace_period"])


def test_gunicorn_workers_threads_and_timeouts_come_from_web_variables():
    status, settings = gunicorn_settings(
        WEB_WORKERS="5", WEB_THREADS="4", WEB_TIMEOUT="45", WEB_KEEPALIVE="7",
        WEB_GRACEFUL_TIMEOUT="20", WEB_BIND="127.0.0.1:9000",
    )

    assert status == 0, settings["output"]
    assert (settings["workers"], settings["threads"], settings["timeout"]) == ("5", "4", "45")
    assert (settings["keepalive"], settings["graceful_timeout"]) == ("7", "20")
    assert settings["bind"] == "['127.0.0.1:9000']"
    assert settings["worker_class"] == "gthread"


def test_sync_workers_stay_sync():
    """gunicorn would run sync workers with more than one thread as gthread ones."""
    status, settings = gunicorn_settings(WEB_WORKER_CLASS="sync", WEB_THREADS="8")

    assert status == 0, settings["output"]
    assert (settings["worker_class"], settings["threads"]) == ("sync", "1")


@pytest.mark.parametrize(("name", "value", "message"), [
    ("WEB_THREADS", "many", "WEB_THREADS='many' is not a whole number"),
    ("WEB_WORKERS", "0", "WEB_WORKERS=0 must be at least 1"),
    ("WEB_WORKER_CLASS", "gevent", "WEB_WORKER_CLASS='gevent': use gthread"),
])
def test_gunicorn_refuses_to_start_on_a_bad_web_variable(name, value, message):
    status, settings = gunicorn_settings(**{name: value})

    assert status != 0
    assert message in settings["output"]


def test_web_variables_are_documented_in_env_example():
    used = set(re.findall(r"\"(WEB_\w+)\"", GUNICORN_CONF.read_text()))
    documented = set(re.findall(r"^#?\s*(\w+)=", (DEPLOY / ".env.example").read_text(), re.M))

    assert {"WEB_WORKERS", "WEB_THREADS", "WEB_TIMEOUT", "WEB_KEEPALIVE", "WEB_BIND"} <= used
    assert used <= documented


def test_compose_publishes_only_the_proxy_and_web_sits_behind_it():
    services = load_compose()["services"]
    proxy, web = services["proxy"], services["web"]
    site = nginx_directives(NGINX / "docker.conf")

    assert {name for name, spec in services.items() if spec.get("ports")} == {"proxy"}
    assert [port.rsplit(":", 1)[-1] for port in proxy["ports"]] == ["80"]
    assert "web" in proxy["depends_on"]
    assert re.fullmatch(r"nginx:[\d.]+", proxy["image"]), "the official nginx image, pinned"
    assert web.get("expose") == ["8000"]
    # Behind one proxy that appends to X-Forwarded-For: the throttles count per client, not per
    # proxy address (deploy/.env can say 2 for a load balancer in front).
    assert web["environment"]["CRUCIBLE_TRUSTED_PROXY_COUNT"] == "${CRUCIBLE_TRUSTED_PROXY_COUNT:-1}"
    assert site["listen"] == ["80"]
    # The proxy passes everything to web's gunicorn, looked up on the compose network.
    assert [value.split()[0] for value in site["server"]] == ["web:8000"]
    assert set(site["proxy_pass"]) == {"http://crucible_web"}  # `/` and the imports location
    assert site["include"] == [NGINX_SNIPPET]
    # Mounted where the official image reads its site and where the site includes the snippet.
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in proxy["volumes"]}
    assert mounts == {
        "/etc/nginx/conf.d/default.conf": "./nginx/docker.conf",
        f"/etc/nginx/{NGINX_SNIPPET}": "./nginx/crucible-proxy.conf",
    }
    assert all((DEPLOY / source).is_file() for source in mounts.values())
    assert all(volume.endswith(":ro") for volume in proxy["volumes"])


def test_proxy_buffers_whole_requests_and_drops_slow_clients():
    from django.conf import settings

    snippet = nginx_directives(NGINX / "crucible-proxy.conf")

    assert snippet["proxy_request_buffering"] == ["on"]
    assert snippet["proxy_buffering"] == ["on"]
    assert nginx_seconds(*snippet["client_header_timeout"]) <= 30
    assert nginx_seconds(*snippet["client_body_timeout"]) <= 60
    # Bodies Django accepts get through; much bigger ones are refused before gunicorn reads them.
    limit = snippet["client_max_body_size"][0]
    assert re.fullmatch(r"\d+m", limit)
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE <= int(limit[:-1]) * 2**20 <= 4 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    headers = dict(value.split(None, 1) for value in snippet["proxy_set_header"])
    assert headers["Host"] == "$http_host"
    assert headers["X-Forwarded-For"] == "$proxy_add_x_forwarded_for"
    assert headers["Connection"] == '""'
    assert snippet["proxy_http_version"] == ["1.1"]


@pytest.mark.parametrize("site", ["docker.conf", "host.conf"])
def test_proxy_site_tells_django_the_scheme_and_reuses_connections_briefly(site):
    directives = nginx_directives(NGINX / site)
    _, settings = gunicorn_settings()

    assert directives["include"] == [NGINX_SNIPPET]
    assert [value.split()[0] for value in directives["proxy_set_header"]] == ["X-Forwarded-Proto"]
    assert "proxy_pass" in directives
    # Only the import URLs (datasets, runs: files up to 200 MB) take bodies over the snippet's 3m.
    assert directives["client_max_body_size"] == ["210m"]
    assert any("datasets|runs)/import" in line for line in (NGINX / site).read_text().splitlines())
    # nginx stops reusing an idle connection before gunicorn closes it.
    assert nginx_seconds(*directives["keepalive_timeout"]) < int(settings["keepalive"])


def test_systemd_web_listens_on_loopback_for_the_nginx_site_example():
    unit = (SYSTEMD / "crucible-web.service").read_text()
    site = nginx_directives(NGINX / "host.conf")

    assert re.findall(r"^Environment=WEB_BIND=(\S+)$", unit, re.M) == ["127.0.0.1:8000"]
    # One proxy appends to X-Forwarded-For: the throttles take the client's address from it.
    assert re.findall(r"^Environment=CRUCIBLE_TRUSTED_PROXY_COUNT=(\S+)$", unit, re.M) == ["1"]
    assert unit.index("Environment=CRUCIBLE_TRUSTED_PROXY_COUNT") < unit.index("EnvironmentFile=")
    assert site["server"] == ["127.0.0.1:8000"]
    assert "443 ssl" in site["listen"]
    assert "deploy/nginx/host.conf" in unit


def test_deploy_docs_tell_operators_about_the_proxy():
    text = (DEPLOY / "MULTI_HOST.md").read_text()

    for needed in ("deploy/nginx/host.conf", "deploy/nginx/crucible-proxy.conf", "WEB_THREADS",
                   "bench/slow_clients.py", "proxy"):
        assert needed in text, f"deploy/MULTI_HOST.md does not mention {needed}"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None)


@pytest.mark.skipif(nginx_binary() is None, reason="nginx not installed")
@pytest.mark.parametrize("site", ["docker.conf", "host.conf"])
def test_nginx_accepts_the_sites(tmp_path, site):
    """`nginx -t` on each site as the image or a Debian host includes it. Names that resolve only
    in compose become loopback addresses; nginx before 1.27.3 lacks the upstream's `resolve`."""
    text = (NGINX / site).read_text()
    version = subprocess.run([nginx_binary(), "-v"], capture_output=True, text=True).stderr
    major_minor_patch = tuple(int(part) for part in re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", version).groups())
    text = text.replace("server web:8000", "server 127.0.0.1:8000")
    if major_minor_patch < (1, 27, 3):
        text = text.replace(" resolve;", ";")
    if "ssl_certificate" in text:
        if shutil.which("openssl") is None:
            pytest.skip("openssl not installed: no certificate for the TLS server")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test",
             "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
            check=True, capture_output=True, timeout=60,
        )
        text = re.sub(r"ssl_certificate \S+;", f"ssl_certificate {tmp_path / 'cert.pem'};", text)
        text = re.sub(r"ssl_certificate_key \S+;", f"ssl_certificate_key {tmp_path / 'key.pem'};", text)
    (tmp_path / "snippets").mkdir()
    shutil.copy(NGINX / "crucible-proxy.conf", tmp_path / NGINX_SNIPPET)
    (tmp_path / "site.conf").write_text(text)
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"pid {tmp_path / 'nginx.pid'};\nevents {{}}\n"
        f"http {{\n  include {tmp_path / 'site.conf'};\n}}\n"
    )

    result = subprocess.run(
        [nginx_binary(), "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
        capture_output=True, text=True, timeout=30,
    )

    assert result.returncode == 0, result.stderr
