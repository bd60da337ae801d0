"""Project secrets: credentials an owner stores for the project's LLM judges, never shown again.

Why encrypted: a database dump (a backup, a copy handed to someone debugging) must not reveal the
keys. Values are Fernet tokens (AES-128-CBC + HMAC-SHA256) under a key derived with HKDF from
Django's SECRET_KEY, which lives in the server's environment, not in the database. Values set
under an older SECRET_KEY still decrypt while it is listed in SECRET_KEY_FALLBACKS; a value no
key opens is reported as "set it again", never guessed.

Who: owners set, replace and delete (webapp/dashboard/views/settings.py); every member sees the
names (to reference one in a verifier config as `api_key_secret`), nobody sees a value: it is
read only here, by `project_secret_lookup`, when a judge of the same project is called. The
audit log records the name and who, never the value.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from environments.llm_judge import SECRET_NAME, SECRET_PREFIX, JudgeError
from webapp.projects.models import Project, ProjectSecret
from webapp.projects.services.projects import audit_log

NAME_MAX = 64
VALUE_MAX = 4096
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KDF_INFO = b"crucible project secrets v1"


class SecretError(ValueError):
    """A secret cannot be set or used; the message says what to do. `field`: name or value."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _fernet_for(secret_key: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KDF_INFO).derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def _cipher() -> MultiFernet:
    """Encrypts with SECRET_KEY; decrypts with it or any SECRET_KEY_FALLBACKS entry (key rotation)."""
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([_fernet_for(k) for k in keys])


def encrypt(value: str) -> str:
    return _cipher().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    """The plaintext; InvalidToken when no current key opens it (SECRET_KEY changed without a fallback)."""
    return _cipher().decrypt(token.encode()).decode()


# ---------------------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretRow:
    """What a page may show of a secret: never its value."""

    pk: int
    name: str
    set_by: str
    updated_at: datetime
    last_used_at: datetime | None


def project_secret_rows(project: Project) -> list[SecretRow]:
    rows = ProjectSecret.objects.filter(project=project).select_related("set_by").order_by("name")
    return [SecretRow(pk=s.pk, name=s.name, set_by=s.set_by.get_username() if s.set_by else "",
                      updated_at=s.updated_at, last_used_at=s.last_used_at) for s in rows]


def project_secret_names(project: Project) -> list[str]:
    return list(ProjectSecret.objects.filter(project=project).order_by("name").values_list("name", flat=True))


def secret_reference_problem(project: Project | None, name: str) -> str | None:
    """Why a verifier config of `project` cannot name this secret, or None (checked when it is saved)."""
    if project is None:
        return None
    if ProjectSecret.objects.filter(project=project, name=name).exists():
        return None
    names = ", ".join(project_secret_names(project)) or "none"
    return (f"This project has no judge secret named {name!r} (its secrets: {names}); an owner adds it on the "
            "project's Settings page (Judge secrets), then save the verifier again")


def project_secret_lookup(project: Project) -> Callable[[str], str | None]:
    """The `secrets` lookup of a judge built for `project`: reads only that project's secrets, at call time.

    A value no key opens raises JudgeError (the judge reports it; nothing is sent). A value read is
    stamped `last_used_at` for the Settings page.
    """
    project_id = project.pk

    def lookup(name: str) -> str | None:
        row = ProjectSecret.objects.filter(project_id=project_id, name=name).first()
        if row is None:
            return None
        try:
            value = decrypt(row.ciphertext)
        except InvalidToken:
            raise JudgeError("missing_api_key", (
                f"the project secret {name!r} cannot be decrypted: the server's SECRET_KEY changed since it was set "
                "(list the old key in SECRET_KEY_FALLBACKS, or have an owner set the secret again on Settings); "
                "nothing was sent to the judge")) from None
        ProjectSecret.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
        return value

    return lookup


def judge_secrets_environ(project: Project, names: list[str]) -> dict[str, str]:
    """CRUCIBLE_JUDGE_SECRET_<NAME> for each named secret of `project` that exists: the environment a
    worker gives the training process of that project's run (a process has no database)."""
    lookup = project_secret_lookup(project)
    environ: dict[str, str] = {}
    for name in names:
        try:
            value = lookup(name)
        except JudgeError:
            continue  # the judge in the process reports the secret as missing, with what to do
        if value:
            environ[SECRET_PREFIX + name] = value
    return environ


# ---------------------------------------------------------------------------------------
# Writes (owners)
# ---------------------------------------------------------------------------------------


def name_problem(name: str) -> str | None:
    if not SECRET_NAME.match(name):
        return (f"A secret name starts with a letter and holds only letters, digits and _ (at most {NAME_MAX} "
                "characters), e.g. OPENAI_JUDGE.")
    return None


def value_problem(value: str) -> str | None:
    if not value:
        return "Give the secret's value (the judge's API key)."
    if len(value) > VALUE_MAX:
        return f"At most {VALUE_MAX:,} characters."
    if _CONTROL.search(value):
        return ("The value holds a line break or another control character, which an HTTP header cannot carry: "
                "paste the key alone.")
    return None


@transaction.atomic
def project_secret_set(*, project: Project, name: str, value: str, actor) -> tuple[ProjectSecret, bool]:
    """Store or replace a secret; returns it and whether it was new. SecretError names the bad field."""
    problem = name_problem(name)
    if problem:
        raise SecretError("name", problem)
    problem = value_problem(value)
    if problem:
        raise SecretError("value", problem)
    now = timezone.now()
    fields = {"ciphertext": encrypt(value), "set_by": actor if getattr(actor, "is_authenticated", False) else None,
              "updated_at": now}
    try:
        with transaction.atomic():  # a savepoint: the unique name decides a race between two owners
            secret, created = ProjectSecret.objects.update_or_create(project=project, name=name, defaults=fields)
    except IntegrityError:
        secret, created = ProjectSecret.objects.update_or_create(project=project, name=name, defaults=fields)
    audit_log(project=project, actor=actor, action="secret.set" if created else "secret.replace", target=secret,
              data={"name": name})
    return secret, created


@transaction.atomic
def project_secret_delete(*, project: Project, secret_id: int, actor) -> str:
    """Delete a secret of this project (judges naming it then fail with what to do); returns its name."""
    secret = ProjectSecret.objects.filter(project=project, pk=secret_id).first()
    if secret is None:
        raise SecretError("name", "This project has no such secret (deleted already?).")
    name = secret.name
    audit_log(project=project, actor=actor, action="secret.delete", target=secret, data={"name": name})
    secret.delete()
    return name
