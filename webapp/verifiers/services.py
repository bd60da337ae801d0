"""Verifier writes: every configuration change is a new immutable version (audited)."""

from __future__ import annotations

import hashlib
import json

from django.db import transaction
from django.db.models import Max

from webapp.projects.models import Project
from webapp.projects.services import audit_log
from webapp.verifiers.models import Verifier, VerifierVersion


def config_hash(kind: str, config: dict) -> str:
    return hashlib.sha256(json.dumps([kind, config], sort_keys=True).encode()).hexdigest()


def validate_verifier_config(kind: str, config: dict) -> str:
    """Check the config against the registry's schema; returns the built-in verifier's version."""
    from environments.registry import get_verifier

    return get_verifier(kind, config).version


@transaction.atomic
def verifier_create(*, project: Project, name: str, kind: str, config: dict, actor, description: str = "") -> Verifier:
    kind_version = validate_verifier_config(kind, config)
    verifier = Verifier.objects.create(project=project, name=name, kind=kind, description=description)
    _add_version(verifier, config, kind_version, actor)
    return verifier


@transaction.atomic
def verifier_update_config(*, verifier: Verifier, config: dict, actor) -> VerifierVersion:
    """A new version when the config changed; the unchanged config returns the latest version."""
    verifier = Verifier.objects.select_for_update().get(pk=verifier.pk)
    latest = verifier.latest_version
    if latest is not None and latest.content_hash == config_hash(verifier.kind, config):
        return latest
    kind_version = validate_verifier_config(verifier.kind, config)
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
