"""Reads shared by the verifier pages and the verifier API."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Max, QuerySet

from webapp.common.timeline import Segment, text_segments
from webapp.projects.models import Project
from webapp.verifiers.models import Verifier, VerifierCheck, VerifierCheckItem, VerifierVersion


def latest_checks(version_ids: list[int]) -> dict[int, VerifierCheck]:
    """Each version's latest check that has at least one judgement (its agreement is known).

    The one rule of "checked": a version without one reads "not checked yet" on the verifier pages, and the
    overview's start-here step counts the same (latest_version_checks)."""
    latest: dict[int, VerifierCheck] = {}
    rows = VerifierCheck.objects.filter(version_id__in=version_ids, labelled__gt=0).order_by("-created_at", "-id")
    for check in rows:
        latest.setdefault(check.version_id, check)
    return latest


def latest_version_checks(project: Project) -> dict[int, VerifierCheck | None]:
    """Each verifier's (by id) latest version's latest judged check, None where it reads "not checked yet": what
    the verifiers list shows in its "Sanity check (latest version)" column (verifier_rows, the same latest_checks),
    and what the overview's "Create a verifier and sanity-check it" step counts."""
    latest: dict[int, int] = {}
    for pk, verifier_id in (VerifierVersion.objects.filter(verifier__project=project)
                            .order_by("verifier_id", "-version").values_list("pk", "verifier_id")):
        latest.setdefault(verifier_id, pk)
    checks = latest_checks(list(latest.values()))
    return {verifier_id: checks.get(pk) for verifier_id, pk in latest.items()}


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


def verifier_rows(project: Project, run_counts: Mapping[int, int]) -> list[VerifierRow]:
    """Every verifier of the project with its versions (newest first), runs per version and latest checks.

    `run_counts` (runs per verifier version id) comes from the runs app's selectors: runs use verifiers,
    so the count is theirs to give."""
    verifiers = project_verifiers(project)
    versions = project_versions_with_creators(project)
    ids = [v.pk for v in versions]
    checks = latest_checks(ids)
    by_verifier: dict[int, list[VersionRow]] = defaultdict(list)
    for version in versions:
        by_verifier[version.verifier_id].append(VersionRow(version, run_counts.get(version.pk, 0), checks.get(version.pk)))
    return [VerifierRow(v, by_verifier.get(v.pk, [])) for v in verifiers]


def version_rows(verifier: Verifier, run_counts: Mapping[int, int]) -> list[VersionRow]:
    versions = verifier_versions(verifier)
    checks = latest_checks([v.pk for v in versions])
    return [VersionRow(v, run_counts.get(v.pk, 0), checks.get(v.pk)) for v in versions]


def recent_checks(project: Project, limit: int = 10) -> list[VerifierCheck]:
    """The project's newest sanity checks, for the verifiers page."""
    return list(VerifierCheck.objects.filter(version__verifier__project=project)
                .select_related("version__verifier", "created_by", "run")[:limit])


def flagged_versions(project: Project) -> dict[int, VerifierCheck]:
    """Versions whose latest judged check is under its threshold (the run form warns about them)."""
    ids = list(VerifierVersion.objects.filter(verifier__project=project).values_list("pk", flat=True))
    return {pk: check for pk, check in latest_checks(ids).items() if check.under_threshold}



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


# ---------------------------------------------------------------------------------------
# One verifier or version by name or id (the endpoints' and forms' choices)
# ---------------------------------------------------------------------------------------


def verifier_named(project: Project, name: str) -> Verifier | None:
    """The project's verifier of that name, or None."""
    return project.verifiers.filter(name=name).first()


def verifier_names(project: Project) -> list[str]:
    """The names of the project's verifiers, A to Z (an error names the ones that exist)."""
    return list(project.verifiers.values_list("name", flat=True))


def verifier_version_or_latest(verifier: Verifier, version: int | None) -> VerifierVersion | None:
    """The verifier's version numbered `version`, or its latest when no number (None or 0) is given; None when
    that number does not exist."""
    return verifier.versions.filter(version=version).first() if version else verifier.latest_version


def project_verifier_versions(project: Project, limit: int = 50) -> QuerySet[VerifierVersion]:
    """The project's verifier versions with their verifiers, by verifier name then newest version, at most
    `limit` (the re-verify menu)."""
    return (VerifierVersion.objects.filter(verifier__project=project).select_related("verifier")
            .order_by("verifier__name", "-version")[:limit])


def project_verifier_version(project: Project, version_id: int | None) -> VerifierVersion | None:
    """The project's verifier version with this id and its verifier, or None (another project's is as absent as a
    missing one)."""
    return VerifierVersion.objects.filter(verifier__project=project, pk=version_id).select_related("verifier").first()


def project_verifier(project: Project, verifier_id: int) -> Verifier | None:
    """The project's verifier with this id, or None (another project's is as absent as a missing one)."""
    return project.verifiers.filter(pk=verifier_id).first()


def project_verifiers(project: Project) -> list[Verifier]:
    """The project's verifiers, A to Z."""
    return list(Verifier.objects.filter(project=project).order_by("name"))


def project_versions_with_creators(project: Project) -> list[VerifierVersion]:
    """Every version of the project's verifiers with its creator, by verifier id then newest version."""
    return list(VerifierVersion.objects.filter(verifier__project=project).select_related("created_by")
                .order_by("verifier_id", "-version"))


def verifier_versions(verifier: Verifier) -> list[VerifierVersion]:
    """The verifier's versions with their creators, newest first."""
    return list(verifier.versions.select_related("created_by").order_by("-version"))


def verifier_version_numbered(verifier: Verifier, number: int) -> VerifierVersion | None:
    """The verifier's version numbered `number` with its verifier and creator, or None."""
    return verifier.versions.select_related("verifier", "created_by").filter(version=number).first()


def verifier_choice_rows(project: Project, limit: int) -> list[dict]:
    """{"id", "name", "kind", "latest"} of the project's verifiers A to Z, at most `limit`; latest is the newest
    version's number, None before the first (a form's verifier menu)."""
    return list(project.verifiers.annotate(latest=Max("versions__version")).order_by("name")
                .values("id", "name", "kind", "latest")[:limit])


def verifiers_with_project() -> QuerySet[Verifier]:
    """Every verifier with its project, for webapp.projects.selectors.access.get_object_or_404_for_user to narrow
    to the caller's projects."""
    return Verifier.objects.select_related("project")


def versions_with_project() -> QuerySet[VerifierVersion]:
    """Every verifier version with its verifier, project and creator, for get_object_or_404_for_user
    (project_field="verifier__project") to narrow to the caller's projects."""
    return VerifierVersion.objects.select_related("verifier__project", "created_by")


# ---------------------------------------------------------------------------------------
# Sanity checks and their items
# ---------------------------------------------------------------------------------------


def checks_with_project() -> QuerySet[VerifierCheck]:
    """Every sanity check with its version, verifier, project, creator and run, for get_object_or_404_for_user
    (project_field="version__verifier__project") to narrow to the caller's projects."""
    return VerifierCheck.objects.select_related("version__verifier__project", "created_by", "run")


def verifier_checks(verifier: Verifier, limit: int = 20) -> list[VerifierCheck]:
    """The newest sanity checks of any of the verifier's versions, with version, creator and run."""
    return list(VerifierCheck.objects.filter(version__verifier=verifier)
                .select_related("version", "created_by", "run")[:limit])


def version_checks(version: VerifierVersion, limit: int = 20) -> list[VerifierCheck]:
    """The version's newest sanity checks, with creator and run."""
    return list(version.checks.select_related("created_by", "run")[:limit])


def check_items(check: VerifierCheck) -> list[VerifierCheckItem]:
    """The check's items in position order."""
    return list(check.items.order_by("position"))


def check_items_with_trajectories(check: VerifierCheck) -> list[VerifierCheckItem]:
    """The check's items in position order, with their trajectories and who judged them (the check page)."""
    return list(check.items.select_related("trajectory", "labelled_by").order_by("position"))


def scored_item_at(check: VerifierCheck, position: int) -> VerifierCheckItem | None:
    """The check's scored item at this position with its trajectory, task and judge, or None."""
    return (check.items.filter(scored=True).filter(position=position)
            .select_related("trajectory__task", "labelled_by").first())


def first_unjudged_item(check: VerifierCheck) -> VerifierCheckItem | None:
    """The check's first scored item nobody judged yet, with its trajectory and task, or None."""
    return (check.items.filter(scored=True).filter(human_right__isnull=True).order_by("position")
            .select_related("trajectory__task").first())


def next_unjudged_position(check: VerifierCheck, after: int) -> int | None:
    """The position of the next scored, unjudged item after `after`, else of the first one; None when none is left."""
    following = (check.items.filter(scored=True, human_right__isnull=True, position__gt=after)
                 .order_by("position").first()
                 or check.items.filter(scored=True, human_right__isnull=True).order_by("position").first())
    return following.position if following is not None else None


def scored_positions(check: VerifierCheck) -> list[int]:
    """The positions of the check's scored items, in order."""
    return list(check.items.filter(scored=True).order_by("position").values_list("position", flat=True))


def judged_item_count(check: VerifierCheck) -> int:
    """How many of the check's items a person judged."""
    return check.items.filter(human_right__isnull=False).count()


def has_unscored_items(check: VerifierCheck) -> bool:
    """Whether some of the check's items are not scored yet."""
    return check.items.filter(scored=False).exists()
