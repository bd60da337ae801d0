"""Reads of trajectories shared by the pages and the API: the filter, the keyset list, one trajectory.

Every filter of the trajectory list lives in the query string (`?run=4&bucket=wrong_tool&step=10`),
so a link reproduces the view, a review queue saves the same query as its filter, and the API
takes the same parameters. `TrajectoryFilter.from_query` is the one parser; a bad value is a
`FilterError` naming the parameter and what to send instead.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Lower
from django.db.models.lookups import Contains

from webapp.common.pagination import Page, keyset_page
from webapp.datasets.models import Task
from webapp.projects.models import Project
from webapp.trajectories.models import FAILURE_BUCKETS, Rescore, RescoreResult, Review, Trajectory
from webapp.verifiers.models import Verifier

TRAJECTORY_ORDERING = ["-id"]
SPLITS = ("train", "validation", "held_out", "production")
SOURCES = ("run", "production")
VERDICTS = ("agree", "disagree")
MAX_TEXT = 200
INT_LIMIT = 2**31 - 1


class FilterError(ValueError):
    """A filter value that cannot be used; `errors` maps each parameter to what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))


def _yes_no(value: str, name: str, errors: dict[str, str]) -> bool | None:
    lowered = value.strip().lower()
    if lowered in ("", "any"):
        return None
    if lowered in ("yes", "true", "1"):
        return True
    if lowered in ("no", "false", "0"):
        return False
    errors[name] = f"{value[:40]!r} is not yes or no"
    return None


def _integer(value: str, name: str, errors: dict[str, str]) -> int | None:
    if value.strip() == "":
        return None
    try:
        number = int(value)
    except ValueError:
        errors[name] = f"{value[:40]!r} is not a whole number"
        return None
    if not 0 <= number <= INT_LIMIT:
        errors[name] = f"must be between 0 and {INT_LIMIT}"
        return None
    return number


def _number(value: str, name: str, errors: dict[str, str]) -> float | None:
    if value.strip() == "":
        return None
    try:
        number = float(value)
    except ValueError:
        errors[name] = f"{value[:40]!r} is not a number"
        return None
    if number != number or abs(number) == float("inf"):
        errors[name] = "must be a finite number"
        return None
    return number


def _choice(value: str, name: str, allowed: tuple[str, ...] | list[str], errors: dict[str, str]) -> str:
    if value and value not in allowed:
        errors[name] = f"{value[:40]!r} is not one of {', '.join(allowed)}"
        return ""
    return value


def _text(value: str, name: str, errors: dict[str, str]) -> str:
    if "\x00" in value:
        errors[name] = "contains a NUL character; remove it"
        return ""
    if len(value) > MAX_TEXT:
        errors[name] = f"is longer than {MAX_TEXT} characters"
        return ""
    return value.strip()


SEARCH_MIN = 3  # a trigram index answers 3 characters and more; fewer would scan every trajectory


# What a search may be, as the API document states it: three characters or more between optional
# spaces, tabs and line breaks (the only whitespace trimmed), no NUL.
SEARCH_PATTERN = r"^[ \t\r\n]*[^ \t\r\n\u0000][^\u0000]+[^ \t\r\n\u0000][ \t\r\n]*$"


def _search(value: str, errors: dict[str, str]) -> str:
    if "\x00" in value or len(value) > MAX_TEXT:
        return _text(value, "q", errors)
    text = value.strip(" \t\r\n")
    if text and len(text) < SEARCH_MIN:
        errors["q"] = f"search for at least {SEARCH_MIN} characters (shorter words match nearly everything)"
        return ""
    return text


@dataclass(frozen=True)
class TrajectoryFilter:
    """What the trajectory list shows; every field is a query parameter of the same name."""

    run: int | None = None
    checkpoint: int | None = None
    step: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    split: str = ""
    source: str = ""
    reward_min: float | None = None
    reward_max: float | None = None
    passed: bool | None = None
    bucket: str = ""
    flag: str = ""
    category: str = ""
    reviewed: bool | None = None
    verdict: str = ""
    review_bucket: str = ""
    disagree: bool | None = None
    rescore: int | None = None
    group: str = ""
    task: str = ""
    text: str = ""
    q: str = ""

    @classmethod
    def from_query(cls, query: Any) -> TrajectoryFilter:
        """Parse a QueryDict or a plain dict; raises FilterError with one message per bad parameter."""
        get = (lambda name: str(query.get(name) or "")) if hasattr(query, "get") else (lambda name: "")
        errors: dict[str, str] = {}
        values = {
            "run": _integer(get("run"), "run", errors),
            "checkpoint": _integer(get("checkpoint"), "checkpoint", errors),
            "step": _integer(get("step"), "step", errors),
            "step_min": _integer(get("step_min"), "step_min", errors),
            "step_max": _integer(get("step_max"), "step_max", errors),
            "split": _choice(get("split"), "split", SPLITS, errors),
            "source": _choice(get("source"), "source", SOURCES, errors),
            "reward_min": _number(get("reward_min"), "reward_min", errors),
            "reward_max": _number(get("reward_max"), "reward_max", errors),
            "passed": _yes_no(get("passed"), "passed", errors),
            "bucket": _choice(get("bucket"), "bucket", [*FAILURE_BUCKETS, "none"], errors),
            "flag": _text(get("flag"), "flag", errors)[:64],
            "category": _text(get("category"), "category", errors),
            "reviewed": _yes_no(get("reviewed"), "reviewed", errors),
            "verdict": _choice(get("verdict"), "verdict", VERDICTS, errors),
            "review_bucket": _choice(get("review_bucket"), "review_bucket", FAILURE_BUCKETS, errors),
            "disagree": _yes_no(get("disagree"), "disagree", errors),
            "rescore": _integer(get("rescore"), "rescore", errors),
            "group": _text(get("group"), "group", errors)[:64],
            "task": _text(get("task"), "task", errors),
            "text": _text(get("text"), "text", errors),
            "q": _search(get("q"), errors),
        }
        if values["step_min"] is not None and values["step_max"] is not None and values["step_min"] > values["step_max"]:
            errors["step_max"] = "must not be below step_min"
        if errors:
            raise FilterError(errors)
        return cls(**values)

    def as_query(self) -> dict[str, str]:
        """The non-empty fields as query parameters (the inverse of from_query)."""
        query: dict[str, str] = {}
        for name, value in asdict(self).items():
            if value is None or value == "":
                continue
            query[name] = ("yes" if value else "no") if isinstance(value, bool) else str(value)
        return query

    @property
    def is_empty(self) -> bool:
        return not self.as_query()


FILTER_FIELDS = tuple(f.name for f in fields(TrajectoryFilter))


def _has_flag(flag: str) -> Q:
    """Rows whose `flags` list holds `flag`. SQLite has no JSON `contains` (it raised, a 500 on the
    embedded default); there the stored JSON text holds the flag as a quoted string."""
    if connection.vendor == "postgresql":
        return Q(flags__contains=[flag])
    return Q(flags__icontains=json.dumps(flag))


def matches_search(q: str) -> Contains:
    """lower(search_text) LIKE '%q%' (wildcards in q escaped): PostgreSQL answers it from the trigram
    index on that very expression (trajectories migration 0007); SQLite scans."""
    return Contains(Lower("search_text"), q.lower())


def filtered_trajectories(project: Project, flt: TrajectoryFilter) -> QuerySet[Trajectory]:
    """The project's trajectories that match `flt` (unordered; callers choose the order)."""
    rows = Trajectory.objects.filter(project=project)
    exact = {"run_id": flt.run, "step": flt.step, "split": flt.split or None,
             "source": flt.source or None, "passed": flt.passed, "group_id": flt.group or None,
             "task_key": flt.task or None}
    rows = rows.filter(**{name: value for name, value in exact.items() if value is not None})
    if flt.checkpoint is not None:
        # A checkpoint's trajectories: those it produced, and those of the runs that evaluated it
        # (an eval run's parent checkpoint is the model it scores).
        rows = rows.filter(Q(checkpoint_id=flt.checkpoint) | Q(run__parent_checkpoint_id=flt.checkpoint))
    if flt.step_min is not None:
        rows = rows.filter(step__gte=flt.step_min)
    if flt.step_max is not None:
        rows = rows.filter(step__lte=flt.step_max)
    if flt.reward_min is not None:
        rows = rows.filter(reward__gte=flt.reward_min)
    if flt.reward_max is not None:
        rows = rows.filter(reward__lte=flt.reward_max)
    if flt.bucket:
        rows = rows.filter(failure_bucket="" if flt.bucket == "none" else flt.bucket)
    if flt.flag:
        rows = rows.filter(_has_flag(flt.flag))
    if flt.category:
        rows = rows.filter(Q(task__category=flt.category) | Q(task__isnull=True, task_snapshot__category=flt.category))
    if flt.text:
        rows = rows.filter(task_key__icontains=flt.text)
    if flt.q:
        rows = rows.filter(matches_search(flt.q))
    rows = _review_filters(rows, flt)
    if flt.disagree is not None or flt.rescore is not None:
        results = RescoreResult.objects.filter(trajectory=OuterRef("pk"))
        if flt.rescore is not None:
            results = results.filter(rescore_id=flt.rescore)
        if flt.disagree is not None:
            results = results.filter(disagrees=True)
        rows = rows.filter(Exists(results)) if flt.disagree in (True, None) else rows.exclude(Exists(results))
    return rows


def _review_filters(rows: QuerySet[Trajectory], flt: TrajectoryFilter) -> QuerySet[Trajectory]:
    if flt.reviewed is not None:
        reviewed = Exists(Review.objects.filter(trajectory=OuterRef("pk")))
        rows = rows.filter(reviewed) if flt.reviewed else rows.exclude(reviewed)
    if flt.verdict:
        rows = rows.filter(Exists(Review.objects.filter(trajectory=OuterRef("pk"), verdict=flt.verdict)))
    if flt.review_bucket:
        rows = rows.filter(Exists(Review.objects.filter(trajectory=OuterRef("pk"), failure_bucket=flt.review_bucket)))
    return rows


LIST_COLUMNS = ("id", "project_id", "run_id", "checkpoint_id", "task_key", "step", "split", "sample_index",
                "group_id", "reward", "passed", "failure_bucket", "flags", "tokens_in", "tokens_out", "latency_ms",
                "source", "created_at", "advantage")


def trajectory_page(project: Project, flt: TrajectoryFilter, *, after: str | None = None, limit: int = 50) -> Page:
    """One keyset page, newest first; turns are not loaded (the inspector reads them), the search text
    only when a search asks for it (to show each row's match)."""
    columns = (*LIST_COLUMNS, "search_text") if flt.q else LIST_COLUMNS
    rows = filtered_trajectories(project, flt).select_related("run").only(*columns, "run__name", "run__kind")
    return keyset_page(rows, ordering=TRAJECTORY_ORDERING, after=after, limit=limit)


def review_states(trajectory_ids: list[int]) -> dict[int, dict[str, int]]:
    """Per trajectory: how many reviews agree and disagree (for the list's review column)."""
    states: dict[int, dict[str, int]] = {}
    for trajectory_id, verdict in Review.objects.filter(trajectory_id__in=trajectory_ids).values_list(
            "trajectory_id", "verdict"):
        entry = states.setdefault(trajectory_id, {"agree": 0, "disagree": 0, "pair": 0})
        entry[verdict or "pair"] += 1
    return states


# --------------------------------------------------------------------------- one trajectory


def trajectory_for_inspector(project: Project, trajectory_id: int) -> Trajectory | None:
    return (Trajectory.objects.filter(project=project, pk=trajectory_id)
            .select_related("run__parent_checkpoint", "checkpoint", "task__dataset", "verifier_version__verifier")
            .first())


def trajectory_neighbours(project: Project, flt: TrajectoryFilter, trajectory_id: int) -> tuple[int | None, int | None]:
    """The previous and next trajectory of the list under the same filter (newest first)."""
    rows = filtered_trajectories(project, flt)
    previous = rows.filter(id__gt=trajectory_id).order_by("id").values_list("id", flat=True).first()
    following = rows.filter(id__lt=trajectory_id).order_by("-id").values_list("id", flat=True).first()
    return previous, following


@dataclass
class GroupStats:
    samples: list[Trajectory]
    mean: float | None
    std: float | None
    no_gradient: bool
    scored: int


GROUP_LIMIT = 256


def trajectory_group(trajectory: Trajectory) -> GroupStats:
    """The GRPO group of one trajectory (the G samples of its prompt at its step), with its statistics.

    std is the population std GRPO normalises advantages with; a group whose rewards are all
    equal has std 0 and gives no gradient.
    """
    if trajectory.group_id:
        rows = Trajectory.objects.filter(project_id=trajectory.project_id, run_id=trajectory.run_id,
                                         step=trajectory.step, group_id=trajectory.group_id)
    else:
        rows = Trajectory.objects.filter(project_id=trajectory.project_id, run_id=trajectory.run_id,
                                         step=trajectory.step, task_key=trajectory.task_key)
    samples = list(rows.order_by("sample_index", "id")[:GROUP_LIMIT])
    rewards = [s.reward for s in samples if s.reward is not None]
    if not rewards:
        return GroupStats(samples, None, None, False, 0)
    mean = sum(rewards) / len(rewards)
    std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    return GroupStats(samples, mean, std, len(samples) > 1 and std == 0.0, len(rewards))


def same_task_elsewhere(trajectory: Trajectory, limit: int = 20) -> list[Trajectory]:
    """The same task's trajectories in other runs, checkpoints and steps (newest first)."""
    rows = (Trajectory.objects.filter(project_id=trajectory.project_id, task_key=trajectory.task_key)
            .exclude(pk=trajectory.pk).select_related("run", "checkpoint")
            .only("id", "run__name", "run__kind", "checkpoint__step", "step", "split", "sample_index", "reward",
                  "passed", "failure_bucket", "source", "created_at",
                  # the rest of the API's row (TrajectoryRowOut): deferred, each would cost a query a row
                  "task_key", "group_id", "advantage", "flags", "tokens_in", "tokens_out", "latency_ms"))
    return list(rows.order_by("-id")[:limit])


def rescore_results_of(trajectory: Trajectory) -> list[RescoreResult]:
    """Every re-verification of this trajectory, newest first (the stored verdict is never changed)."""
    return list(RescoreResult.objects.filter(trajectory=trajectory)
                .select_related("rescore__verifier_version__verifier", "rescore__created_by").order_by("-id")[:20])


@dataclass(frozen=True)
class TaskTrajectories:
    rows: list[Trajectory]
    more: bool


def trajectories_of_task(task: Task, limit: int = 20) -> TaskTrajectories:
    """The newest trajectories that ran this task (Trajectory.task), with their run."""
    rows = list(Trajectory.objects.filter(task=task).select_related("run").order_by("-id")
                .only("id", "run_id", "run__name", "step", "sample_index", "split", "reward", "passed",
                      "failure_bucket", "source", "created_at", "task_key")[:limit + 1])
    return TaskTrajectories(rows=rows[:limit], more=len(rows) > limit)


# ---------------------------------------------------------------------------------------
# Lookups for access checks and selections
# ---------------------------------------------------------------------------------------


def trajectories_with_relations() -> QuerySet[Trajectory]:
    """Every trajectory with its run, checkpoint, task and verifier (the API's answer names them), for
    webapp.projects.selectors.access.get_object_or_404_for_user to narrow to the caller's projects."""
    return Trajectory.objects.select_related("run", "checkpoint", "task", "verifier_version__verifier")


def all_rescores() -> QuerySet[Rescore]:
    """Every re-scoring, for get_object_or_404_for_user to narrow to the caller's projects."""
    return Rescore.objects.all()


def rescores_for_page() -> QuerySet[Rescore]:
    """Every re-scoring with what its page shows beside it (the version and its verifier, the run and the run's
    verifier, the job, the creator), for get_object_or_404_for_user to narrow to the caller's projects."""
    return Rescore.objects.select_related("verifier_version__verifier", "run__verifier_version__verifier", "job",
                                          "created_by")


def recent_rescores(project: Project, limit: int = 10) -> list[Rescore]:
    """The project's newest re-scorings of a run that have a job, with version, verifier, run and job."""
    return list(Rescore.objects.filter(project=project, run__isnull=False, job__isnull=False)
                .select_related("verifier_version__verifier", "run", "job")[:limit])


def verifier_rescores(verifier: Verifier, limit: int = 20) -> list[Rescore]:
    """The newest re-scorings of a run with any version of this verifier that have a job, with version, run and
    job."""
    return list(Rescore.objects.filter(verifier_version__verifier=verifier, run__isnull=False, job__isnull=False)
                .select_related("verifier_version", "run", "job")[:limit])


def rescore_counts(rescore: Rescore) -> dict[str, int]:
    """{"done", "disagreements", "errors"}: how many trajectories the re-scoring verified so far, how many of them
    disagree with their stored verdict and how many ended in a verifier error."""
    return rescore.results.aggregate(done=Count("pk"), disagreements=Count("pk", filter=Q(disagrees=True)),
                                     errors=Count("pk", filter=~Q(error="")))


def rescore_disagreements(rescore: Rescore, limit: int) -> list[RescoreResult]:
    """The re-scoring's first `limit` results (by trajectory id) that disagree with the stored verdict, with their
    trajectories."""
    return list(RescoreResult.objects.filter(rescore=rescore, disagrees=True)
                .select_related("trajectory").order_by("trajectory_id")[:limit])


def checkable_trajectories(project_id: int, run_id: int | None = None) -> QuerySet[Trajectory]:
    """The stored trajectories a verifier can score again (a sanity check draws from them): an output (turns) and
    a known task (a dataset task, or the snapshot a production log sent), of any run and kind (evaluation or
    training, run here or imported) and any split."""
    rows = Trajectory.objects.filter(project_id=project_id).filter(
        Q(task__isnull=False) | Q(task_snapshot__isnull=False)).exclude(turns=[])
    return rows.filter(run_id=run_id) if run_id is not None else rows


def run_has_trajectories(run_id: int) -> bool:
    """Whether the run stored any trajectory."""
    return Trajectory.objects.filter(run_id=run_id).exists()


def run_trajectory_count(run_id: int) -> int:
    """How many trajectories the run stored."""
    return Trajectory.objects.filter(run_id=run_id).count()


def project_trajectory_with_task(project: Project, trajectory_id: int | None) -> Trajectory | None:
    """The project's trajectory with this id and its task, or None (another project's is as absent as a missing
    one)."""
    return Trajectory.objects.filter(project=project, pk=trajectory_id).select_related("task").first()


def selected_trajectories(project: Project, ids: list[int], limit: int | None = None) -> list[Trajectory]:
    """The project's trajectories among these ids with their tasks (another project's are left out), at most
    `limit`: a selection to turn into dataset tasks."""
    rows = Trajectory.objects.filter(project=project, pk__in=ids).select_related("task")
    return list(rows if limit is None else rows[:limit])


def matching_trajectories(project: Project, flt: TrajectoryFilter, limit: int) -> list[Trajectory]:
    """The trajectories the filter matches with their tasks, newest first, at most `limit` ("all matching this
    filter" on the trajectory list)."""
    return list(filtered_trajectories(project, flt).order_by("-id").select_related("task")[:limit])


def bucket_trajectories(project: Project, run_id: int, bucket: str) -> list[Trajectory]:
    """One run's trajectories in one failure bucket, with their tasks (a bucket turned into eval tasks)."""
    return list(Trajectory.objects.filter(project=project).filter(run_id=run_id, failure_bucket=bucket)
                .select_related("task"))


def trajectory_briefs(ids: list[int], fields: tuple[str, ...]) -> dict[int, dict[str, Any]]:
    """{id: {field: value}} of these trajectories, only the named columns (a review item's short description)."""
    return {row["id"]: row for row in Trajectory.objects.filter(pk__in=ids).values(*fields)}


@dataclass(frozen=True)
class Match:
    """Where a search matched a trajectory's text: the words around it, to show with the match marked."""

    before: str
    match: str
    after: str


def search_match(text: str, q: str, context: int = 60) -> Match | None:
    """The first case-insensitive occurrence of `q` in `text`, with `context` characters either side."""
    if not q or not text:
        return None
    at = text.lower().find(q.lower())
    if at < 0:
        return None
    start, end = max(0, at - context), min(len(text), at + len(q) + context)
    return Match(before=("…" if start else "") + text[start:at], match=text[at:at + len(q)],
                 after=text[at + len(q):end] + ("…" if end < len(text) else ""))
