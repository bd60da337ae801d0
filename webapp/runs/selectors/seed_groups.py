"""Runs that differ only by seed, read as one group: the grouping key, and the group's series.

W&B's "group by" for repeats of one experiment: on the compare page (?group=seed) runs whose
config is the same except for the seed are drawn as one mean line with a min-max band, and
the summary table shows the group's mean and range.

The grouping key (`seed_group_key`) is the canonical JSON (keys sorted, compact) of
  - the run's kind and the rows its config resolved to: dataset version, verifier version,
    model and parent checkpoint (two runs on different dataset versions are different
    experiments even when their configs name the same dataset), and
  - the run's config without IGNORED_CONFIG_KEYS,
hashed with SHA-256. Runs with the same key form a group. Two runs with the same seed (a
re-run) also share a key: they are repeats of one experiment all the same, and the legend
then says "(2 runs)" instead of "(2 seeds)".

IGNORED_CONFIG_KEYS are the keys that do not change what is trained or measured: `seed`
itself, and the names and paths a config written elsewhere may carry (training's own schema
has none, but an imported run's config keeps what its folder said): name, run_name,
output_dir, out, out_dir, run_dir, logging_dir, and experiment-tracker bookkeeping
(report_to, wandb_project, wandb_entity, wandb_name, wandb_group, tags, notes, description).
Everything else counts, including device, num_processes and eval settings: they can change
the numbers, so runs that differ there are not repeats. The run's own name, id, status,
stage, experiment and dates are not part of the key.

Aggregation (`seed_group_series`): per metric and step, the mean, minimum and maximum over
the group's runs that have a point at that step, and n, how many did. A step some runs have
not reached (a shorter or still running run) is aggregated over the runs that have it, so
the band narrows to the runs left and n says so (the chart shows n on hover); nothing is
interpolated. On x=wall and x=tokens a point's x is the mean of its runs' x at that step
(each run counts from its own first point, or its own tokens), since runs are aligned by
step. All runs' points come in one query; the aggregated series is then downsampled as a
single run's is (series.downsample_band: first point, per bucket the extremes and the last).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from webapp.runs.models import MetricPoint, Run
from webapp.runs.selectors.runs import X_AXES, EpochSeconds, SeriesError, _x_mapper
from webapp.runs.selectors.series import DEFAULT_BUCKETS, downsample_band

IGNORED_CONFIG_KEYS: frozenset[str] = frozenset({
    "seed",
    "name", "run_name", "output_dir", "out", "out_dir", "run_dir", "logging_dir",
    "report_to", "wandb_project", "wandb_entity", "wandb_name", "wandb_group", "tags", "notes", "description",
})
# How many config differences a group's label names before it stops (the rest are in the table).
LABEL_KEYS = 3
LABEL_VALUE_CHARS = 40


def _grouped_config(run: Run) -> dict:
    """What the key hashes: kind, the resolved rows, and the config without the ignored keys."""
    config = run.config if isinstance(run.config, dict) else {"config": run.config}
    return {
        "kind": run.kind, "dataset_id": run.dataset_id, "verifier_version_id": run.verifier_version_id,
        "model_id": run.model_id, "parent_checkpoint_id": run.parent_checkpoint_id,
        "config": {key: value for key, value in config.items() if key not in IGNORED_CONFIG_KEYS},
    }


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def seed_group_key(run: Run) -> str:
    """The hash runs of one seed group share (see the module docstring for what it covers)."""
    return hashlib.sha256(_canonical(_grouped_config(run)).encode()).hexdigest()


@dataclass(frozen=True)
class SeedGroup:
    """Runs with one grouping key, in the order they were given; a lone run is a group of one."""

    key: str
    runs: tuple[Run, ...]
    label: str

    @property
    def is_group(self) -> bool:
        return len(self.runs) > 1

    @property
    def run_ids(self) -> list[int]:
        return [run.pk for run in self.runs]

    @property
    def members(self) -> list[tuple[Run, object]]:
        """(run, its config's seed or None) for each run."""
        return [(run, _seed(run)) for run in self.runs]


def _seed(run: Run):
    return run.config.get("seed") if isinstance(run.config, dict) else None


def seed_groups(runs: Sequence[Run]) -> list[SeedGroup]:
    """The runs as seed groups, in order of each group's first run; no queries.

    A group of two or more is labelled by the config values that set it apart from the other
    groups here (up to LABEL_KEYS of them, e.g. "learning_rate 0.0001 · loss_type dapo"), or by
    its first run's name when nothing does, then "(3 seeds)" (or "(3 runs)" when seeds repeat).
    A run without a partner keeps its own name.
    """
    members: dict[str, list[Run]] = {}
    for run in runs:
        members.setdefault(seed_group_key(run), []).append(run)
    configs = {key: _grouped_config(group[0]) for key, group in members.items()}
    groups = []
    for key, group in members.items():
        if len(group) == 1:
            groups.append(SeedGroup(key, (group[0],), group[0].name))
            continue
        seeds = [_seed(run) for run in group]
        count = f"{len(group)} seeds" if len(set(map(_canonical, seeds))) == len(group) else f"{len(group)} runs"
        described = _distinguishing(configs[key], [c for k, c in configs.items() if k != key])
        groups.append(SeedGroup(key, tuple(group), f"{described or group[0].name} ({count})"))
    return groups


def _distinguishing(config: dict, others: list[dict]) -> str:
    """The config entries of `config` that some other group's config does not share, as "key value"."""
    flat = _flatten(config)
    other_flats = [_flatten(other) for other in others]
    parts = []
    for key in sorted(flat):
        if any(other.get(key, _MISSING) != flat[key] for other in other_flats):
            value = flat[key]
            shown = value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else _canonical(value)
            parts.append(f"{key} {shown[:LABEL_VALUE_CHARS]}")
    return " · ".join(parts[:LABEL_KEYS])


_MISSING = object()


def _flatten(config: dict) -> dict:
    """kind, the row ids and the config's own keys on one level (the config's keys as they are)."""
    flat = {key: value for key, value in config.items() if key != "config" and value is not None}
    flat.update(config["config"])
    return flat


# ---------------------------------------------------------------------------------------
# A group's series
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupSeries:
    """One metric of a group: per kept step, x, mean, min, max and how many runs had a point."""

    x: list[float] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    min: list[float] = field(default_factory=list)
    max: list[float] = field(default_factory=list)
    n: list[int] = field(default_factory=list)
    points: int = 0
    downsampled: bool = False


@dataclass(frozen=True)
class GroupSeriesSet:
    x: str
    split: str
    runs: list[int]
    series: dict[str, GroupSeries]


def seed_group_series(
    runs: Sequence[Run], names: Sequence[str], split: str, *, x: str = "step", buckets: int = DEFAULT_BUCKETS,
) -> GroupSeriesSet:
    """Per name, the mean, min and max over `runs` at each step, downsampled as one run's series is.

    One query reads every run's points of `split` (plus, for x=wall or x=tokens, one small
    query per run for its origin or token totals); the aggregation is in `aggregate_steps`.
    SeriesError for an unknown x, or x=tokens when a run has not recorded the token metric.
    """
    if x not in X_AXES:
        raise SeriesError(f"unknown x axis {x!r}; use one of {', '.join(X_AXES)}")
    mappers = {run.pk: _x_mapper(run, x) for run in runs}
    rows = MetricPoint.objects.filter(run_id__in=list(mappers), split=split, name__in=list(names))
    columns = ["name", "step", "value"]
    if x == "wall":
        rows, columns = rows.annotate(seconds=EpochSeconds("recorded_at")), [*columns, "seconds"]
    ordered = rows.order_by("name", "step").values_list(*columns, "run_id")
    series = {name: GroupSeries() for name in names}
    for name, of_name in itertools.groupby(ordered, key=itemgetter(0)):
        located = ((row[1], mappers[row[-1]](row), row[2]) for row in of_name)
        aggregated, stored = aggregate_steps(located, mean_x=x != "step")
        series[name] = _kept(aggregated, stored, buckets)
    return GroupSeriesSet(x=x, split=split, runs=[run.pk for run in runs], series=series)


def aggregate_steps(
    points: Iterable[tuple[int, float | None, float]], *, mean_x: bool = False,
) -> tuple[list[tuple[float, float, float, float, int]], int]:
    """(step, x, value) points of several runs, in step order -> per step (x, mean, min, max, n).

    A point without an x (None: wall time unknown) or with a non-finite value is left out. x is
    the step, or with mean_x the mean of the points' x. Returns the rows in x order and how
    many points were read.
    """
    aggregated = []
    read = 0
    for step, of_step in itertools.groupby(points, key=itemgetter(0)):
        xs, values = [], []
        for _, position, value in of_step:
            read += 1
            if position is not None and math.isfinite(value):
                xs.append(position)
                values.append(value)
        if values:
            where = math.fsum(xs) / len(xs) if mean_x else step
            aggregated.append((where, math.fsum(values) / len(values), min(values), max(values), len(values)))
    if mean_x:
        aggregated.sort(key=itemgetter(0))  # stable: steps with the same mean x keep step order
    return aggregated, read


def _kept(aggregated: list[tuple], stored: int, buckets: int) -> GroupSeries:
    if not aggregated:
        return GroupSeries(points=stored)
    xs, means, lows, highs, counts = (list(column) for column in zip(*aggregated, strict=True))
    kept = downsample_band(xs, means, lows, highs, counts, buckets)
    return GroupSeries(
        x=[round(xs[i], 3) for i in kept], mean=[means[i] for i in kept], min=[lows[i] for i in kept],
        max=[highs[i] for i in kept], n=[counts[i] for i in kept], points=stored,
        downsampled=len(kept) < len(xs),
    )


# ---------------------------------------------------------------------------------------
# A group's final and best values (the compare page's summary table)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Mean, minimum and maximum of one value over a group's runs, and how many runs had it."""

    mean: float
    low: float
    high: float
    n: int


def spread(values: Iterable[float | None]) -> Spread | None:
    """The spread of the finite values (a run without the value is left out); None when none has it."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    return Spread(math.fsum(finite) / len(finite), min(finite), max(finite), len(finite))
