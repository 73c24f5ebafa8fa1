"""Confidence intervals for the workbook's measurements.

A measurement on a few hundred items is an estimate; an interval says how far it could move
on another sample of the same size. Two kinds are used:

* `binomial_interval`: the exact (Clopper-Pearson) interval of a proportion, k successes in
  n trials. It is the one to use for small counts and for proportions at 0 or 1: 8 right
  answers of 8 give `(1.0, 0.631, 1.0)`, honest about how little 8 cases show, where a
  percentile bootstrap collapses to `[1, 1]` because every resample is also 8 of 8.
* `bootstrap_interval`: a percentile bootstrap of any metric, for metrics that are not a
  proportion (AUROC, ECE, a paired difference of two methods). Its last step,
  `percentile_interval`, serves functions that compute their resampled values themselves.

Both return `(estimate, low, high)`, so a table can hold either.
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import beta

from lib.checks import check_positive_int, check_unit_interval

__all__ = ["binomial_interval", "bootstrap_interval", "percentile_interval"]


def binomial_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float, float]:
    """Proportion `successes / trials` and its exact (Clopper-Pearson) interval.

    The interval holds every proportion p under which observing `successes` would not be
    rejected by a two-sided exact binomial test at `1 - level`; its ends are Beta quantiles:
    `low = Beta(successes, trials - successes + 1).ppf(tail)` and
    `high = Beta(successes + 1, trials - successes).ppf(1 - tail)`, with `tail = (1 - level) / 2`,
    `low = 0` when `successes == 0` and `high = 1` when `successes == trials`. It covers the
    true proportion at least `level` of the time, whatever the sample size.

    Args:
        successes: count of successes, an integer in [0, trials].
        trials: count of trials, an integer >= 1.
        level: interval coverage in (0, 1), e.g. 0.95.

    Returns:
        `(estimate, low, high)`, each in [0, 1].
    """
    for name, value in (("successes", successes), ("trials", trials)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer count, got {value!r}")
    successes, trials = int(successes), int(trials)
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in [0, trials] = [0, {trials}], got {successes}")
    check_unit_interval(level, "level", include_zero=False, include_one=False)
    tail = (1.0 - level) / 2.0
    low = 0.0 if successes == 0 else float(beta.ppf(tail, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(1.0 - tail, successes + 1, trials - successes))
    return successes / trials, low, high


def bootstrap_interval(
    metric: Callable[..., float],
    *arrays: Sequence | np.ndarray,
    n: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """Point estimate and percentile bootstrap interval of `metric(*arrays)`.

    Rows are resampled jointly (the same row indices for every array), with replacement,
    `n` times, using `numpy.random.default_rng(seed)` so results are reproducible.

    Args:
        metric: function of the arrays returning a number, e.g. `ece`. It must be
            defined on every resample (AUROC, for instance, fails on a resample holding a
            single class).
        *arrays: one or more arrays with the same first dimension (number of rows).
        n: number of bootstrap resamples (>= 1).
        seed: seed of the random generator.
        level: interval coverage in (0, 1), e.g. 0.95 for the 2.5 % and 97.5 % percentiles.

    Returns:
        `(estimate, low, high)`: the metric on the original rows and the interval ends.
    """
    if not arrays:
        raise ValueError("arrays: pass at least one array to resample")
    data = [np.asarray(a) for a in arrays]
    lengths = {len(a) if a.ndim else -1 for a in data}
    if len(lengths) != 1 or -1 in lengths:
        raise ValueError(f"arrays must all have the same number of rows, got lengths {sorted(lengths)}")
    n_rows = lengths.pop()
    if n_rows == 0:
        raise ValueError("arrays are empty: need at least one row to resample")
    check_positive_int(n, "n (number of resamples)")
    check_unit_interval(level, "level", include_zero=False, include_one=False)
    estimate = float(metric(*data))
    rng = np.random.default_rng(seed)
    replicates = np.empty(n)
    for b in range(n):
        rows = rng.integers(0, n_rows, size=n_rows)
        replicates[b] = metric(*(a[rows] for a in data))
    return percentile_interval(estimate, replicates, level)


def percentile_interval(estimate: float, replicates: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """`(estimate, low, high)` with the ends at the `(1 - level) / 2` and `1 - (1 - level) / 2` quantiles
    of `replicates`, the metric's values on the bootstrap resamples.

    The last step of `bootstrap_interval`, for a function that computes the replicates of many
    metrics at once (`lib.calibration.bootstrap_calibration`): the same replicates give the same
    interval, to the last bit.

    Args:
        estimate: the metric on the original rows.
        replicates: shape (n,), the metric on each resample, n >= 1.
        level: interval coverage in (0, 1).
    """
    check_unit_interval(level, "level", include_zero=False, include_one=False)
    values = np.asarray(replicates, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"replicates must be a non-empty 1-D array of shape (n,), got shape {values.shape}")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(estimate), float(low), float(high)
