"""Thresholds that keep their promise on new data.

`lib.selective.fit_threshold` picks the lowest threshold whose accepted items reach a target
precision on the fitting data. That is a point estimate chosen where the fitting data happened
to look best, so on new data from the same source it misses the target about half the time
(the winner's curse). The thresholds here make a promise that holds with a stated probability:

* `fit_guaranteed_threshold`: the lowest threshold that, with probability at least 1 - delta
  over the draw of the fitting data, accepts items that are right at least `target_precision`
  of the time (SGR, "selection with guaranteed risk", Geifman & El-Yaniv 2017: a binary search
  over the fitting data's scores in which each probe must pass a Clopper-Pearson lower bound
  at level delta / k, k the most probes the search can make, so that all probes hold at once
  with probability at least 1 - delta). `guaranteed_threshold_search` returns the probes too.
* `precision_lower_bound`: the one-sided Clopper-Pearson bound each probe uses.
* `conformal_threshold`: from in-distribution scores, the cut below which at most alpha of new
  in-distribution items fall *on average* over the draw of the fitting data (split conformal,
  with the finite-sample (n + 1) correction); `conformal_threshold_pac` makes the same promise
  hold with probability at least 1 - delta (a training-conditional, "PAC", cut).

Scores follow `lib.checks.check_scores` (any real numbers, higher = more confident, no NaN) and
`correct` follows `check_binary`. Items with the same score are accepted together.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta, binom

from lib.checks import check_binary, check_positive_int, check_scores, check_unit_interval
from lib.selective import threshold_curve

__all__ = [
    "precision_lower_bound",
    "Probe",
    "GuaranteedSearch",
    "guaranteed_threshold_search",
    "fit_guaranteed_threshold",
    "conformal_threshold",
    "conformal_threshold_pac",
]


def _check_open_unit(value: float, name: str) -> float:
    return check_unit_interval(value, name, include_zero=False, include_one=False)


def precision_lower_bound(right: int, accepted: int, delta: float) -> float:
    """The one-sided exact (Clopper-Pearson) lower bound on a precision: `right` of `accepted` items.

    With probability at least 1 - delta over the draw of the items, the true precision is at
    least this: the `delta` quantile of Beta(right, accepted - right + 1), and 0 when no item is
    right. It is the lowest precision p under which seeing `right` or more right items out of
    `accepted` still has probability at least `delta`.
    """
    for name, value in (("right", right), ("accepted", accepted)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer count, got {value!r}")
    if not 0 <= right <= accepted or accepted < 1:
        raise ValueError(f"need 0 <= right <= accepted and accepted >= 1, got right={right}, accepted={accepted}")
    _check_open_unit(delta, "delta")
    return 0.0 if right == 0 else float(beta.ppf(delta, right, accepted - right + 1))


@dataclass(frozen=True)
class Probe:
    """One step of the search: a threshold, what it accepts on the fitting data, and its bound."""

    threshold: float
    accepted: int
    right: int
    lower_bound: float
    passed: bool


@dataclass(frozen=True)
class GuaranteedSearch:
    """What `guaranteed_threshold_search` found: the threshold (`inf`: accept nothing), the probes
    in the order they were made, and the level each bound used (`delta / most_probes`)."""

    threshold: float
    probes: tuple[Probe, ...]
    most_probes: int
    level: float


def guaranteed_threshold_search(scores: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                                target_precision: float, delta: float = 0.1, *,
                                min_count: int = 1) -> GuaranteedSearch:
    """SGR's binary search (Geifman & El-Yaniv 2017) for the lowest threshold with a guaranteed precision.

    The candidates are the fitting data's distinct scores that accept at least `min_count`
    items, from the strictest (highest) to the most lenient; m of them. A binary search over
    them makes at most k = ceil(log2(m + 1)) probes. Each probe passes when the Clopper-Pearson
    lower bound of its precision at level delta / k reaches `target_precision`; a probe that
    passes sends the search to more lenient thresholds, one that fails to stricter ones. By the
    union bound, every probe's bound holds at once with probability at least 1 - delta, so the
    most lenient probe that passed keeps the promise with that probability. None passed: `inf`.

    Args:
        scores: shape (n,), higher = more confident, any real numbers, no NaN.
        correct: shape (n,), booleans or 0/1: is accepting this item right?
        target_precision: in (0, 1): the share of accepted items that must be right.
        delta: in (0, 1): the most probability the promise may fail with (over the fitting data).
        min_count: the fewest fitting items a threshold must accept to be a candidate.
    """
    values = check_scores(scores, "scores")
    right_answers = check_binary(correct, "correct")
    if values.shape != right_answers.shape:
        raise ValueError(f"scores and correct must have the same length, got {values.size} and {right_answers.size}")
    target = _check_open_unit(target_precision, "target_precision")
    level = _check_open_unit(delta, "delta")
    check_positive_int(min_count, "min_count")
    curve = threshold_curve(values, right_answers)
    curve = curve[curve["count"] >= min_count]
    thresholds = curve["threshold"].to_numpy()
    counts = curve["count"].to_numpy().astype(int)
    rights = np.rint(curve["accuracy"].to_numpy() * counts).astype(int)
    most_probes = max(1, math.ceil(math.log2(len(thresholds) + 1)))
    probe_level = level / most_probes
    probes: list[Probe] = []
    passing, failing = -1, len(thresholds)  # indices: every candidate up to `passing` passed, from `failing` on failed
    while failing - passing > 1:
        middle = (passing + failing) // 2
        bound = precision_lower_bound(int(rights[middle]), int(counts[middle]), probe_level)
        passed = bound >= target
        probes.append(Probe(float(thresholds[middle]), int(counts[middle]), int(rights[middle]), bound, passed))
        passing, failing = (middle, failing) if passed else (passing, middle)
    threshold = float(thresholds[passing]) if passing >= 0 else math.inf
    return GuaranteedSearch(threshold, tuple(probes), most_probes, probe_level)


def fit_guaranteed_threshold(scores: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                             target_precision: float, delta: float = 0.1, *, min_count: int = 1) -> float:
    """The lowest threshold that keeps `target_precision` on new data with probability at least 1 - delta.

    Items with `score >= threshold` from the same source are right at least `target_precision`
    of the time, except with probability at most `delta` over the draw of the fitting data
    (`guaranteed_threshold_search`, SGR). `inf` when no threshold can promise it: accept nothing.
    Raises ValueError for a target or delta outside (0, 1), NaN scores, or mismatched lengths.
    """
    return guaranteed_threshold_search(scores, correct, target_precision, delta, min_count=min_count).threshold


def _sorted_in_distribution(scores: Sequence[float] | np.ndarray, alpha: float) -> np.ndarray:
    values = check_scores(scores, "scores")
    _check_open_unit(alpha, "alpha")
    return np.sort(values)


def conformal_threshold(scores: Sequence[float] | np.ndarray, alpha: float) -> float:
    """Split-conformal cut: new in-distribution items score below it at most `alpha` of the time, on average.

    `scores` are in-distribution items' scores (higher = more in-distribution). The cut is the
    j-th smallest score with j = floor(alpha (n + 1)): a new item from the same source is
    equally likely to take any of the n + 1 ranks among them, so it falls below the j-th
    smallest with probability j / (n + 1) <= alpha (ties only lower it). The promise holds on
    average over the draw of the n scores; one draw's cut can flag more (`conformal_threshold_pac`
    bounds that). `-inf` when j = 0: too few scores to flag anything.
    """
    ordered = _sorted_in_distribution(scores, alpha)
    # Small tolerance so that e.g. 0.1 * 100 = 9.999999999999998 still ranks 10.
    rank = math.floor(alpha * (ordered.size + 1) + 1e-9)
    return -math.inf if rank == 0 else float(ordered[rank - 1])


def conformal_threshold_pac(scores: Sequence[float] | np.ndarray, alpha: float, delta: float = 0.1) -> float:
    """A cut that flags at most `alpha` of new in-distribution items with probability at least 1 - delta.

    Below the j-th smallest of n scores falls a share of new items distributed as Beta(j, n - j + 1)
    (for continuous scores): it exceeds alpha with probability P(Binomial(n, alpha) < j). The cut
    is the j-th smallest score for the largest j whose probability is at most `delta`; `-inf`
    when even j = 1 is too many (n too small for the promise).
    """
    ordered = _sorted_in_distribution(scores, alpha)
    _check_open_unit(delta, "delta")
    ranks = np.arange(1, ordered.size + 1)
    kept = np.flatnonzero(binom.cdf(ranks - 1, ordered.size, alpha) <= delta)
    return -math.inf if kept.size == 0 else float(ordered[ranks[kept[-1]] - 1])
