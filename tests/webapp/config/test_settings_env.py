"""Start-up configuration: bad values stop the process with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _run(args: list[str], env_extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"}}
    env.update({"CRUCIBLE_DATA_DIR": str(tmp_path / "data")}, **env_extra)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _setup(settings_module: str, env_extra: dict[str, str], tmp_path: Path):
    code = "import django; django.setup(); from django.conf import settings; print(settings.DATABASES['default']['ENGINE'])"
    return _run(["-c", code], {"DJANGO_SETTINGS_MODULE": settings_module, **env_extra}, tmp_path)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DEBUG", "maybe"),
        ("CRUCIBLE_JOB_LEASE_SECONDS", "two minutes"),
        ("CRUCIBLE_JOB_MAX_ATTEMPTS", "0"),
        ("DATABASE_URL", "mysql://db/crucible"),
        ("CELERY_BROKER_URL", "kafka://broker:9092"),
        ("SECURE_COOKIES", "sometimes"),
    ],
)
def test_bad_value_stops_startup_naming_the_variable(variable, value, tmp_path):
    result = _setup("webapp.config.settings.local", {variable: value}, tmp_path)
    assert result.returncode != 0
    assert variable in result.stderr
    assert "ImproperlyConfigured" in result.stderr


def test_data_dir_that_cannot_be_created_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = _setup("webapp.config.settings.local", {"CRUCIBLE_DATA_DIR": str(blocker / "sub")}, tmp_path)
    assert result.returncode != 0
    assert "CRUCIBLE_DATA_DIR" in result.stderr


def test_embedded_default_is_sqlite_and_filesystem_broker(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DATABASES['default']['ENGINE']); print(settings.CELERY_BROKER_URL); "
        "print(settings.CELERY_BROKER_TRANSPORT_OPTIONS['data_folder_in'])"
    )
    result = _run(["-c", code], {"DJANGO_SETTINGS_MODULE": "webapp.config.settings.local"}, tmp_path)
    assert result.returncode == 0, result.stderr
    engine, broker, folder = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert broker == "filesystem://"
    assert folder.startswith(str(tmp_path / "data"))


def test_production_needs_a_real_secret_key(tmp_path):
    result = _setup("webapp.config.settings.production", {"SECRET_KEY": "short", "ALLOWED_HOSTS": "crucible.example.com"}, tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_production_passes_deploy_checks(tmp_path):
    env = {
        "DJANGO_SETTINGS_MODULE": "webapp.config.settings.production",
        "SECRET_KEY": "x7Kp2vQ9mL4nR8sT1wY6zB3cD5fG0hJ-aE_uI7oP9qW2eR4tY6uI8oP0aS2dF4gH",
        "ALLOWED_HOSTS": "crucible.example.com",
    }
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
