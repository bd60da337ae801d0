"""The test settings keep two xdist processes apart: a data folder and a Redis key prefix each, which
the worker subprocesses a test starts inherit (and do not nest a second time)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Prints what the settings chose, then what a child started with this process's environment chose:
# the way a test starts a celery worker or a training subprocess.
SHOW = (
    "import os, subprocess, sys, django; django.setup(); from django.conf import settings\n"
    "print(settings.DATA_DIR)\n"
    "print(settings.CELERY_BROKER_TRANSPORT_OPTIONS.get('global_keyprefix'))\n"
    "print(settings.CELERY_BROKER_TRANSPORT_OPTIONS.get('data_folder_in'))\n"
    "if not os.environ.get('CHILD'):\n"
    "    child = subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[1]],\n"
    "                           env={**os.environ, 'CHILD': '1'}, capture_output=True, text=True)\n"
    "    print(child.stdout.split()[0] if child.returncode == 0 else child.stderr)\n"
)


def _settings(tmp_path: Path, **env_extra: str) -> list[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "PYTEST_XDIST_WORKER", "CRUCIBLE_DATA_DIR"}}
    env.update({"DJANGO_SETTINGS_MODULE": "webapp.config.settings.test",
                "CRUCIBLE_DATA_DIR": str(tmp_path / "data"), **env_extra})
    result = subprocess.run([sys.executable, "-c", SHOW, SHOW], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_an_xdist_process_and_its_children_share_a_folder_and_a_redis_prefix_of_their_own(tmp_path):
    data_dir, prefix, _, child_data_dir = _settings(tmp_path, PYTEST_XDIST_WORKER="gw7",
                                                    CELERY_BROKER_URL="redis://127.0.0.1:6379/0")
    assert data_dir == str(tmp_path / "data" / "gw7")
    assert prefix == "gw7:"
    assert child_data_dir == data_dir


def test_the_filesystem_broker_of_an_xdist_process_is_in_its_own_folder(tmp_path):
    data_dir, prefix, broker_folder, child_data_dir = _settings(tmp_path, PYTEST_XDIST_WORKER="gw1")
    assert data_dir == child_data_dir == str(tmp_path / "data" / "gw1")
    assert broker_folder.startswith(data_dir + os.sep) and prefix == "None"


def test_one_process_keeps_the_data_folder_it_was_given(tmp_path):
    data_dir, prefix, _, child_data_dir = _settings(tmp_path, CELERY_BROKER_URL="redis://127.0.0.1:6379/0")
    assert data_dir == child_data_dir == str(tmp_path / "data")
    assert prefix == "None"
