"""Failure buckets as the Failures page and its API read them: per step, per evaluation, per
task category, the top buckets with examples, bucket transitions and human re-bucketing.

Bucket counts per step and per evaluation come from the rollups (StepRollup, BucketRollup),
never from a scan of trajectories: a run may hold millions of rows. The reads that must look
at trajectories (categories, transitions, examples) are confined to one run and one step, or
walk an index that ends in id, so they cost what that step holds, not what the table holds.

Every bar counts each trajectory once: `passed`, one of the verifier's buckets, or
`unbucketed` (failed without a bucket), so the segments of a bar add up to its total.
Access is checked by the caller (webapp.projects.selectors.access) before a run reaches these functions.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import (
    Count,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Sum,
    Value,
)
from django.db.models.fields.json import KeyTextTransform

from webapp.projects.models import Project
from webapp.runs.models import Run, RunKind
from webapp.trajectories.models import FAILURE_BUCKETS, BucketRollup, Review, StepRollup, Trajectory

PASSED = "passed"
UNBUCKETED = "unbucketed"
BUCKETS = (PASSED, *FAILURE_BUCKETS, UNBUCKETED)
FAILED_NO_BUCKET = "failed, no bucket named"
MAX_BARS = 100  # wider runs are drawn as bars of several consecutive steps
TOP_BUCKETS = 5
EXAMPLES_PER_BUCKET = 3
EXAMPLE_WINDOW = 2_000  # newest rows of a bucket searched for examples of the chosen split
MAX_CATEGORIES = 20
EVAL_SPLITS = ("held_out", "validation", "train")  # which split an evaluation is read from, first found


def bucket_of(passed: bool, failure_bucket: str) -> str:
    """The one bar segment a trajectory counts in."""
    if passed:
        return PASSED
    return failure_bucket if failure_bucket else UNBUCKETED


def bucket_filter(bucket: str) -> dict[str, str]:
    """The trajectory list's query (TrajectoryFilter) that shows one segment's trajectories."""
    if bucket == PASSED:
        return {"passed": "yes"}
    if bucket == UNBUCKETED:
        return {"passed": "no", "bucket": "none"}
    return {"bucket": bucket}


def ordered(buckets) -> list[str]:
    """Buckets in the page's fixed order (passed first, unbucketed last); unknown names at the end."""
    known = [b for b in BUCKETS if b in buckets]
    return known + sorted(b for b in buckets if b not in BUCKETS)


@dataclass(frozen=True)
class BucketCounts:
    """How many trajectories fell in each segment, out of `total`."""

    total: int
    counts: dict[str, int]

    @classmethod
    def from_rollups(cls, total: int, passed: int, failed: dict[str, int]) -> BucketCounts:
        """Passed and bucketed counts from the rollups; the rest of the total failed without a bucket."""
        counts = {PASSED: passed, **failed}
        rest = total - sum(counts.values())
        if rest > 0:
            counts[UNBUCKETED] = rest
        return cls(total=total, counts={b: counts[b] for b in ordered(counts) if counts[b]})

    @property
    def shares(self) -> dict[str, float]:
        return {b: n / self.total for b, n in self.counts.items()} if self.total else {}

    @property
    def failed(self) -> int:
        return self.total - self.counts.get(PASSED, 0)


# ---------------------------------------------------------------------------------------
# Per step (training)
# ---------------------------------------------------------------------------------------


def rollup_splits(run: Run) -> list[str]:
    """The splits this run has scored trajectories in."""
    found = set(StepRollup.objects.filter(run=run).values_list("split", flat=True).distinct())
    preferred = [s for s in ("train", "validation", "held_out", "production") if s in found]
    return preferred + sorted(found - set(preferred))


def default_split(splits: list[str]) -> str:
    """Training's split when the run trained, else the first it has (an evaluation's)."""
    return "train" if "train" in splits else (splits[0] if splits else "train")


@dataclass(frozen=True)
class StepBar:
    """One bar: the steps step..step_max (one step unless the run is wider than MAX_BARS)."""

    step: int
    step_max: int
    counts: BucketCounts


@dataclass(frozen=True)
class RunSteps:
    run: Run
    split: str
    width: int
    bars: list[StepBar]
    totals: BucketCounts
    buckets: list[str] = field(default_factory=list)


def _step_bin(lo: int, width: int):
    """Bar number of a rollup row: (step - lo) / width, integer division on every database."""
    return ExpressionWrapper((F("step") - Value(lo)) / Value(width), output_field=IntegerField())


def step_buckets(run: Run, split: str) -> RunSteps:
    """Bucket counts per step of one split, at most MAX_BARS bars, from the rollups only."""
    rollups = StepRollup.objects.filter(run=run, split=split)
    span = rollups.aggregate(lo=Min("step"), hi=Max("step"))
    if span["lo"] is None:
        return RunSteps(run=run, split=split, width=1, bars=[], totals=BucketCounts(0, {}))
    lo, width = span["lo"], max(1, math.ceil((span["hi"] - span["lo"] + 1) / MAX_BARS))
    steps = (rollups.annotate(bar=_step_bin(lo, width)).values("bar")
             .annotate(total=Sum("count"), passed=Sum("passed"), first=Min("step"), last=Max("step")).order_by("bar"))
    failed: dict[int, dict[str, int]] = defaultdict(dict)
    for row in (BucketRollup.objects.filter(run=run, split=split).annotate(bar=_step_bin(lo, width))
                .values("bar", "bucket").annotate(n=Sum("count"))):
        failed[row["bar"]][row["bucket"]] = row["n"]
    bars = [StepBar(step=row["first"], step_max=row["last"],
                    counts=BucketCounts.from_rollups(row["total"], row["passed"], failed.get(row["bar"], {})))
            for row in steps]
    totals = _sum_counts(bar.counts for bar in bars)
    return RunSteps(run=run, split=split, width=width, bars=bars, totals=totals, buckets=list(totals.counts))


def _sum_counts(parts) -> BucketCounts:
    total, counts = 0, defaultdict(int)
    for part in parts:
        total += part.total
        for bucket, n in part.counts.items():
            counts[bucket] += n
    return BucketCounts(total=total, counts={b: counts[b] for b in ordered(counts)})


# ---------------------------------------------------------------------------------------
# Top buckets with examples
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopBucket:
    bucket: str
    count: int
    share: float
    examples: list[Trajectory]


EXAMPLE_COLUMNS = ("id", "run_id", "task_key", "step", "split", "sample_index", "reward", "passed", "failure_bucket")


def top_buckets(run: Run, split: str, totals: BucketCounts, limit: int = TOP_BUCKETS) -> list[TopBucket]:
    """The run's largest failure buckets (from the totals), each with its newest examples."""
    failures = sorted(((n, b) for b, n in totals.counts.items() if b != PASSED), key=lambda item: (-item[0], item[1]))
    return [TopBucket(bucket=bucket, count=count, share=count / totals.total if totals.total else 0.0,
                      examples=bucket_examples(run, split, bucket))
            for count, bucket in failures[:limit]]


def bucket_examples(run: Run, split: str, bucket: str) -> list[Trajectory]:
    """The newest failed trajectories of one bucket and split, looked for among the bucket's newest
    EXAMPLE_WINDOW rows of the run: a walk down the (run, failure_bucket, id) index that stops
    there, however many rows share the bucket (unbucketed shares the empty bucket with every pass)."""
    rows = Trajectory.objects.filter(run=run, failure_bucket="" if bucket == UNBUCKETED else bucket)
    # The window's oldest id, from the index alone; an IN (window) subquery is planned as a walk
    # over the whole table's primary key instead.
    oldest = rows.order_by("-id").values_list("pk", flat=True)[EXAMPLE_WINDOW - 1:EXAMPLE_WINDOW].first()
    if oldest is not None:
        rows = rows.filter(pk__gte=oldest)
    examples = rows.filter(split=split, passed=False).order_by("-id").only(*EXAMPLE_COLUMNS)
    return list(examples[:EXAMPLES_PER_BUCKET])


# ---------------------------------------------------------------------------------------
# One evaluation, and two side by side
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalPoint:
    """What an evaluation run measured: its split at its last step (a training run: its last held-out step)."""

    run: Run
    split: str
    step: int | None
    counts: BucketCounts


def eval_point(run: Run) -> EvalPoint:
    splits = rollup_splits(run)
    wanted = run.config.get("eval_split") if isinstance(run.config, dict) else None
    split = wanted if wanted in splits else next((s for s in (*EVAL_SPLITS, *splits) if s in splits), "held_out")
    row = StepRollup.objects.filter(run=run, split=split).order_by("-step").values("step", "count", "passed").first()
    if row is None:
        return EvalPoint(run=run, split=split, step=None, counts=BucketCounts(0, {}))
    failed = dict(BucketRollup.objects.filter(run=run, split=split, step=row["step"]).values_list("bucket", "count"))
    return EvalPoint(run=run, split=split, step=row["step"],
                     counts=BucketCounts.from_rollups(row["count"], row["passed"], failed))


def eval_runs(project: Project, limit: int = 200) -> list[Run]:
    """The project's evaluation runs, newest first (the comparison's choices and defaults)."""
    return list(Run.objects.filter(project=project, kind=RunKind.EVAL).order_by("-created_at", "-id")[:limit])


def default_pair(project: Project) -> tuple[Run | None, Run | None]:
    """Baseline and candidate when none were chosen: the two newest evaluations (older is the baseline)."""
    newest = eval_runs(project, limit=2)
    return (newest[1], newest[0]) if len(newest) == 2 else (None, None)


class ComparisonError(ValueError):
    """Runs that cannot be compared; `errors` maps the parameter (a, b) to what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))


def run_in_project(project: Project, run_id: int) -> Run | None:
    """The project's run with this id (another project's run is as absent as a missing one)."""
    return Run.objects.filter(project=project, pk=run_id).first()


def comparison_runs(project: Project, a: int | None, b: int | None) -> tuple[Run | None, Run | None]:
    """Baseline a and candidate b by id; neither given: the two newest evaluations (None, None if fewer)."""
    if a is None and b is None:
        return default_pair(project)
    errors: dict[str, str] = {}
    runs = {}
    for name, run_id in (("a", a), ("b", b)):
        if run_id is None:
            errors[name] = "Give both a and b (run ids), or neither for the two newest evaluation runs."
            continue
        runs[name] = run_in_project(project, run_id)
        if runs[name] is None:
            errors[name] = f"No run {run_id} in this project."
    if not errors and a == b:
        errors["b"] = "a and b are the same run; choose two runs to compare."
    if errors:
        raise ComparisonError(errors)
    return runs["a"], runs["b"]


def newest_scored_run(project: Project) -> Run | None:
    """The run the page opens on: the newest with scored trajectories, training before evaluation."""
    scored = Run.objects.filter(project=project).filter(Exists(StepRollup.objects.filter(run=OuterRef("pk"))))
    newest = ("-created_at", "-id")
    return (scored.exclude(kind=RunKind.EVAL).order_by(*newest).first() or scored.order_by(*newest).first()
            or Run.objects.filter(project=project).order_by(*newest).first())


@dataclass(frozen=True)
class CategoryRow:
    category: str
    a: BucketCounts
    b: BucketCounts


@dataclass(frozen=True)
class Categories:
    rows: list[CategoryRow]
    hidden: int  # categories beyond MAX_CATEGORIES, left out of the rows


def point_rows(point: EvalPoint):
    """The evaluation's trajectories (one run, one step, one split: the (run, step, id) index)."""
    return Trajectory.objects.filter(run=point.run, step=point.step, split=point.split)


def category_counts(point: EvalPoint) -> dict[str, BucketCounts]:
    """Per task category (the dataset task's, else the task snapshot's): bucket counts of one evaluation."""
    if point.step is None:
        return {}
    rows = (point_rows(point).annotate(snapshot_category=KeyTextTransform("category", "task_snapshot"))
            .values("task__category", "snapshot_category", "passed", "failure_bucket").annotate(n=Count("id"))
            .order_by())
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        category = row["task__category"] or row["snapshot_category"] or ""
        counts[str(category)][bucket_of(row["passed"], row["failure_bucket"])] += row["n"]
    return {category: BucketCounts(total=sum(c.values()), counts={b: c[b] for b in ordered(c)})
            for category, c in counts.items()}


def category_comparison(a: EvalPoint, b: EvalPoint) -> Categories:
    """Both evaluations per task category, the categories with most trajectories first."""
    left, right = category_counts(a), category_counts(b)
    empty = BucketCounts(0, {})
    names = sorted(set(left) | set(right),
                   key=lambda c: (-(left.get(c, empty).total + right.get(c, empty).total), c))
    rows = [CategoryRow(category=c, a=left.get(c, empty), b=right.get(c, empty)) for c in names[:MAX_CATEGORIES]]
    return Categories(rows=rows, hidden=max(0, len(names) - MAX_CATEGORIES))


# ---------------------------------------------------------------------------------------
# Transitions between two evaluations
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransitionCell:
    source: str
    target: str
    count: int
    task_key: str | None  # the task, when the cell holds exactly one

    @property
    def changed(self) -> bool:
        return self.source != self.target


@dataclass(frozen=True)
class Transitions:
    """Tasks of a matched by task key with tasks of b: from a's bucket to b's bucket."""

    cells: list[TransitionCell]
    sources: list[str]
    targets: list[str]
    matched: int
    changed: int
    only_a: int
    only_b: int

    def matrix(self) -> list[tuple[str, list[TransitionCell | None], int]]:
        """Rows (from bucket, one cell or None per target bucket, row total) for a table."""
        by_key = {(c.source, c.target): c for c in self.cells}
        return [(s, [by_key.get((s, t)) for t in self.targets], sum(c.count for c in self.cells if c.source == s))
                for s in self.sources]


def first_sample_buckets(point: EvalPoint) -> dict[str, str]:
    """Per task key: the bucket of its first sample (sample_index 0) in this evaluation."""
    if point.step is None:
        return {}
    rows = point_rows(point).filter(sample_index=0).values_list("task_key", "passed", "failure_bucket").order_by()
    return {key: bucket_of(passed, bucket) for key, passed, bucket in rows}


def bucket_transitions(a: EvalPoint, b: EvalPoint) -> Transitions:
    """Which tasks changed bucket between two evaluations, counted per (from, to) pair."""
    before, after = first_sample_buckets(a), first_sample_buckets(b)
    pairs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key in before.keys() & after.keys():
        pairs[(before[key], after[key])].append(key)
    cells = [TransitionCell(source=s, target=t, count=len(keys), task_key=keys[0] if len(keys) == 1 else None)
             for (s, t), keys in pairs.items()]
    cells.sort(key=lambda c: (BUCKETS.index(c.source) if c.source in BUCKETS else len(BUCKETS),
                              BUCKETS.index(c.target) if c.target in BUCKETS else len(BUCKETS)))
    return Transitions(
        cells=cells, sources=ordered({c.source for c in cells}), targets=ordered({c.target for c in cells}),
        matched=sum(c.count for c in cells), changed=sum(c.count for c in cells if c.changed),
        only_a=len(before.keys() - after.keys()), only_b=len(after.keys() - before.keys()),
    )


# ---------------------------------------------------------------------------------------
# Human re-bucketing
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rebucketing:
    verifier: str
    reviewer: str
    count: int

    @property
    def changed(self) -> bool:
        return self.verifier != self.reviewer


def reviewer_bucket(verifier: str, verdict: str, review_bucket: str) -> str:
    """What the reviewer says the trajectory is: their bucket, else the verifier's when they agree,
    else the opposite outcome (a disagreement with a pass is a failure they did not bucket)."""
    if review_bucket:
        return review_bucket
    if verdict == "disagree":
        return FAILED_NO_BUCKET if verifier == PASSED else PASSED
    return verifier


def review_rebucketing(run: Run) -> list[Rebucketing]:
    """Verifier bucket against reviewer bucket over the verdict reviews of the run's trajectories."""
    rows = (Review.objects.filter(trajectory__run=run, preferred_over__isnull=True)
            .values("trajectory__passed", "trajectory__failure_bucket", "verdict", "failure_bucket")
            .annotate(n=Count("id")).order_by())
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for row in rows:
        verifier = bucket_of(row["trajectory__passed"], row["trajectory__failure_bucket"])
        counts[(verifier, reviewer_bucket(verifier, row["verdict"], row["failure_bucket"]))] += row["n"]
    order = {b: i for i, b in enumerate((*BUCKETS, FAILED_NO_BUCKET))}
    return [Rebucketing(verifier=v, reviewer=r, count=n)
            for (v, r), n in sorted(counts.items(), key=lambda item: (order.get(item[0][0], 99),
                                                                      order.get(item[0][1], 99)))]
