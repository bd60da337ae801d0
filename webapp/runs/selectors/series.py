"""Metric series for charts: downsampling that keeps extremes, and TensorBoard's smoothing.

Pure functions over lists of floats, no Django, so pages, the API and tests share them.

Downsampling (UI.md "Charts"): the x range is cut into equal-width buckets and each
bucket keeps its minimum point, its maximum point and its last point, in x order (the
series also keeps its first point). A line drawn through the kept points therefore still
shows every spike and dip at its real x, which stride sampling (every k-th point) would
hide. A short series is sent whole.

Non-finite numbers: a point whose x or y is NaN or infinite is dropped, whether the
series is downsampled or sent whole, because JSON cannot carry it and a chart cannot
place it. (Ingest never stores one; this only guards other callers.) Smoothing, in
contrast, keeps a non-finite value in place, as TensorBoard does.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections import deque
from collections.abc import Sequence

# A series of this many points or fewer is returned whole.
WHOLE_SERIES_POINTS = 1_000
# At most 3 points per bucket and the first: 666 buckets keep any long series under 2,000 points.
MAX_DEFAULT_POINTS = 2_000
DEFAULT_BUCKETS = MAX_DEFAULT_POINTS // 3


def downsample(
    xs: Sequence[float], ys: Sequence[float], buckets: int = DEFAULT_BUCKETS
) -> tuple[list[float], list[float]]:
    """The points a chart needs: whole if short, else min, max and last of each x bucket.

    The series' first point is kept too, so the line starts where the data starts.
    Returns (xs, ys) as lists in x order (ties keep their input order), at most
    max(WHOLE_SERIES_POINTS, 3 * buckets + 1) points long. Deterministic: the same input
    always gives the same output, so a refreshed chart does not flicker.
    """
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys differ in length ({len(xs)} and {len(ys)})")
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    sorted_x, sorted_y = _finite_in_x_order(xs, ys)
    if len(sorted_x) <= max(WHOLE_SERIES_POINTS, 3 * buckets + 1):
        return sorted_x, sorted_y
    kept = _bucket_extremes(sorted_x, sorted_y, buckets)
    return [sorted_x[i] for i in kept], [sorted_y[i] for i in kept]


def _finite_in_x_order(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """The finite points in x order; the usual input (finite, sorted by step) is only copied."""
    xs, ys = list(xs), list(ys)
    if not (math.isfinite(sum(xs)) and math.isfinite(sum(ys))):  # a NaN or inf anywhere makes the sum one
        finite = [i for i in range(len(xs)) if math.isfinite(xs[i]) and math.isfinite(ys[i])]
        xs, ys = [xs[i] for i in finite], [ys[i] for i in finite]
    if not all(map(operator.le, xs, itertools.islice(xs, 1, None))):
        order = sorted(range(len(xs)), key=xs.__getitem__)  # stable: equal x keep their input order
        xs, ys = [xs[i] for i in order], [ys[i] for i in order]
    return xs, ys


def _bucket_extremes(xs: list[float], ys: list[float], buckets: int) -> list[int]:
    """The first index, then each bucket's first minimum, first maximum and last index, in order.

    xs is sorted, so each bucket [start + b*width, start + (b+1)*width) is a slice found
    by bisection, and min/max run over the slice in C rather than point by point.
    """
    start, width = xs[0], (xs[-1] - xs[0]) / buckets
    edges = [bisect.bisect_left(xs, start + b * width) for b in range(1, buckets)] if width > 0 else []
    kept = [0]
    for low, high in itertools.pairwise([0, *edges, len(xs)]):
        if low == high:
            continue
        chunk = ys[low:high]
        first_min, first_max = low + chunk.index(min(chunk)), low + chunk.index(max(chunk))
        kept.extend(sorted({first_min, first_max, high - 1}))
    return list(dict.fromkeys(kept))  # the first point may also be its bucket's min or max


def smooth_ema(values: Sequence[float], weight: float) -> list[float]:
    """TensorBoard's debiased exponential moving average.

    s = s*w + (1-w)*y; shown = s / (1 - w^n), with n counting the finite values seen
    so far. Without the debias term the curve would start near 0 and crawl up; with it
    the first shown value is the first value. A non-finite y is passed through as it is
    and neither moves s nor counts in n. weight 0 returns the values unchanged.
    """
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"weight must be in [0, 1), got {weight}")
    smoothed: list[float] = []
    state, count = 0.0, 0
    for value in values:
        if not math.isfinite(value):
            smoothed.append(value)
            continue
        state = state * weight + (1.0 - weight) * value
        count += 1
        smoothed.append(state / (1.0 - weight**count))
    return smoothed


def running_average(values: Sequence[float], window: int) -> list[float]:
    """Mean of the last `window` finite values at each point (fewer at the start).

    Non-finite values pass through unchanged and stay out of every window, as in
    smooth_ema. window 1 returns the values unchanged.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    averaged: list[float] = []
    recent: deque[float] = deque(maxlen=window)
    for value in values:
        if not math.isfinite(value):
            averaged.append(value)
            continue
        recent.append(value)
        # fsum of the window, not a running total: no drift over 100,000 points.
        averaged.append(math.fsum(recent) / len(recent))
    return averaged


def downsample_band(
    xs: Sequence[float], means: Sequence[float], lows: Sequence[float], highs: Sequence[float],
    counts: Sequence[int], buckets: int = DEFAULT_BUCKETS,
) -> list[int]:
    """Which points of a group's mean line and min-max band a chart needs, as indices in x order.

    The band's version of `downsample`: the same rule (short series whole; else the first
    point and, per equal-width x bucket, its extremes and its last point), with the extremes
    of three curves kept: the first minimum and maximum of the mean, the first minimum of the
    lows and the first maximum of the highs, so neither a spike of the mean nor the band's
    widest reach is lost. Five points a bucket instead of three, so the bucket count is cut to
    3/5 of `buckets` and a band stays about as long as a line. Non-finite points are dropped;
    inputs must be in x order (the group aggregation builds them so).
    """
    columns = (xs, means, lows, highs, counts)
    if len({len(column) for column in columns}) != 1:
        raise ValueError("xs, means, lows, highs and counts differ in length")
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    finite = [i for i in range(len(xs))
              if math.isfinite(xs[i]) and math.isfinite(means[i]) and math.isfinite(lows[i])
              and math.isfinite(highs[i])]
    if len(finite) <= max(WHOLE_SERIES_POINTS, 3 * buckets + 1):
        return finite
    band_buckets = max(1, buckets * 3 // 5)
    fx = [xs[i] for i in finite]
    start, width = fx[0], (fx[-1] - fx[0]) / band_buckets
    edges = [bisect.bisect_left(fx, start + b * width) for b in range(1, band_buckets)] if width > 0 else []
    kept = [0]
    for low, high in itertools.pairwise([0, *edges, len(fx)]):
        if low == high:
            continue
        window = range(low, high)
        mean_of = lambda j: means[finite[j]]  # noqa: E731 - a key, read once per bucket
        picks = {min(window, key=mean_of), max(window, key=mean_of),
                 min(window, key=lambda j: lows[finite[j]]), max(window, key=lambda j: highs[finite[j]]), high - 1}
        kept.extend(sorted(picks))
    return [finite[j] for j in dict.fromkeys(kept)]
