"""The quick start: first login printed once, a seeded demo project, web + worker that start and stop."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command

from webapp.projects.models import Membership, Project
from webapp.runs.services.demo import FIRST_LOGIN_FILE, Login, first_login_to_show

ROOT = Path(__file__).resolve().parents[3]


def _setup_output() -> str:
    out = io.StringIO()
    call_command("crucible_setup", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_setup_prints_the_login_once_and_seeds_the_demo():
    first = _setup_output()
    match = re.search(r"Created login admin / (\S+)", first)
    assert match, first
    assert authenticate(username="admin", password=match.group(1)) is not None
    second = _setup_output()
    assert match.group(1) not in second and "exists" in second
    # crucible_start says it again once the server is up, until the password is changed.
    assert first_login_to_show() == Login("admin", match.group(1))
    admin = get_user_model().objects.get(username="admin")
    admin.set_password("changed by its owner")
    admin.save()
    assert first_login_to_show() is None
    assert not (settings.DATA_DIR / FIRST_LOGIN_FILE).exists()

    project = Project.objects.get(slug="demo")
    assert Membership.objects.get(project=project).role == "owner"
    datasets = {d.name: d for d in project.datasets.all()}
    assert datasets["workplace-synthetic"].tasks.count() == 400
    assert datasets["workplace-json"].environment == "json_tool_call"
    for dataset in datasets.values():
        assert set(dataset.tasks.values_list("split", flat=True)) == {"train", "validation", "held_out"}
    assert {v.kind for v in project.verifiers.all()} == {"workplace", "json_tool_call"}
    assert all(v.versions.count() == 1 for v in project.verifiers.all())
    assert project.model_specs.get().spec == "smollm2-135m-instruct"
    assert Project.objects.filter(slug="demo").count() == 1  # seeding twice adds nothing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_start_runs_web_and_worker_and_stops_both(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update({"CRUCIBLE_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "webapp.config.settings.local"})
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=120)
    setup = subprocess.run([sys.executable, "manage.py", "crucible_setup", "--no-demo"], cwd=ROOT, env=env,
                           check=True, capture_output=True, text=True, timeout=120).stdout
    password = re.search(r"Created login admin / (\S+)", setup).group(1)
    port = _free_port()
    log = open(tmp_path / "start.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "manage.py", "crucible_start", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, status = time.time() + 60, None
        while time.time() < deadline and status is None:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=2).status
            except OSError:
                time.sleep(0.5)
        text = (tmp_path / "start.log").read_text()
        deadline = time.time() + 60
        while text.count("ready.") < 2 and time.time() < deadline:
            time.sleep(0.5)
            text = (tmp_path / "start.log").read_text()
        assert status == 200, text[-3000:]
        assert f"Crucible is running at http://127.0.0.1:{port}/" in text
        # The login is said again once the web answers; requests are not logged line by line.
        assert f"Log in as admin / {password}" in text.split("Crucible is running at")[1], text[-3000:]
        assert "GET /login/" not in text, text[-3000:]
        assert "long@" in text and "light@" in text and text.count("ready.") == 2, text[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGINT) if proc.poll() is None else None
        proc.wait(timeout=60)
    assert proc.returncode == 0

    def group_alive() -> bytes:
        return subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).stdout

    deadline = time.time() + 20
    while group_alive() and time.time() < deadline:
        time.sleep(0.5)
    assert group_alive() == b"", "web or worker processes outlived crucible_start"
