"""Tests of lib.intervals: the exact binomial interval and the percentile bootstrap."""
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from lib.calibration import ece
from lib.intervals import binomial_interval, bootstrap_interval


def test_eight_of_eight_is_not_a_point():
    estimate, low, high = binomial_interval(8, 8)
    assert estimate == 1.0 and high == 1.0
    # Clopper-Pearson lower end for k = n: (tail) ** (1 / n)
    assert low == pytest.approx(0.025 ** (1 / 8), abs=1e-12)
    assert 0.62 < low < 0.64


def test_zero_successes_starts_at_zero():
    estimate, low, high = binomial_interval(0, 7)
    assert (estimate, low) == (0.0, 0.0)
    assert high == pytest.approx(1 - 0.025 ** (1 / 7), abs=1e-12)


@pytest.mark.parametrize("k,n", [(1, 10), (17, 17), (24, 28), (2553, 3080), (0, 1), (5, 9)])
def test_matches_scipy_exact_binomial_test(k, n):
    expected = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    estimate, low, high = binomial_interval(k, n)
    assert estimate == k / n
    assert low == pytest.approx(expected.low, abs=1e-10)
    assert high == pytest.approx(expected.high, abs=1e-10)


def test_covers_at_least_the_level_by_simulation():
    rng = np.random.default_rng(0)
    n, p = 12, 0.8
    hits = 0
    draws = rng.binomial(n, p, size=2000)
    for k in draws:
        _, low, high = binomial_interval(int(k), n)
        hits += low <= p <= high
    assert hits / draws.size >= 0.95


def test_numpy_integers_are_counts():
    assert binomial_interval(np.int64(3), np.int64(4)) == binomial_interval(3, 4)


@pytest.mark.parametrize("k,n,error", [(5, 4, ValueError), (-1, 4, ValueError), (0, 0, ValueError),
                                       (1.5, 4, TypeError), (True, 4, TypeError), (1, "4", TypeError)])
def test_bad_counts_are_refused(k, n, error):
    with pytest.raises(error):
        binomial_interval(k, n)


def test_bad_level_is_refused():
    with pytest.raises(ValueError, match="level"):
        binomial_interval(1, 2, level=1.0)
    assert math.isfinite(binomial_interval(1, 2, level=0.5)[1])


# --- bootstrap -------------------------------------------------------------------


def _overconfident(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic over-confident system: stated confidence c, true accuracy c ** 2."""
    rng = np.random.default_rng(seed)
    confidence = rng.uniform(0.3, 1.0, n)
    return confidence, rng.uniform(size=n) < confidence**2


def test_bootstrap_interval_is_reproducible_and_contains_estimate():
    confidence, correct = _overconfident(300, seed=4)
    first = bootstrap_interval(ece, confidence, correct, n=300, seed=7)
    assert first == bootstrap_interval(ece, confidence, correct, n=300, seed=7)
    estimate, low, high = first
    assert estimate == ece(confidence, correct)
    assert low < high and low <= estimate + 0.02


def test_bootstrap_resamples_rows_jointly():
    # If rows were resampled separately, |x - y| would be > 0 for most resamples.
    x = np.linspace(0, 1, 50)
    _, low, high = bootstrap_interval(lambda a, b: float(np.abs(a - b).max()), x, x.copy(), n=200)
    assert low == high == 0.0


@pytest.mark.parametrize(
    ("arrays", "kwargs", "message"),
    [
        ((), {}, "at least one array"),
        (([0.1, 0.2], [1]), {}, "same number of rows"),
        (([], []), {}, "empty"),
        (([0.1], [1]), {"n": 0}, "n "),
        (([0.1], [1]), {"level": 1.0}, "level"),
    ],
)
def test_bootstrap_bad_input(arrays, kwargs, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_interval(ece, *arrays, **kwargs)
