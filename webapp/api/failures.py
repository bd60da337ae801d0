"""API for failure buckets: a run's buckets per step (with its top buckets and human
re-bucketing), and two evaluations compared (per bucket, per task category, transitions).

The Failures page reads the same selectors (webapp.runs.selectors.failures) and parses
its query string with FailuresQuery. Viewers read; non-members get 404. Bad parameters answer
422 as {"detail": message, "errors": {field: message}}, as every other router does.

Buckets: every trajectory counts once, as `passed`, one of the verifier's failure buckets, or
`unbucketed` (failed without a bucket), so a step's counts add up to its total.
"""

from __future__ import annotations

from typing import Any

from ninja import Field, Query, Router, Schema
from pydantic import ValidationError

from webapp.api.errors import FieldErrorsOut, field_errors
from webapp.common.bounds import RowId, Text
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.selectors import failures as fs
from webapp.runs.selectors.runs import all_runs

router = Router(tags=["failures"])

SPLIT_FIELD = Field(None, description="The split to count (train, validation, held_out, ...); "
                                      "default: train when the run trained, else the split it has.")


# ---------------------------------------------------------------------------------------
# Queries (the page parses its query string with FailuresQuery too)
# ---------------------------------------------------------------------------------------


class RunFailuresQuery(Schema):
    split: Text(32, min_length=1) | None = SPLIT_FIELD


class CompareQuery(Schema):
    a: RowId | None = Field(None, description="The baseline run's id. With b; neither: the two newest "
                                              "evaluation runs (the older is a).")
    b: RowId | None = Field(None, description="The candidate run's id.")


class FailuresQuery(RunFailuresQuery, CompareQuery):
    run: RowId | None = Field(None, description="The run whose steps are shown.")


def query_errors(params: Any) -> tuple[FailuresQuery, dict[str, str]]:
    """The page's query string parsed: valid fields kept, each invalid one dropped and named."""
    raw = {name: params.get(name) for name in FailuresQuery.model_fields if params.get(name) not in (None, "")}
    errors: dict[str, str] = {}
    try:
        return FailuresQuery(**raw), errors
    except ValidationError as exc:
        for error in exc.errors():
            name = str(error["loc"][0]) if error.get("loc") else "request"
            errors.setdefault(name, f"{str(raw.get(name, ''))[:40]!r}: {error['msg']}")
    return FailuresQuery(**{k: v for k, v in raw.items() if k not in errors}), errors


# ---------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------


class CountsOut(Schema):
    total: int = Field(description="Trajectories counted.")
    counts: dict[str, int] = Field(description="Per bucket (passed, failure buckets, unbucketed); zeros left out.")
    shares: dict[str, float] = Field(description="counts / total per bucket.")


class StepOut(CountsOut):
    step: int
    step_max: int = Field(description="Last step of this bar: runs longer than 100 steps are counted in bars "
                                      "of consecutive steps (step..step_max); else equal to step.")


class ExampleOut(Schema):
    id: int
    task_key: str
    step: int
    sample_index: int
    reward: float | None


class TopBucketOut(Schema):
    bucket: str
    count: int
    share: float
    examples: list[ExampleOut] = Field(description=f"Its {fs.EXAMPLES_PER_BUCKET} newest trajectories.")


class RebucketOut(Schema):
    verifier_bucket: str
    reviewer_bucket: str = Field(description="The reviewer's bucket; without one, the verifier's when the review "
                                             f"agrees, else the opposite outcome ({fs.PASSED!r} or "
                                             f"{fs.FAILED_NO_BUCKET!r}).")
    count: int


class RunFailuresOut(Schema):
    run_id: int
    run_name: str
    split: str
    splits: list[str] = Field(description="Splits the run has scored trajectories in.")
    step_width: int = Field(description="Steps per bar (1 unless the run has more than 100 steps).")
    buckets: list[str] = Field(description="Buckets that occur, in display order.")
    steps: list[StepOut]
    totals: CountsOut
    top: list[TopBucketOut] = Field(description=f"The {fs.TOP_BUCKETS} largest failure buckets of the split.")
    reviews: list[RebucketOut] = Field(description="Verifier bucket against reviewer bucket over the run's reviews.")


class EvalOut(Schema):
    run_id: int
    run_name: str
    run_kind: str
    split: str = Field(description="The evaluation's split: the run's eval_split, else held_out, validation, "
                                   "train, whichever it has first.")
    step: int | None = Field(description="Its last step in that split (null: nothing scored yet).")
    totals: CountsOut


class CategoryOut(Schema):
    category: str = Field(description="The task's category (\"\" when it has none).")
    a: CountsOut
    b: CountsOut


class TransitionOut(Schema):
    from_bucket: str
    to_bucket: str
    count: int
    task_key: str | None = Field(description="The task, when exactly one task made this transition.")


class TransitionsOut(Schema):
    matched: int = Field(description="Tasks in both evaluations (matched by task key, first sample of each).")
    changed: int = Field(description="Matched tasks whose bucket differs.")
    only_a: int
    only_b: int
    cells: list[TransitionOut]


class ComparisonOut(Schema):
    a: EvalOut
    b: EvalOut
    buckets: list[str]
    categories: list[CategoryOut] = Field(description=f"At most {fs.MAX_CATEGORIES}, largest first.")
    categories_hidden: int = Field(description="Categories left out beyond those.")
    transitions: TransitionsOut


# ---------------------------------------------------------------------------------------
# Answers
# ---------------------------------------------------------------------------------------


def counts_out(counts: fs.BucketCounts) -> dict[str, Any]:
    return {"total": counts.total, "counts": counts.counts, "shares": counts.shares}


def _eval_out(point: fs.EvalPoint) -> dict[str, Any]:
    return {"run_id": point.run.pk, "run_name": point.run.name, "run_kind": point.run.kind, "split": point.split,
            "step": point.step, "totals": counts_out(point.counts)}


def _example_out(trajectory) -> dict[str, Any]:
    return {"id": trajectory.pk, "task_key": trajectory.task_key, "step": trajectory.step,
            "sample_index": trajectory.sample_index, "reward": trajectory.reward}


@router.get("/runs/{run_id}/failures", response={200: RunFailuresOut, 422: FieldErrorsOut},
            summary="Failure buckets of a run, per step")
def run_failures(request, run_id: RowId, query: Query[RunFailuresQuery]):
    """Bucket counts per step of one split (from the rollups), the split's largest failure buckets
    with three example trajectories each, and how reviewers re-bucketed the run's trajectories.

    GET /runs/4/failures?split=train answers {"split": "train", "steps": [{"step": 1, "step_max": 1,
    "total": 64, "counts": {"passed": 26, "wrong_tool": 20, ...}, "shares": {...}}, ...], ...}.
    A split the run has no trajectories in is a 422 naming `split` and the splits it has.
    """
    run = get_object_or_404_for_user(all_runs(), request.user, Role.VIEWER, pk=run_id)
    splits = fs.rollup_splits(run)
    split = query.split or fs.default_split(splits)
    if splits and split not in splits:
        return field_errors({"split": f"Run {run.pk} has no trajectories in split {split!r}; "
                                      f"it has {', '.join(splits)}."})
    steps = fs.step_buckets(run, split)
    return {
        "run_id": run.pk, "run_name": run.name, "split": split, "splits": splits, "step_width": steps.width,
        "buckets": steps.buckets,
        "steps": [{"step": bar.step, "step_max": bar.step_max, **counts_out(bar.counts)} for bar in steps.bars],
        "totals": counts_out(steps.totals),
        "top": [{"bucket": t.bucket, "count": t.count, "share": t.share,
                 "examples": [_example_out(e) for e in t.examples]}
                for t in fs.top_buckets(run, split, steps.totals)],
        "reviews": [{"verifier_bucket": r.verifier, "reviewer_bucket": r.reviewer, "count": r.count}
                    for r in fs.review_rebucketing(run)],
    }


@router.get("/projects/{slug}/failures/compare", response={200: ComparisonOut, 422: FieldErrorsOut},
            summary="Two evaluations compared by failure bucket")
def compare_failures(request, slug: str, query: Query[CompareQuery]):
    """Baseline a against candidate b, each at its evaluation step: counts and shares per bucket,
    the same per task category, and which tasks changed bucket (tasks matched by task key,
    the first sample of each; one cell per from -> to pair).

    Without a and b the project's two newest evaluation runs are compared (the older is a);
    a project with fewer than two is a 422 naming a and b. A run id that is not this
    project's is a 422 naming the field.
    """
    project = get_project_or_404(request.user, slug)
    try:
        a, b = fs.comparison_runs(project, query.a, query.b)
    except fs.ComparisonError as exc:
        return field_errors(exc.errors)
    if a is None or b is None:
        message = "This project has fewer than two evaluation runs; pass a and b (run ids) to compare other runs."
        return field_errors({"a": message, "b": message})
    point_a, point_b = fs.eval_point(a), fs.eval_point(b)
    categories = fs.category_comparison(point_a, point_b)
    transitions = fs.bucket_transitions(point_a, point_b)
    return {
        "a": _eval_out(point_a), "b": _eval_out(point_b),
        "buckets": fs.ordered(set(point_a.counts.counts) | set(point_b.counts.counts)),
        "categories": [{"category": row.category, "a": counts_out(row.a), "b": counts_out(row.b)}
                       for row in categories.rows],
        "categories_hidden": categories.hidden,
        "transitions": {
            "matched": transitions.matched, "changed": transitions.changed,
            "only_a": transitions.only_a, "only_b": transitions.only_b,
            "cells": [{"from_bucket": c.source, "to_bucket": c.target, "count": c.count, "task_key": c.task_key}
                      for c in transitions.cells],
        },
    }
