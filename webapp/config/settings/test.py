"""Settings for pytest: the same environment-driven database and broker, fast hashing.

Tests keep their data (SQLite test file, filesystem broker, run folders) in
.crucible-test, apart from a demo that may be running from .crucible.

Under pytest-xdist (`make test` runs two test processes) each process is a separate world:
its own folder under the data directory (run folders are named by run id, and both processes'
databases start their ids at 1), its own test database (pytest-django's suffix) and, on Redis,
its own key prefix, so a worker that one process starts never takes a message the other sent.
The worker subprocesses a test starts inherit PYTEST_XDIST_WORKER and land in the same world.
"""

import os
import tempfile
from pathlib import Path

XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _test_data_dir() -> str:
    """The data directory of this test process: one folder per xdist worker, set once for its children."""
    data_dir = Path(os.environ.get("CRUCIBLE_DATA_DIR") or Path(__file__).resolve().parents[3] / ".crucible-test")
    if XDIST_WORKER and data_dir.name != XDIST_WORKER:
        data_dir = data_dir / XDIST_WORKER
    return str(data_dir)


os.environ["CRUCIBLE_DATA_DIR"] = _test_data_dir()

from webapp.config.settings.base import *  # noqa: E402, F403
from webapp.config.settings.base import (  # noqa: E402
    CELERY_BROKER_TRANSPORT_OPTIONS,
    CELERY_BROKER_URL,
    DATA_DIR,
    DATABASES,
)

SECRET_KEY = os.environ.get("SECRET_KEY") or "test-only-secret-key-not-for-production-use-0123456789"
DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
ALLOWED_HOSTS = ["*"]

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not :memory:, so that real worker subprocesses see the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-crucible.sqlite3")}

# Tests keep their model folders in pytest's temporary folders (the journey test registers one,
# worker tests run jobs on one), so the system's temporary folder is a model root here too.
CRUCIBLE_MODEL_ROOTS = [*CRUCIBLE_MODEL_ROOTS, Path(tempfile.gettempdir())]  # noqa: F405

if XDIST_WORKER and CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {**CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": f"{XDIST_WORKER}:"}
