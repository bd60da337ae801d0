"""The embedded default for one person on one machine: DEBUG on, a generated key."""

from webapp.config.env import env_bool
from webapp.config.settings.base import *  # noqa: F403
from webapp.config.settings.base import DATA_DIR, SECRET_KEY

DEBUG = env_bool("DEBUG", True)


def _local_secret_key() -> str:
    """A per-install key kept in the data dir, so sessions survive restarts."""
    import secrets

    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = SECRET_KEY or _local_secret_key()
