"""Settings for pytest: the same environment-driven database and broker, fast hashing.

Tests keep their data (SQLite test file, filesystem broker, run folders) in
.crucible-test, apart from a demo that may be running from .crucible.
"""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("CRUCIBLE_DATA_DIR", str(Path(__file__).resolve().parents[3] / ".crucible-test"))

from webapp.config.settings.base import *  # noqa: E402, F403
from webapp.config.settings.base import DATA_DIR, DATABASES  # noqa: E402

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
