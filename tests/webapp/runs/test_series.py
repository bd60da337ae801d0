"""Chart series: downsampling keeps every extreme, smoothing is TensorBoard's debiased EMA."""

from __future__ import annotations

import math
import random

import pytest

from webapp.runs.selectors.series import (
    DEFAULT_BUCKETS,
    MAX_DEFAULT_POINTS,
    WHOLE_SERIES_POINTS,
    downsample,
    running_average,
    smooth_ema,
)


def _noisy(n: int, seed: int = 0) -> tuple[list[int], list[float]]:
    rng = random.Random(seed)
    return list(range(n)), [math.sin(i / 500) + rng.uniform(-0.1, 0.1) for i in range(n)]


def test_a_single_spike_in_50000_points_survives():
    xs, ys = _noisy(50_000)
    ys[31_337] = 25.0
    ys[40_001] = -25.0
    out_x, out_y = downsample(xs, ys)
    assert len(out_x) <= MAX_DEFAULT_POINTS
    assert (31_337, 25.0) in zip(out_x, out_y, strict=True)
    assert (40_001, -25.0) in zip(out_x, out_y, strict=True)
    assert max(out_y) == 25.0 and min(out_y) == -25.0


def test_every_bucket_keeps_its_min_max_and_last_point():
    xs, ys = _noisy(10_000, seed=3)
    out = set(zip(*downsample(xs, ys, buckets=100), strict=True))
    for bucket in range(100):
        chunk = list(zip(xs[bucket * 100:(bucket + 1) * 100], ys[bucket * 100:(bucket + 1) * 100], strict=True))
        assert min(chunk, key=lambda p: p[1]) in out
        assert max(chunk, key=lambda p: p[1]) in out
        assert chunk[-1] in out


@pytest.mark.parametrize("n", [0, 1, 2, 999, WHOLE_SERIES_POINTS])
def test_a_series_of_1000_points_or_fewer_is_returned_whole(n):
    xs, ys = _noisy(n)
    assert downsample(xs, ys) == (xs, ys)
    assert downsample(xs, ys, buckets=10) == (xs, ys)


@pytest.mark.parametrize(("n", "buckets"), [(1_001, 10), (50_000, DEFAULT_BUCKETS), (50_000, 10),
                                            (200_000, 5000), (120_000, 1000)])
def test_output_is_bounded_and_in_x_order(n, buckets):
    xs, ys = _noisy(n)
    out_x, out_y = downsample(xs, ys, buckets)
    assert len(out_x) == len(out_y) <= max(WHOLE_SERIES_POINTS, 3 * buckets + 1)
    assert out_x == sorted(out_x)
    assert out_x[0] == 0 and out_x[-1] == n - 1  # the ends of the range stay


def test_default_request_for_50000_points_is_under_2000():
    xs, ys = _noisy(50_000, seed=9)
    assert len(downsample(xs, ys)[0]) <= 2_000


def test_downsampling_is_deterministic_and_not_stride_sampling():
    xs, ys = _noisy(30_000, seed=5)
    first = downsample(xs, ys, buckets=200)
    assert first == downsample(list(xs), list(ys), buckets=200)
    strides = {out_x % 50 for out_x in first[0]}
    assert len(strides) > 1  # kept points fall where the extremes are, not on a grid


def test_unsorted_input_is_put_in_x_order():
    xs, ys = _noisy(5_000)
    order = list(range(5_000))
    random.Random(1).shuffle(order)
    shuffled = downsample([xs[i] for i in order], [ys[i] for i in order], buckets=100)
    assert shuffled == downsample(xs, ys, buckets=100)


def test_non_finite_points_are_dropped_whole_or_downsampled():
    assert downsample([0, 1, 2, 3], [1.0, math.nan, math.inf, 4.0]) == ([0, 3], [1.0, 4.0])
    xs, ys = _noisy(20_000)
    ys[10] = math.nan
    ys[11] = -math.inf
    out_x, out_y = downsample(xs, ys, buckets=100)
    assert all(math.isfinite(y) for y in out_y) and 10 not in out_x and 11 not in out_x


def test_equal_x_values_do_not_divide_by_zero():
    out_x, out_y = downsample([5] * 2_000, [float(i % 7) for i in range(2_000)], buckets=10)
    assert set(out_x) == {5} and min(out_y) == 0.0 and max(out_y) == 6.0 and len(out_x) <= 4


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="length"):
        downsample([1, 2], [1.0])
    with pytest.raises(ValueError, match="buckets"):
        downsample([1], [1.0], buckets=0)


def test_ema_matches_hand_computed_values():
    # w = 0.5: s1 = 0.5 -> 0.5/0.5 = 1; s2 = 0.25 + 1 = 1.25 -> 1.25/0.75 = 1.666667;
    # s3 = 0.625 + 1.5 = 2.125 -> 2.125/0.875 = 2.428571.
    assert smooth_ema([1.0, 2.0, 3.0], 0.5) == pytest.approx([1.0, 1.6666667, 2.4285714])
    # w = 0.9: s1 = 0 -> 0; s2 = 0.1*10 = 1 -> 1/(1-0.81) = 5.263158;
    # s3 = 0.9 + 0.1*10 = 1.9 -> 1.9/(1-0.729) = 7.011070.
    assert smooth_ema([0.0, 10.0, 10.0], 0.9) == pytest.approx([0.0, 5.2631579, 7.0110701])


def test_ema_passes_non_finite_values_through_without_counting_them():
    smoothed = smooth_ema([1.0, math.nan, 2.0, math.inf, 3.0], 0.5)
    assert math.isnan(smoothed[1]) and smoothed[3] == math.inf
    assert [smoothed[0], smoothed[2], smoothed[4]] == pytest.approx([1.0, 1.6666667, 2.4285714])


def test_ema_weight_zero_is_the_identity_and_a_constant_stays_constant():
    values = [0.3, -1.0, 7.5, 0.0, 2.25]
    assert smooth_ema(values, 0.0) == values
    assert smooth_ema([0.7] * 50, 0.99) == pytest.approx([0.7] * 50)
    with pytest.raises(ValueError, match="weight"):
        smooth_ema(values, 1.0)


def test_running_average_over_a_trailing_window():
    assert running_average([1.0, 2.0, 3.0, 4.0, 5.0], 3) == pytest.approx([1.0, 1.5, 2.0, 3.0, 4.0])
    values = [0.1, 0.2, 0.3, 0.7]
    assert running_average(values, 1) == values
    with_gap = running_average([1.0, math.nan, 3.0], 2)
    assert with_gap[0] == 1.0 and math.isnan(with_gap[1]) and with_gap[2] == 2.0
    with pytest.raises(ValueError, match="window"):
        running_average(values, 0)
