"""Typed readers for environment variables.

Every reader raises ImproperlyConfigured with the variable's name and what a good
value looks like, so a bad deployment stops at start-up with a message a person can
act on instead of failing later in an unrelated place.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value.strip()


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"Environment variable {name}={raw!r} is not a boolean: use true/false, 1/0, yes/no or on/off."
    )


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(
            f"Environment variable {name}={raw!r} is not an integer: set it to a whole number."
        ) from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(
            f"Environment variable {name}={value} is too small: it must be at least {minimum}."
        )
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_url(name: str, default: str | None, *, schemes: tuple[str, ...]) -> str | None:
    """A URL whose scheme must be one of `schemes` (e.g. postgres, sqlite, redis)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip()
    scheme = value.split("://", 1)[0].lower() if "://" in value else ""
    if scheme not in schemes:
        raise ImproperlyConfigured(
            f"Environment variable {name}={_redact(value)!r} has an unsupported scheme "
            f"{scheme or '(none)'!r}: use one of {', '.join(s + '://' for s in schemes)}."
        )
    return value


def env_dir(name: str, default: Path) -> Path:
    """A directory that is created if missing; a path that cannot be one is an error."""
    raw = os.environ.get(name)
    path = Path(raw).expanduser() if raw and raw.strip() else default
    path = path.resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"Environment variable {name}={str(path)!r} cannot be used as a data directory "
            f"({exc.strerror}): point it at a writable folder."
        ) from None
    if not os.access(path, os.W_OK):
        raise ImproperlyConfigured(
            f"Environment variable {name}={str(path)!r} is not writable: point it at a writable folder."
        )
    return path


def _redact(url: str) -> str:
    """Hide a password in a URL before it reaches a log or an error page."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
