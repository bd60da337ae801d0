"""Seed groups: runs that differ only by seed group together, and their mean / min / max per step."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest

from webapp.runs.models import MetricPoint, ModelSpec, Run
from webapp.runs.selectors.runs import SeriesError
from webapp.runs.selectors.seed_groups import (
    IGNORED_CONFIG_KEYS,
    aggregate_steps,
    seed_group_key,
    seed_group_series,
    seed_groups,
    spread,
)
from webapp.runs.selectors.series import MAX_DEFAULT_POINTS, downsample_band

T0 = datetime(2025, 1, 1, tzinfo=UTC)
BASE = {"kind": "grpo", "algorithm": "dapo", "learning_rate": 1e-4, "max_steps": 10, "seed": 1}


def _run(project, title: str, /, **config) -> Run:
    return Run.objects.create(project=project, name=title, kind="grpo", config={**BASE, **config})


def _points(run: Run, name: str, by_step: dict[int, float], *, split: str = "train", seconds: float = 1.0):
    MetricPoint.objects.bulk_create([
        MetricPoint(run=run, step=step, split=split, name=name, value=value,
                    recorded_at=T0 + timedelta(seconds=seconds * step))
        for step, value in by_step.items()])


@pytest.fixture
def project(project_team):
    return project_team["project"]


def test_runs_differing_only_by_seed_group_and_a_different_learning_rate_does_not(project):
    a = _run(project, "a", seed=1)
    other_lr = _run(project, "lr 5e-5", seed=1, learning_rate=5e-5)
    b = _run(project, "b", seed=2, output_dir="/tmp/b", name="renamed")  # ignored keys
    c = _run(project, "c", seed=3)
    groups = seed_groups([a, other_lr, b, c])
    assert [g.run_ids for g in groups] == [[a.pk, b.pk, c.pk], [other_lr.pk]]
    assert [g.is_group for g in groups] == [True, False]
    assert groups[0].label == "learning_rate 0.0001 (3 seeds)"
    assert groups[1].label == "lr 5e-5"  # a lone run keeps its name
    assert [seed for _, seed in groups[0].members] == [1, 2, 3]
    assert {"seed", "name", "output_dir"} <= IGNORED_CONFIG_KEYS


def test_what_the_key_covers_beyond_the_seed(project, project_team):
    a = _run(project, "a", seed=1)
    assert seed_group_key(a) == seed_group_key(_run(project, "b", seed=9, run_name="x", tags=["t"]))
    for different in (_run(project, "steps", seed=2, max_steps=11), _run(project, "nested", seed=2, extra={"k": 1})):
        assert seed_group_key(different) != seed_group_key(a), different.name
    model = ModelSpec.objects.create(project=project, name="tiny", hf_id="x/tiny")
    on_model = Run.objects.create(project=project, name="m", kind="grpo", config={**BASE, "seed": 5}, model=model)
    as_sft = Run.objects.create(project=project, name="s", kind="sft", config={**BASE, "seed": 5})
    assert seed_group_key(on_model) != seed_group_key(a) and seed_group_key(as_sft) != seed_group_key(a)
    # Key order in the stored JSON does not matter: the key hashes canonical JSON.
    reordered = Run.objects.create(project=project, name="r", kind="grpo",
                                   config=dict(reversed(list({**BASE, "seed": 7}.items()))))
    assert seed_group_key(reordered) == seed_group_key(a)


def test_a_repeated_seed_is_counted_as_runs_and_a_group_alone_is_named_after_its_first_run(project):
    groups = seed_groups([_run(project, "first", seed=1), _run(project, "again", seed=1)])
    assert len(groups) == 1 and groups[0].label == "first (2 runs)"


def test_mean_min_max_per_step_over_the_runs_that_have_the_step(project):
    a, b, c = (_run(project, n, seed=s) for n, s in (("a", 1), ("b", 2), ("c", 3)))
    _points(a, "reward", {1: 0.1, 2: 0.4, 3: 0.9})
    _points(b, "reward", {1: 0.3, 2: 0.2, 3: 0.5})
    _points(c, "reward", {1: 0.2, 2: 0.9})  # c stops before step 3
    _points(a, "kl", {1: 5.0})
    result = seed_group_series([a, b, c], ["reward", "kl", "never"], "train")
    reward = result.series["reward"]
    assert reward.x == [1, 2, 3] and reward.n == [3, 3, 2] and reward.points == 8
    assert reward.mean == pytest.approx([0.2, 0.5, 0.7])
    assert reward.min == [0.1, 0.2, 0.5] and reward.max == [0.3, 0.9, 0.9]
    assert result.series["kl"].n == [1] and result.series["kl"].mean == [5.0]
    assert result.series["never"].x == [] and result.runs == [a.pk, b.pk, c.pk]


def test_group_series_reads_every_runs_points_in_one_query(project, django_assert_num_queries):
    runs = [_run(project, f"r{s}", seed=s) for s in range(5)]
    for run in runs:
        _points(run, "reward", {step: step / 10 for step in range(50)})
    with django_assert_num_queries(1):
        series = seed_group_series(runs, ["reward"], "train").series["reward"]
    assert series.n == [5] * 50


def test_wall_time_x_is_the_mean_of_each_runs_own_clock(project):
    a, b = _run(project, "a", seed=1), _run(project, "b", seed=2)
    _points(a, "reward", {0: 0.0, 1: 1.0, 2: 2.0}, seconds=1.0)
    _points(b, "reward", {0: 0.0, 1: 3.0, 2: 4.0}, seconds=3.0)
    series = seed_group_series([a, b], ["reward"], "train", x="wall").series["reward"]
    assert series.x == [0.0, 2.0, 4.0] and series.mean == [0.0, 2.0, 3.0]


def test_tokens_axis_needs_every_runs_token_metric(project):
    a, b = _run(project, "a", seed=1), _run(project, "b", seed=2)
    _points(a, "cost/trained_tokens", {1: 10.0})
    with pytest.raises(SeriesError, match="cost/trained_tokens"):
        seed_group_series([a, b], ["reward"], "train", x="tokens")


def test_aggregate_steps_leaves_out_points_without_an_x_or_a_finite_value():
    rows, read = aggregate_steps([(1, 10.0, 1.0), (1, None, 7.0), (1, 20.0, 3.0), (2, 5.0, math.nan)], mean_x=True)
    assert rows == [(15.0, 2.0, 1.0, 3.0, 2)] and read == 4


def test_a_long_band_keeps_the_spike_of_one_run_and_stays_short():
    rng = random.Random(4)
    n = 30_000
    xs = list(range(n))
    means = [math.sin(i / 900) + rng.uniform(-0.05, 0.05) for i in range(n)]
    lows = [m - 0.2 for m in means]
    highs = [m + 0.2 for m in means]
    highs[12_345] = 50.0  # one run spiked
    lows[23_456] = -50.0
    means[7_777] = 9.0
    kept = downsample_band(xs, means, lows, highs, [3] * n)
    assert len(kept) <= MAX_DEFAULT_POINTS and kept == sorted(kept) and kept[0] == 0 and kept[-1] == n - 1
    assert {12_345, 23_456, 7_777} <= set(kept)
    assert downsample_band([1, 2], [0.5, math.inf], [0, 0], [1, 1], [2, 2]) == [0]  # short: whole, finite only


def test_spread_of_a_groups_final_values():
    assert spread([0.5, None, 0.25, 0.75]) == pytest.approx(type(spread([1.0]))(0.5, 0.25, 0.75, 3))
    assert spread([None, math.nan]) is None
