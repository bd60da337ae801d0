"""Keeping each run's stored headline values (Run.headline_*) equal to what the runs table shows.

The runs table sorts by its headline columns (latest train reward, validation and held-out
success, the last two borrowed from the run's checkpoints' evaluations when the run has none
of its own). Computed per run at read time, that sort costs a subquery for every run of the
project: 66 to 121 ms of SQL at 10,000 runs, growing with every run. Stored on the run and
indexed per direction, a sorted page reads 51 rows from an index at any number of runs.

A stored value is recomputed, with the very expression the table's cells use
(selectors.headlines.headline_value), whenever something it depends on changes:

- the run's own metric points: written by EventIngestor, removed by discard_superseded_rows;
- an evaluation of one of the run's checkpoints: its metric points (above) and its status
  (a borrowed value counts only once the evaluation succeeded), set by the job services and
  by run import.

Recomputing rather than updating in place makes re-ingestion, out-of-order steps and deleted
steps all come out exact, at one indexed query per headline.
"""

from __future__ import annotations

from collections.abc import Iterable

from webapp.runs.models import HEADLINE_SORT_KEYS, Run, RunKind
from webapp.runs.selectors.headlines import HEADLINE_METRICS, headline_value


def run_headlines_refresh(run_ids: Iterable[int]) -> int:
    """Store the headline values of these runs as the table shows them now; the number of runs updated."""
    values = {f"headline_{key}": headline_value(key) for key in HEADLINE_SORT_KEYS}
    # One row at a time, newest first: an evaluation is newer than the run it lends to, and the job
    # services lock the evaluation's row (its status) before its lender's, so every writer takes the
    # two rows' locks in the same order and two of them cannot deadlock.
    return sum(Run.objects.filter(pk=pk).update(**values)
               for pk in sorted({int(i) for i in run_ids if i is not None}, reverse=True))


def headline_dependents(run_ids: Iterable[int]) -> set[int]:
    """The runs whose headline values depend on these runs' metrics and status: each run itself and,
    for an evaluation of a checkpoint, the run that checkpoint belongs to (it may borrow the result)."""
    ids = {int(i) for i in run_ids if i is not None}
    if not ids:
        return set()
    parents = (Run.objects.filter(pk__in=ids, kind=RunKind.EVAL, parent_checkpoint__isnull=False)
               .values_list("parent_checkpoint__run_id", flat=True))
    return ids | set(parents)


def run_headlines_refresh_around(run_ids: Iterable[int]) -> int:
    """After a change to these runs' metrics or status: refresh them and the runs that borrow from them."""
    return run_headlines_refresh(headline_dependents(run_ids))


def borrowers_headlines_refresh(run_ids: Iterable[int]) -> int:
    """After a change to these runs' status: refresh the runs whose checkpoints they evaluate (an
    evaluation lends its result only once it has succeeded; a run's own values do not depend on it)."""
    ids = {int(i) for i in run_ids if i is not None}
    return run_headlines_refresh(headline_dependents(ids) - ids)


def all_headlines_refresh() -> int:
    """Recompute every run's stored headlines: the migration's backfill, and a repair for rows changed
    behind the services' back (the admin, a hand-written UPDATE)."""
    return Run.objects.update(**{f"headline_{key}": headline_value(key) for key in HEADLINE_SORT_KEYS})


def is_headline_metric(split: str, name: str) -> bool:
    """Whether a metric point of this split and name can change a run's stored headlines."""
    return (split, name) in _HEADLINE_POINTS


_HEADLINE_POINTS = frozenset((h.split, h.name) for h in HEADLINE_METRICS)
