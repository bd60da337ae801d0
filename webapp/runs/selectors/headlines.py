"""The runs table's headline metrics and the value it shows for each, as SQL over a run.

Apart from selectors.runs so that the services that keep Run.headline_* (services.headlines,
called from the job and ingest services) can use the same expressions without importing the
run list's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from training.config import RunConfig
from webapp.runs.models import HEADLINE_SORT_KEYS, MetricPoint, RunKind, RunStatus


@dataclass(frozen=True)
class Headline:
    """A metric shown as a column of the runs table and in the run header."""

    key: str
    split: str
    name: str
    label: str


HEADLINE_METRICS: tuple[Headline, ...] = (
    Headline("train/reward", "train", "reward", "Reward"),
    Headline("validation/success_rate", "validation", "success_rate", "Validation success"),
    Headline("held_out/success_rate", "held_out", "success_rate", "Held-out success"),
)

# ?sort= value -> the headline metric it orders by; "-" puts the highest first. Each is stored on the
# run as Run.headline_<sort> (webapp.runs.services.headlines), the column its index orders.
METRIC_SORTS: dict[str, str] = dict(zip(
    HEADLINE_SORT_KEYS, ("train/reward", "validation/success_rate", "held_out/success_rate"), strict=True))


def latest_value(split: str, name: str) -> Subquery:
    """The run's value at its highest step: one backward seek on (run, name, split, step)."""
    points = MetricPoint.objects.filter(run=OuterRef("pk"), split=split, name=name).order_by("-step")
    return Subquery(points.values("value")[:1])


BORROWED_SPLITS = ("validation", "held_out")
"""The headline splits a run may borrow from its checkpoints' evaluations (train metrics never are)."""


def latest_checkpoint_evaluation_value(split: str, name: str) -> Subquery:
    """checkpoint_headlines' value in SQL: the latest finished evaluation of the run's latest evaluated checkpoint.

    Among the evaluation runs of the run's checkpoints that measured `split` (their config's
    eval_split, training's default when it names none), the one of the highest step wins, then
    the latest run of it, then its last step.
    """
    default_split = RunConfig.__dataclass_fields__["eval_split"].default
    measures_split = Q(run__config__eval_split=split)
    if split == default_split:
        measures_split |= Q(run__config__eval_split__isnull=True) | Q(run__config__eval_split=None) \
            | Q(run__config__eval_split="")
    points = (MetricPoint.objects
              .filter(run__parent_checkpoint__run=OuterRef("pk"), run__kind=RunKind.EVAL,
                      run__status=RunStatus.SUCCEEDED, split=split, name=name)
              .filter(measures_split)
              .order_by("-run__parent_checkpoint__step", "-run_id", "-step"))
    return Subquery(points.values("value")[:1])



def headline_value(sort: str) -> Subquery | Coalesce:
    """The value the runs table shows in the METRIC_SORTS[sort] column, as an expression over a run.

    The run's own latest value or, for an evaluation headline it did not record, the one its
    checkpoints' evaluations lend it: what run_headline_cells shows in the same column. None
    where there is neither.
    """
    h = next(h for h in HEADLINE_METRICS if h.key == METRIC_SORTS[sort])
    value = latest_value(h.split, h.name)
    if h.split in BORROWED_SPLITS:
        value = Coalesce(value, latest_checkpoint_evaluation_value(h.split, h.name))
    return value
