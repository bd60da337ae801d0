"""Sanity checks: a verifier version's verdicts on stored outputs, judged by a person.

The seeds' rule: before training, check the verifier against your own judgement on 50-100
outputs, and fix it when you disagree. A check draws 10-100 stored trajectories of the
project (or of one run), at random or stratified by their stored reward, scores each with
the version (the same `verify_one` rescores use: errors are verifier errors with no reward),
and a person marks each verdict right or wrong, optionally with the bucket they would have
chosen. The agreement rate (right / marked) is kept with the version; a version whose latest
check is under the threshold (setting CRUCIBLE_VERIFIER_AGREEMENT_THRESHOLD, default 0.9) is
flagged on the run form.

Scoring runs in the web request, not on the verify queue (no worker handler knows checks):
the built-in verifiers take milliseconds for 100 outputs, and python code runs in the
sandbox with the version's own time and memory limits. A request scores until its time
budget (CRUCIBLE_VERIFIER_CHECK_SECONDS, default 60) is spent, then stops between two
outputs; the check page offers "score the rest", which continues where it stopped.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from webapp.projects.services.projects import audit_log
from webapp.trajectories.models import FAILURE_BUCKETS
from webapp.trajectories.selectors.trajectories import checkable_trajectories, run_has_trajectories
from webapp.trajectories.services.verification import bucket_of, verify_one
from webapp.verifiers.models import SampleMethod, VerifierCheck, VerifierCheckItem, VerifierVersion

CHECK_MIN = 10
CHECK_MAX = 100
CHECK_DEFAULT = 50
# Outputs are drawn from the newest this-many matching trajectories (a bounded read on any table size).
CANDIDATE_WINDOW = 20_000
HISTOGRAM_BINS = 10


def agreement_threshold() -> float:
    return float(getattr(settings, "CRUCIBLE_VERIFIER_AGREEMENT_THRESHOLD", 0.9))


def check_time_budget() -> float:
    return float(getattr(settings, "CRUCIBLE_VERIFIER_CHECK_SECONDS", 60))


class CheckError(ValueError):
    """A check that cannot be made as asked; `field` names the input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def candidates(version: VerifierVersion, run_id: int | None = None) -> list[tuple[int, float | None]]:
    """(id, stored reward) of the newest stored trajectories that have an output and a task to verify against."""
    rows = checkable_trajectories(version.verifier.project_id, run_id)
    return list(rows.order_by("-id").values_list("id", "reward")[:CANDIDATE_WINDOW])


NO_OUTPUTS_HELP = ("run an evaluation on one of this project's datasets, or import a run whose dataset is in this "
                   "project (its trajectories' task ids are tasks of one of this project's datasets)")


def no_candidates_message(run=None) -> str:
    """Why a check finds nothing to draw, and what would give it outputs."""
    if run is None:
        return f"No stored outputs with a known task in this project yet: {NO_OUTPUTS_HELP}."
    if not run_has_trajectories(run.pk):
        return f"No stored outputs in run {run.name}: choose another run or the whole project, or {NO_OUTPUTS_HELP}."
    if run.is_imported:
        return (f"No stored outputs with a known task in run {run.name}: it has outputs, but its task ids are not "
                "tasks of this project's datasets. Import the dataset it used into this project, then import the "
                "run again (its outputs are linked to their tasks then); or choose the whole project.")
    return (f"No stored outputs with a known task in run {run.name}: it ran on its environment's own tasks, not on "
            f"a dataset of this project. Choose the whole project, or {NO_OUTPUTS_HELP}.")


def _strata(pool: list[tuple[int, float | None]]) -> list[list[int]]:
    """Groups by stored reward: errors apart; each value when there are few, else equal-width bins."""
    groups: dict[object, list[int]] = defaultdict(list)
    scored = [r for _, r in pool if r is not None]
    distinct = sorted(set(scored))
    low, high = (min(scored), max(scored)) if scored else (0.0, 0.0)
    for pk, reward in pool:
        if reward is None:
            key: object = "error"
        elif len(distinct) <= HISTOGRAM_BINS or high == low:
            key = reward
        else:
            key = min(4, int((reward - low) / (high - low) * 5))
        groups[key].append(pk)
    return [groups[k] for k in sorted(groups, key=str)]


def sample_ids(pool: list[tuple[int, float | None]], size: int, method: str, rng: random.Random) -> list[int]:
    if method == SampleMethod.STRATIFIED:
        strata = [rng.sample(g, len(g)) for g in _strata(pool)]
        picked: list[int] = []
        while len(picked) < size and any(strata):
            for group in strata:
                if group and len(picked) < size:
                    picked.append(group.pop())
        rng.shuffle(picked)  # no runs of passes then fails: the order must not prime the judgement
        return picked
    ids = [pk for pk, _ in pool]
    return rng.sample(ids, min(size, len(ids)))


def check_create(*, version: VerifierVersion, actor, size: int = CHECK_DEFAULT, run=None,
                 method: str = SampleMethod.RANDOM, seed: int | None = None) -> VerifierCheck:
    """Draw the outputs and write the check (unscored); score it with check_score_pending."""
    if not CHECK_MIN <= size <= CHECK_MAX:
        raise CheckError("size", f"Choose between {CHECK_MIN} and {CHECK_MAX} outputs.")
    if method not in SampleMethod.values:
        raise CheckError("method", f"Choose one of {', '.join(SampleMethod.values)}.")
    if run is not None and run.project_id != version.verifier.project_id:
        raise CheckError("run", "Choose a run of this project.")
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    pool = candidates(version, run.pk if run is not None else None)
    if not pool:
        raise CheckError("run", no_candidates_message(run))
    ids = sample_ids(pool, size, method, random.Random(seed))
    with transaction.atomic():
        check = VerifierCheck.objects.create(version=version, created_by=actor, size=len(ids), run=run,
                                             method=method, seed=seed, threshold=agreement_threshold())
        VerifierCheckItem.objects.bulk_create(
            VerifierCheckItem(sanity_check=check, position=i, trajectory_id=pk) for i, pk in enumerate(ids))
        audit_log(project=version.verifier.project, actor=actor, action="verifier.check", target=check,
                  data={"verifier": version.verifier.name, "version": version.version, "size": len(ids)})
    return check


@dataclass
class ScoreReport:
    scored: int
    remaining: int
    seconds: float


def check_score_pending(check: VerifierCheck, *, budget_seconds: float | None = None) -> ScoreReport:
    """Score the check's unscored items in order until done or the time budget is spent.

    Each item is saved as soon as it is scored (no transaction held open while user code
    runs in the sandbox), so an interrupted request loses nothing and the next continues.
    """
    budget = check_time_budget() if budget_seconds is None else budget_seconds
    started = time.monotonic()
    version = VerifierVersion.objects.select_related("verifier").get(pk=check.version_id)
    pending = list(check.items.filter(scored=False).order_by("position").values_list("pk", flat=True))
    done = 0
    for pk in pending:
        if done and time.monotonic() - started >= budget:
            break
        item = VerifierCheckItem.objects.select_related("trajectory__task").get(pk=pk)
        result = verify_one(version, item.trajectory)
        item.scored, item.reward, item.passed = True, result.reward, result.passed
        item.bucket, item.error = bucket_of(result), result.error or ""
        item.components = {str(k): float(v) for k, v in (result.components or {}).items()
                           if isinstance(v, int | float)}
        item.save(update_fields=["scored", "reward", "passed", "bucket", "error", "components"])
        done += 1
    return ScoreReport(scored=done, remaining=len(pending) - done, seconds=time.monotonic() - started)


def check_label(*, item: VerifierCheckItem, actor, right: bool, bucket: str = "") -> VerifierCheckItem:
    """Mark the verdict right or wrong (optionally with the bucket the person would choose)."""
    if bucket and bucket not in FAILURE_BUCKETS:
        raise CheckError("human_bucket", f"Choose one of {', '.join(FAILURE_BUCKETS)}, or none.")
    if not item.scored:
        raise CheckError("item", "This output is not scored yet: score the check first.")
    with transaction.atomic():
        check = VerifierCheck.objects.select_for_update().get(pk=item.sanity_check_id)
        VerifierCheckItem.objects.filter(pk=item.pk).update(
            human_right=right, human_bucket=bucket, labelled_by=actor, labelled_at=timezone.now())
        counts = check.items.aggregate(labelled=Count("pk", filter=Q(human_right__isnull=False)),
                                       agreed=Count("pk", filter=Q(human_right=True)))
        VerifierCheck.objects.filter(pk=check.pk).update(**counts)
    item.refresh_from_db()
    return item


def histogram(rewards: list[float]) -> list[dict]:
    """Reward distribution: one bar per value when there are few values, else equal-width bins."""
    if not rewards:
        return []
    distinct = sorted(set(rewards))
    if len(distinct) <= HISTOGRAM_BINS:
        return [{"low": v, "high": v, "label": f"{v:g}", "count": rewards.count(v)} for v in distinct]
    low, high = distinct[0], distinct[-1]
    width = (high - low) / HISTOGRAM_BINS
    counts = [0] * HISTOGRAM_BINS
    for r in rewards:
        counts[min(HISTOGRAM_BINS - 1, int((r - low) / width))] += 1
    return [{"low": low + i * width, "high": low + (i + 1) * width,
             "label": f"{low + i * width:.3g}–{low + (i + 1) * width:.3g}", "count": c}
            for i, c in enumerate(counts)]


@dataclass
class CheckSummary:
    size: int
    scored: int
    errors: int
    passed: int
    labelled: int
    agreed: int
    agreement: float | None
    threshold: float
    histogram: list[dict]
    disagreements: list[VerifierCheckItem]

    @property
    def under_threshold(self) -> bool:
        return self.agreement is not None and self.agreement < self.threshold

    @property
    def unscored(self) -> int:
        return self.size - self.scored

    @property
    def unlabelled(self) -> int:
        return self.scored - self.labelled

    def to_dict(self) -> dict:
        return {"size": self.size, "scored": self.scored, "errors": self.errors, "passed": self.passed,
                "labelled": self.labelled, "agreed": self.agreed, "agreement": self.agreement,
                "threshold": self.threshold, "under_threshold": self.under_threshold,
                "histogram": self.histogram}


def check_summary(check: VerifierCheck) -> CheckSummary:
    """Agreement = items marked right / items marked (right or wrong); disagreements are the wrong ones."""
    items = list(check.items.select_related("trajectory").order_by("position"))
    scored = [i for i in items if i.scored]
    labelled = [i for i in items if i.human_right is not None]
    agreed = sum(1 for i in labelled if i.human_right)
    return CheckSummary(
        size=len(items), scored=len(scored), errors=sum(1 for i in scored if i.reward is None),
        passed=sum(1 for i in scored if i.passed), labelled=len(labelled), agreed=agreed,
        agreement=agreed / len(labelled) if labelled else None, threshold=check.threshold,
        histogram=histogram([i.reward for i in scored if i.reward is not None]),
        disagreements=[i for i in labelled if not i.human_right],
    )
