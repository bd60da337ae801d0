"""Reads shared by the verifier pages and the verifier API."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count

from webapp.projects.models import Project
from webapp.runs.models import Run
from webapp.trajectories.timeline import Segment, text_segments
from webapp.verifiers.models import Verifier, VerifierCheck, VerifierVersion


def latest_checks(version_ids: list[int]) -> dict[int, VerifierCheck]:
    """Each version's latest check that has at least one judgement (its agreement is known)."""
    latest: dict[int, VerifierCheck] = {}
    rows = VerifierCheck.objects.filter(version_id__in=version_ids, labelled__gt=0).order_by("-created_at", "-id")
    for check in rows:
        latest.setdefault(check.version_id, check)
    return latest


def run_counts(version_ids: list[int]) -> dict[int, int]:
    rows = Run.objects.filter(verifier_version_id__in=version_ids).values("verifier_version_id").annotate(n=Count("id"))
    return {r["verifier_version_id"]: r["n"] for r in rows}


@dataclass
class VersionRow:
    version: VerifierVersion
    runs: int = 0
    check: VerifierCheck | None = None


@dataclass
class VerifierRow:
    verifier: Verifier
    versions: list[VersionRow] = field(default_factory=list)

    @property
    def latest(self) -> VersionRow | None:
        return self.versions[0] if self.versions else None

    @property
    def runs(self) -> int:
        return sum(v.runs for v in self.versions)


def verifier_rows(project: Project) -> list[VerifierRow]:
    """Every verifier of the project with its versions (newest first), runs per version and latest checks."""
    verifiers = list(Verifier.objects.filter(project=project).order_by("name"))
    versions = list(VerifierVersion.objects.filter(verifier__project=project).select_related("created_by")
                    .order_by("verifier_id", "-version"))
    ids = [v.pk for v in versions]
    runs, checks = run_counts(ids), latest_checks(ids)
    by_verifier: dict[int, list[VersionRow]] = defaultdict(list)
    for version in versions:
        by_verifier[version.verifier_id].append(VersionRow(version, runs.get(version.pk, 0), checks.get(version.pk)))
    return [VerifierRow(v, by_verifier.get(v.pk, [])) for v in verifiers]


def version_rows(verifier: Verifier) -> list[VersionRow]:
    versions = list(verifier.versions.select_related("created_by").order_by("-version"))
    ids = [v.pk for v in versions]
    runs, checks = run_counts(ids), latest_checks(ids)
    return [VersionRow(v, runs.get(v.pk, 0), checks.get(v.pk)) for v in versions]


def flagged_versions(project: Project) -> dict[int, VerifierCheck]:
    """Versions whose latest judged check is under its threshold (the run form warns about them)."""
    ids = list(VerifierVersion.objects.filter(verifier__project=project).values_list("pk", flat=True))
    return {pk: check for pk, check in latest_checks(ids).items() if check.under_threshold}


def runs_of_version(version: VerifierVersion, limit: int = 200) -> list[Run]:
    return list(Run.objects.filter(verifier_version=version).select_related("created_by").order_by("-id")[:limit])


@dataclass
class ConfigDiffRow:
    key: str
    a: str
    b: str
    same: bool
    segments: list[Segment] = field(default_factory=list)  # a line diff for multi-line text (code, rubric)


def _shown(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def config_diff(a: dict[str, Any], b: dict[str, Any]) -> list[ConfigDiffRow]:
    """Key by key (nested keys dotted); a key absent on one side shows empty there."""
    flat_a, flat_b = _flatten(a or {}), _flatten(b or {})
    rows = []
    for key in sorted(set(flat_a) | set(flat_b)):
        left, right = flat_a.get(key), flat_b.get(key)
        same = key in flat_a and key in flat_b and left == right
        row = ConfigDiffRow(key=key, a=_shown(left) if key in flat_a else "(not set)",
                            b=_shown(right) if key in flat_b else "(not set)", same=same)
        if not same and ("\n" in row.a or "\n" in row.b):
            row.segments = text_segments(_shown(left), _shown(right))
        rows.append(row)
    return rows
