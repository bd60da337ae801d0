"""Verifier writes: every configuration change is a new immutable version (audited)."""

from __future__ import annotations

import hashlib
import json

from django.db import IntegrityError, transaction
from django.db.models import Max

from webapp.projects.models import Project
from webapp.projects.services.projects import audit_log
from webapp.verifiers.models import Verifier, VerifierVersion


def config_hash(kind: str, config: dict) -> str:
    return hashlib.sha256(json.dumps([kind, config], sort_keys=True).encode()).hexdigest()


class VerifierNameTaken(ValueError):
    """The project already has a verifier of this name (found first, or lost a race to create it)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"This project already has a verifier named {name!r}: add a version to it instead.")


def validate_verifier_config(kind: str, config: dict, project: Project | None = None) -> str:
    """Check the config against the registry's schema; returns the built-in verifier's version.

    An llm_judge config must also pass the operator's policy here (host and judge key), so no
    write path can store a judge that points at an internal address or names a server secret;
    with `project`, a judge's `api_key_secret` must name a secret that project has.
    """
    from environments.registry import ConfigError, canonical_verifier_name, get_verifier
    from webapp.verifiers.services.judge import JUDGE_KIND, judge_config_problems

    if canonical_verifier_name(kind) == JUDGE_KIND and isinstance(config, dict):
        problems = judge_config_problems(config, project)
        if problems:
            raise ConfigError("; ".join(f"{key}: {message}" for key, message in problems.items()))
    return get_verifier(kind, config).version


@transaction.atomic
def verifier_create(*, project: Project, name: str, kind: str, config: dict, actor, description: str = "") -> Verifier:
    """A verifier and its v1; VerifierNameTaken when the name is in use, also when a concurrent request won."""
    kind_version = validate_verifier_config(kind, config, project)
    try:
        with transaction.atomic():  # a savepoint: the unique name decides a race, not the check before it
            verifier = Verifier.objects.create(project=project, name=name, kind=kind, description=description)
    except IntegrityError:
        if Verifier.objects.filter(project=project, name=name).exists():
            raise VerifierNameTaken(name) from None
        raise
    _add_version(verifier, config, kind_version, actor)
    return verifier


@transaction.atomic
def verifier_update_config(*, verifier: Verifier, config: dict, actor) -> VerifierVersion:
    """A new version when the config changed; the unchanged config returns the latest version."""
    verifier = Verifier.objects.select_for_update().get(pk=verifier.pk)
    latest = verifier.latest_version
    if latest is not None and latest.content_hash == config_hash(verifier.kind, config):
        return latest
    kind_version = validate_verifier_config(verifier.kind, config, verifier.project)
    return _add_version(verifier, config, kind_version, actor)


def _add_version(verifier: Verifier, config: dict, kind_version: str, actor) -> VerifierVersion:
    number = (verifier.versions.aggregate(n=Max("version"))["n"] or 0) + 1
    version = VerifierVersion.objects.create(
        verifier=verifier, version=number, config=config, kind_version=kind_version,
        content_hash=config_hash(verifier.kind, config), created_by=actor,
    )
    audit_log(
        project=verifier.project, actor=actor, action="verifier.version", target=version,
        data={"verifier": verifier.name, "version": number},
    )
    return version
