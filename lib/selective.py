"""Selective prediction: answer only when confident, and measure what that buys.

If a system acts only on items whose confidence is at least a threshold, how accurate is
it on those items (accuracy), and on what share of items does it act (coverage)? Sweeping
the threshold gives the accuracy-coverage curve; its complement is the risk-coverage curve
and the area under that (AURC) summarises it. AUROC asks a different question: how often
is a right answer more confident than a wrong one?

This module also holds the workbook's one threshold fitter: `threshold_curve` lists every
"accept the items scoring at least t" with its coverage and precision (the accuracy of the
accepted items), and `fit_threshold` picks the lowest t (so as many items as possible) whose
accepted items reach a target precision; `target_reached` says whether a given set of accepted
items does. The threshold estimators are built on them and share one base, `ThresholdEstimator`,
with scikit-learn's conventions:

* `Gate` (one threshold on one score, here), `lib.retrieval.RetrievalGate` (two thresholds, see
  its `fit`), `lib.routing.ThresholdRouter` and `lib.assistant.SupportModel`;
* the target is `target_precision` (the share of accepted items that are right), the labels
  `correct` (is accepting this item right?), a fixed threshold is a constructor parameter
  (`threshold`, as scikit-learn's `FixedThresholdClassifier`) that `fit` uses instead of searching;
* the constructor only stores its parameters; `fit` checks them and returns `self`;
* after `fit`, `reached_` says whether the threshold in use reaches the target on the fitting
  data (when no threshold does, the estimator accepts nothing, `threshold_ = inf`) and
  `fitted_on_` how many rows it saw. An estimator does not warn: read `reached_`. Only the
  function `fit_threshold`, which returns a bare number, warns (`UnreachableTargetWarning`);
* used before `fit`, an estimator raises sklearn's `NotFittedError` (`lib.checks.require_fitted`);
* `fitter` chooses the threshold: by default `fit_threshold`'s point estimate, which on new data
  misses the target about half the time; `fitter=lib.guarantees.fit_guaranteed_threshold` fits the
  threshold whose precision holds on new data with probability at least 1 - delta.

Inputs follow `lib.checks`: `confidence` of shape (n,) in [0, 1] and `correct` of shape
(n,) holding booleans or 0/1 (`threshold_curve` and `fit_threshold` take any real
scores). Items with the same score are indistinguishable to a threshold, so they always
enter the accepted set together.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lib.checks import (check_binary, check_confidence_correct, check_positive_int, check_scores, check_unit_interval,
                        require_fitted)
from lib.intervals import percentile_interval

__all__ = [
    "threshold_curve",
    "fit_threshold",
    "target_reached",
    "TARGET_TOLERANCE",
    "UnreachableTargetWarning",
    "ThresholdFitter",
    "ThresholdEstimator",
    "Gate",
    "accuracy_coverage",
    "risk_coverage",
    "tie_aware_accuracy_coverage",
    "aurc",
    "oracle_aurc",
    "auroc",
    "accuracy_at_coverage",
    "precision_at_recall",
    "selective_score_intervals",
    "top_two_gap",
    "agreement_features",
]

TARGET_TOLERANCE = 1e-12
"""An accuracy this close below the target still reaches it (a target written as a sum of floats)."""


class UnreachableTargetWarning(UserWarning):
    """No threshold reaches the target precision on the data it was fitted on; the fit accepts nothing."""


def _scores_correct(scores: object, correct: object) -> tuple[np.ndarray, np.ndarray]:
    """`scores` as a 1-D float array (any real value, NaN allowed) and `correct` as booleans of the same length."""
    values = check_scores(scores, "scores", allow_nan=True)
    corr = check_binary(correct, "correct")
    if corr.shape != values.shape:
        raise ValueError(f"scores and correct must have the same length, got {values.size} and {corr.size}")
    return values, corr


def threshold_curve(scores: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray) -> pd.DataFrame:
    """Every operating point of "accept the items with `score >= t`", strictest first.

    One row per distinct score `t`, in descending order; tied items enter together. A NaN
    score is never accepted, so it is not a candidate and its item is counted only in the
    coverage denominator. Scores may be any real numbers (cosines, probabilities, 1 /
    perplexity); `inf` and `-inf` are candidates like any other value.

    Args:
        scores: shape (n,), higher = more confident.
        correct: shape (n,), booleans or 0/1: is accepting this item right?

    Returns:
        DataFrame with columns `threshold` (float, decreasing), `count` (items accepted),
        `coverage` (count / n, increasing) and `accuracy` (share of the accepted items
        that are correct, in [0, 1]; the precision of the decision "accept").

    Raises ValueError for mismatched or non-1-D arrays, non-binary `correct`, or when
    every score is NaN.
    """
    values, corr = _scores_correct(scores, correct)
    thresholds, counts, n_correct = _threshold_steps(values, corr)
    return pd.DataFrame(
        {
            "threshold": thresholds,
            "count": counts,
            "coverage": counts / values.size,
            "accuracy": n_correct / counts,
        }
    )


def _threshold_steps(values: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The columns of `threshold_curve` as arrays, for metrics that run thousands of times (bootstraps).

    Args:
        values: shape (n,), floats, NaN for items never accepted.
        corr: shape (n,), booleans.

    Returns:
        `(thresholds, counts, n_correct)`, each of shape (k,) for k distinct non-NaN scores:
        thresholds in descending order, items accepted and right answers among them.
    """
    candidate = ~np.isnan(values)
    if not candidate.any():
        raise ValueError("scores has no value that is not NaN: nothing to put a threshold on")
    order, group = _descending_tie_groups(values[candidate])
    group_ends = np.append(np.flatnonzero(group[1:] != group[:-1]), group.size - 1)
    right_so_far = np.cumsum(corr[candidate][order])
    return values[candidate][order][group_ends], group_ends + 1, right_so_far[group_ends].astype(float)


def _descending_tie_groups(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One sort of `values` (shape (n,), no NaN), highest first: the order, and the tie group
    (0, 1, ...) of each sorted position, equal values sharing one.

    Equal values may come in any order within their group: every caller adds up a group as a
    whole, so numpy's default sort serves, five times faster than a stable one (bootstraps
    sort thousands of times)."""
    order = np.argsort(-values)
    descending = values[order]
    return order, np.cumsum(np.r_[0, descending[1:] != descending[:-1]])


def fit_threshold(
    scores: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    target_precision: float = 0.95,
    *,
    min_count: int = 1,
    warn: bool = True,
) -> float:
    """The lowest threshold `t` whose accepted items (`score >= t`) are right at least `target_precision` of the time.

    Lowest, because among the thresholds that are accurate enough it accepts the most
    items (the most right ones too: highest coverage and recall). Accuracy is not monotone
    in `t`, so every row of `threshold_curve` is tried; a threshold qualifies when its
    accepted items reach the target (within 1e-12) and number at least `min_count` (so that
    a handful of lucky top items cannot set it). Only finite scores are candidates.

    When no threshold qualifies, the fit accepts nothing: it returns `inf` (no score is
    `>= inf` except `inf` itself) and, if `warn`, emits `UnreachableTargetWarning`. So
    `math.isinf(t)` tells whether the target was reached; callers for which an unreachable
    target is an ordinary outcome (the threshold estimators, which keep `reached_`) pass `warn=False`.

    Args:
        scores: shape (n,), higher = more confident; NaN is never accepted.
        correct: shape (n,), booleans or 0/1: is accepting this item right?
        target_precision: in [0, 1], the share of accepted items that must be right (0 accepts
            every item that has a score).
        min_count: the fewest accepted items a threshold may leave (positive integer).
        warn: whether to warn when no threshold reaches the target.
    """
    check_unit_interval(target_precision, "target_precision")
    check_positive_int(min_count, "min_count")
    curve = threshold_curve(scores, correct)
    thresholds = curve["threshold"].to_numpy()
    qualifies = (
        np.isfinite(thresholds)
        & (curve["accuracy"].to_numpy() >= target_precision - TARGET_TOLERANCE)
        & (curve["count"].to_numpy() >= min_count)
    )
    if qualifies.any():
        # Rows go from high to low thresholds: the last qualifying row is the lowest threshold.
        return float(thresholds[qualifies][-1])
    if warn:
        warnings.warn(
            f"no threshold reaches precision {target_precision} with at least {min_count} accepted item(s) "
            "on the fitting data; returning inf: accept nothing",
            UnreachableTargetWarning,
            stacklevel=2,
        )
    return math.inf


def target_reached(accepted: Sequence[bool] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                   target_precision: float, *, min_count: int = 1) -> bool:
    """Whether the accepted items number at least `min_count` and are right at least `target_precision` of the time.

    The rule `fit_threshold` applies to each candidate threshold (same tolerance), for a set of
    accepted items chosen otherwise: a fixed threshold, or two thresholds at once.

    Args:
        accepted: shape (n,), booleans: which items the threshold(s) accept.
        correct: shape (n,), booleans or 0/1: is accepting this item right?
        target_precision: in [0, 1].
        min_count: the fewest accepted items that can reach the target (positive integer).
    """
    check_unit_interval(target_precision, "target_precision")
    check_positive_int(min_count, "min_count")
    taken = check_binary(accepted, "accepted")
    corr = check_binary(correct, "correct")
    if taken.shape != corr.shape:
        raise ValueError(f"accepted and correct must have the same length, got {taken.size} and {corr.size}")
    count = int(taken.sum())
    return count >= min_count and float(corr[taken].mean()) >= target_precision - TARGET_TOLERANCE


ThresholdFitter = Callable[..., float]
"""How a threshold estimator chooses its threshold from the fitting data: a function
`(scores, correct, target_precision, *, min_count) -> threshold` (`inf`: accept nothing), such as
`fit_threshold` (the default) or `lib.guarantees.fit_guaranteed_threshold` (`functools.partial` sets
its `delta`)."""


class ThresholdEstimator:
    """The base every threshold estimator shares: a threshold on a score, fitted to a precision target on held-out data.

    `Gate`, `lib.retrieval.RetrievalGate`, `lib.routing.ThresholdRouter` and
    `lib.assistant.SupportModel` are built on it, in scikit-learn's conventions (the module
    docstring lists them): each stores `target_precision` and its fixed threshold(s) as given,
    checks them in `fit` (`check_parameters`), fits or takes its threshold (`threshold_for`) and
    ends `fit` by measuring what it accepts (`measure`: `reached_`, `fitted_on_`) and returning self.

    `fitter` (a constructor parameter of the estimators with one fitted threshold) chooses the
    threshold: None is `fit_threshold`, the lowest threshold whose accepted fitting rows reach the
    target, a point estimate that on new data misses the target about half the time; a
    `ThresholdFitter` such as `lib.guarantees.fit_guaranteed_threshold` makes a promise that holds
    on new data with probability at least 1 - delta. Rows without a score (NaN) never pass, so a
    fitter only sees the scored ones.
    """

    target_precision: float
    fitter: ThresholdFitter | None = None

    def check_parameters(self) -> None:
        """Raise ValueError for a `target_precision` outside [0, 1], TypeError for a `fitter` that is not a function."""
        check_unit_interval(self.target_precision, "target_precision")
        if self.fitter is not None and not callable(self.fitter):
            raise TypeError(f"{type(self).__name__}: fitter must be a function (scores, correct, target_precision, "
                            f"*, min_count) -> threshold, or None for fit_threshold; got {self.fitter!r}")

    def threshold_for(self, scores: np.ndarray, correct: np.ndarray, fixed: float | None, *,
                      min_count: int = 1) -> float:
        """`fixed` when the estimator was given one, else the threshold `fitter` fits to `target_precision`.

        Args:
            scores: shape (n,), higher = more confident; NaN never passes.
            correct: shape (n,), booleans: is accepting this row right?
            fixed: the threshold parameter (None: fit one).
            min_count: the fewest fitting rows the threshold may accept.
        """
        if fixed is not None:
            return float(fixed)
        if self.fitter is None:
            return fit_threshold(scores, correct, self.target_precision, min_count=min_count, warn=False)
        scored = ~np.isnan(np.asarray(scores, dtype=float))
        return float(self.fitter(np.asarray(scores, dtype=float)[scored], np.asarray(correct)[scored],
                                 self.target_precision, min_count=min_count))

    def measure(self, accepted: np.ndarray, correct: np.ndarray, *, min_count: int = 1) -> None:
        """Set `reached_` (the `accepted` fitting rows reach the target, `target_reached`) and `fitted_on_` (their number)."""
        self.reached_ = target_reached(accepted, correct, self.target_precision, min_count=min_count)
        self.fitted_on_ = len(accepted)


@dataclass
class Gate(ThresholdEstimator):
    """One threshold on one score: a row passes when score >= `threshold_`.

    Used for the boundary check of the gates before generation (score = `lib.retrieval.boundary_scores`).
    Fit on dev, predict on test:

        gate = Gate(target_precision=0.95).fit(dev_scores, dev_in_scope)
        passes = gate.predict(test_scores)

    `threshold` fixes the threshold instead of searching for it (`fit` then only measures it);
    `fitter` chooses how it is searched for (`ThresholdEstimator`). Attributes after `fit`:
    `threshold_`, `reached_` (whether the accepted dev rows reach `target_precision`; when no
    threshold does, `threshold_` is `inf` and the gate accepts nothing) and `fitted_on_`.
    """

    target_precision: float = 0.95
    threshold: float | None = None
    fitter: ThresholdFitter | None = None

    def fit(self, scores: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray) -> Gate:
        """Set `threshold_` (a gate's precision is the accuracy of what it accepts).

        Args:
            scores: shape (n,), higher = more confident; NaN never passes.
            correct: shape (n,), booleans: is letting this row pass right?
        """
        self.check_parameters()
        values = check_scores(scores, "scores", allow_nan=True)
        self.threshold_ = self.threshold_for(values, correct, self.threshold)
        with np.errstate(invalid="ignore"):
            self.measure(values >= self.threshold_, correct)
        return self

    def predict(self, scores: Sequence[float] | np.ndarray) -> np.ndarray:
        """Bool array, shape (n,): True where score >= `threshold_` (NaN never passes)."""
        require_fitted(self, "threshold_", "predict")
        with np.errstate(invalid="ignore"):
            return np.asarray(scores, dtype=np.float64) >= self.threshold_


def accuracy_coverage(
    confidence: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray
) -> pd.DataFrame:
    """Accuracy of the acted set for every confidence threshold, highest threshold first.

    `threshold_curve` for a confidence: checks that `confidence` holds finite values in
    [0, 1] (`lib.checks.check_confidence_correct`). Row j stands for "act on every item
    with `confidence >= threshold`", one row per distinct confidence value in descending
    order (tied items enter together).

    Returns:
        DataFrame with columns `threshold` (float in [0, 1]), `count` (items acted on),
        `coverage` (count / n, in (0, 1], increasing) and `accuracy` (share of acted
        items that are correct, in [0, 1]). The last row has coverage 1.
    """
    return threshold_curve(*check_confidence_correct(confidence, correct))


def tie_aware_accuracy_coverage(
    confidence: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray
) -> pd.DataFrame:
    """Expected accuracy after acting on the k most confident items, for every k from 1 to n.

    A threshold can only act on whole tie blocks, so `accuracy_coverage` has one row per
    block end. Drawing those rows as a step held until the next block (`where="post"`)
    shows a block's accuracy over coverage the curve never reaches, which makes a method
    with many ties (an isotonic map) look better or worse than it is. Between block ends
    this curve takes the tied items in random order and reports the expected accuracy:
    with `N` items and `C` right ones before a block of `m` items holding `c` right ones,
    acting on `j` of them (1 <= j <= m) gives `(C + j * c / m) / (N + j)`. At every block end
    it equals `accuracy_coverage`; two confidences that rank the items the same way up to
    ties inside blocks give the same block ends.

    Args:
        confidence: shape (n,), in [0, 1].
        correct: shape (n,), booleans or 0/1.

    Returns:
        DataFrame with n rows and columns `count` (1..n), `coverage` (count / n) and
        `accuracy` (expected share of right answers among the acted items).
    """
    blocks = accuracy_coverage(confidence, correct)
    ends = blocks["count"].to_numpy()
    right_at_ends = np.rint(ends * blocks["accuracy"].to_numpy())
    starts = np.concatenate(([0], ends[:-1]))
    right_at_starts = np.concatenate(([0.0], right_at_ends[:-1]))
    count = np.arange(1, ends[-1] + 1)
    block = np.searchsorted(ends, count)  # the block holding the count-th item
    taken = count - starts[block]
    block_rate = (right_at_ends[block] - right_at_starts[block]) / (ends[block] - starts[block])
    return pd.DataFrame(
        {
            "count": count,
            "coverage": count / ends[-1],
            "accuracy": (right_at_starts[block] + taken * block_rate) / count,
        }
    )


def risk_coverage(
    confidence: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray
) -> pd.DataFrame:
    """Like `accuracy_coverage` but with `risk = 1 - accuracy` (error rate of acted items).

    Columns: `threshold`, `count`, `coverage`, `risk`.
    """
    curve = accuracy_coverage(confidence, correct)
    return curve.assign(risk=1.0 - curve["accuracy"]).drop(columns="accuracy")


def aurc(confidence: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray) -> float:
    """Area under the risk-coverage curve, in [0, 1]; lower is better.

    The curve is a step function: between the coverage of one threshold and the next, the
    risk is that of the larger acted set. Without ties this is the usual
    `(1/n) * sum_i risk(top i items)`; tied items share the risk of their whole group.
    """
    conf, corr = check_confidence_correct(confidence, correct)
    _, counts, n_correct = _threshold_steps(conf, corr)
    return _aurc_of_steps(counts, n_correct)


def _aurc_of_steps(counts: np.ndarray, n_correct: np.ndarray) -> float:
    """`aurc` from the acted counts and right answers of every threshold, highest first, shape (k,)."""
    widths = np.diff(counts / counts[-1], prepend=0.0)
    return float(np.sum(widths * (1.0 - n_correct / counts)))


def oracle_aurc(correct: Sequence[bool] | np.ndarray) -> float:
    """The lowest AURC any confidence can reach on these answers: every right answer ranked first.

    With R right answers out of n, acting on the top i items has risk 0 for i <= R and
    `(i - R) / i` after that, so `oracle AURC = (1/n) * sum_{i=R+1..n} (i - R) / i`. It is
    above 0 whenever some answers are wrong (they are still there at full coverage).
    Giving every right answer one confidence and every wrong answer another (e.g.
    `aurc(correct, correct)`) is *not* this oracle: `aurc` treats tied items as one
    step, which scores that two-valued confidence at about `(1 - accuracy)**2`.

    Args:
        correct: shape (n,), booleans or 0/1.
    """
    corr = check_binary(correct, "correct")
    acted = np.arange(1, corr.size + 1)
    risk = np.maximum(acted - int(corr.sum()), 0) / acted
    return float(risk.mean())


def auroc(confidence: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray) -> float:
    """Probability that a random right answer has higher confidence than a random wrong one.

    Ties count one half. This is the Mann-Whitney U statistic over its maximum: with P right
    and N wrong answers, `AUROC = U / (P N)`, where U counts the (right, wrong) pairs in which
    the right answer is more confident, ties counting one half. (U also equals the sum of the
    right answers' average ranks minus `P (P + 1) / 2`.) Equals
    `sklearn.metrics.roc_auc_score(correct, confidence)`.
    0.5 means confidence does not separate right from wrong; 1.0 means it separates perfectly.

    Raises ValueError if `correct` holds only one class (AUROC is undefined).
    """
    conf, corr = check_confidence_correct(confidence, correct)
    n_right = int(corr.sum())
    n_wrong = corr.size - n_right
    if n_right == 0 or n_wrong == 0:
        raise ValueError(
            "correct holds only one class (all right or all wrong); AUROC needs both right and wrong answers"
        )
    _, counts, n_correct = _threshold_steps(conf, corr)
    return _auroc_of_steps(counts, n_correct)


def _auroc_of_steps(counts: np.ndarray, n_correct: np.ndarray) -> float:
    """`auroc` from the acted counts and right answers of every threshold, highest first, shape (k,).

    Each tie group's right answers beat the wrong answers of every lower group and tie with
    the wrong ones of their own group, so `2 U = sum over groups of right * (2 * wrong below +
    wrong in the group)`: a sum of whole numbers, exact in floating point.
    """
    right = np.diff(n_correct, prepend=0.0)
    wrong = np.diff(counts, prepend=0) - right
    wrong_below = wrong.sum() - np.cumsum(wrong)
    pairs_twice = np.sum(right * (2.0 * wrong_below + wrong))
    return float(pairs_twice / 2.0 / (n_correct[-1] * wrong.sum()))


def accuracy_at_coverage(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    coverage: float,
) -> float:
    """Accuracy when acting on (at least) the most confident `coverage` share of items.

    Uses the smallest acted set of `accuracy_coverage` whose coverage reaches
    `coverage` (ties enter together, so the achieved coverage can be a bit higher).

    Args:
        coverage: target share of items acted on, in (0, 1].
    """
    check_unit_interval(coverage, "coverage", include_zero=False)
    curve = accuracy_coverage(confidence, correct)
    # Tolerance so that e.g. coverage=0.3 with n=10 reaches the row with coverage 3/10.
    reached = curve["coverage"].to_numpy() >= coverage - 1e-12
    return float(curve["accuracy"].to_numpy()[np.argmax(reached)])


def precision_at_recall(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    recall: float,
) -> float:
    """Precision of the acted set at the highest threshold that keeps `recall` of the right answers.

    The right answers are the positives. For a threshold `t`, the acted set is every item
    with `confidence >= t`; its **recall** is the share of all right answers that are in it,
    and its **precision** the share of it that is right (the acted accuracy). The threshold is
    the highest one whose recall is at least `recall`; tied items stay together, so the
    recall reached can be a bit higher than asked. Example: a precision of 0.88 at 90% recall
    means that keeping 90% of the right answers costs acting on wrong answers at a rate of 12%.

    Args:
        confidence: shape (n,), in [0, 1], higher = more confident.
        correct: shape (n,), booleans or 0/1; must hold at least one right answer.
        recall: the share of right answers to keep, in (0, 1].

    Raises ValueError for `recall` outside (0, 1] or when no answer is right.
    """
    check_unit_interval(recall, "recall", include_zero=False)
    conf, corr = check_confidence_correct(confidence, correct)
    n_right = int(corr.sum())
    if n_right == 0:
        raise ValueError("correct holds no right answer; recall is undefined")
    _, counts, n_correct = _threshold_steps(conf, corr)
    return _precision_at_recall_of_steps(counts, n_correct, recall)


def _precision_at_recall_of_steps(counts: np.ndarray, n_correct: np.ndarray, recall: float) -> float:
    """`precision_at_recall` from the acted counts and right answers of every threshold, highest first, shape (k,)."""
    # Tolerance so that e.g. recall=0.5 with 4 right answers reaches the row holding 2 of them.
    reached = n_correct / n_correct[-1] >= recall - 1e-12
    first = np.argmax(reached)
    return float(n_correct[first] / counts[first])


def selective_score_intervals(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    recall: float,
    *,
    n: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, tuple[float, float, float]]:
    """AUROC, AURC and precision at `recall`, each with its percentile bootstrap interval.

    The result equals calling `lib.intervals.bootstrap_interval` three times (with `auroc`,
    `aurc` and `precision_at_recall`, the same `n`, `seed` and `level`): the same resamples,
    the same numbers. It is faster because it sorts the confidences once. A resample only
    changes how many times each item is drawn, so each one is scored by counting the draws per
    tie group of the sorted original (no sort at all), where the three metrics take one sort
    each per resample.

    Args:
        confidence: shape (n,), in [0, 1].
        correct: shape (n,), booleans or 0/1, holding right and wrong answers.
        recall: the share of right answers to keep for the precision, in (0, 1].
        n: number of bootstrap resamples (>= 1).
        seed: seed of `numpy.random.default_rng`, as in `bootstrap_interval`.
        level: interval coverage in (0, 1).

    Returns:
        `{"AUROC": (estimate, low, high), "AURC": (...), "precision": (...)}`.

    Raises ValueError when `correct` holds one class only, or when a resample does (AUROC
    is undefined there, as it would be for `bootstrap_interval(auroc, ...)`).
    """
    check_unit_interval(recall, "recall", include_zero=False)
    check_positive_int(n, "n (number of resamples)")
    check_unit_interval(level, "level", include_zero=False, include_one=False)
    conf, corr = check_confidence_correct(confidence, correct)
    _, counts, n_correct = _threshold_steps(conf, corr)
    if n_correct[-1] in (0, conf.size):
        raise ValueError(
            "correct holds only one class (all right or all wrong); AUROC needs both right and wrong answers"
        )
    estimates = _selective_scores_of_steps(counts, n_correct, recall)
    # Tie groups of the original, highest confidence first; a resample is a count of draws per item.
    order, group = _descending_tie_groups(conf)
    group_of_item = np.empty(conf.size, dtype=np.intp)
    group_of_item[order] = group
    n_groups = int(group[-1]) + 1
    rng = np.random.default_rng(seed)
    replicates = np.empty((n, 3))
    for b in range(n):
        rows = rng.integers(0, conf.size, size=conf.size)
        drawn = np.bincount(group_of_item[rows], minlength=n_groups)
        right = np.bincount(group_of_item[rows], weights=corr[rows].astype(float), minlength=n_groups)
        present = drawn > 0
        counts, n_correct = np.cumsum(drawn[present]), np.cumsum(right[present])
        if n_correct[-1] in (0, conf.size):
            raise ValueError(f"bootstrap resample {b} holds only one class; AUROC is undefined on it")
        replicates[b] = _selective_scores_of_steps(counts, n_correct, recall)
    return {name: percentile_interval(estimates[i], replicates[:, i], level)
            for i, name in enumerate(("AUROC", "AURC", "precision"))}


def _selective_scores_of_steps(counts: np.ndarray, n_correct: np.ndarray, recall: float) -> tuple[float, float, float]:
    """(AUROC, AURC, precision at `recall`) from the acted counts and right answers of every threshold, shape (k,)."""
    return (_auroc_of_steps(counts, n_correct), _aurc_of_steps(counts, n_correct),
            _precision_at_recall_of_steps(counts, n_correct, recall))


def top_two_gap(probabilities: Sequence[float] | np.ndarray) -> float:
    """Top-1 minus top-2 of one item's option probabilities, shape (k,); the top-1 itself when k == 1.

    A confidence signal of its own: a decider torn between two options has a small gap even
    when its top probability looks high. Raises ValueError on an empty array.
    """
    ordered = np.sort(np.asarray(probabilities, dtype=float).ravel())[::-1]
    if ordered.size == 0:
        raise ValueError("probabilities is empty: pass the option probabilities of one item")
    return float(ordered[0] - (ordered[1] if ordered.size > 1 else 0.0))


def agreement_features(
    deciders: Mapping[str, pd.DataFrame], retriever: pd.DataFrame, retriever_name: str = "knn"
) -> pd.DataFrame:
    """Signals for predicting whether an answer is right: probabilities, agreement, retriever scores.

    Different methods fail on different messages, so whether they pick the same label is
    evidence of its own. This joins saved results of several methods on their row index and
    returns, per message, the columns a combined signal (e.g. a logistic regression) reads.

    Args:
        deciders: name -> one method's results, one row per message, indexed by the row
            index `i` of the split, with columns `pred` (its answer) and `confidence`
            (its probability of that answer).
        retriever: the nearest-neighbour retriever's results on the same split, indexed by
            `i`, with columns `pred` (top-1 label), `similarity` and `margin`.
        retriever_name: how the retriever is named in the agreement columns.

    Returns:
        DataFrame of shape (m, 2 * k + k * (k - 1) / 2 + 2) for k deciders, float columns,
        indexed by the `i` present in every frame (inner join, sorted, m <= each frame's
        length), columns in this order:

        * `"p <name>"`: each decider's probability of its answer;
        * `"<name> = <retriever_name>"`: 1.0 where the decider's answer equals the
          retriever's top-1 label, else 0.0;
        * `"<a> = <b>"`: for each pair of deciders, in the order given, 1.0 where they agree;
        * `"similarity"`, `"margin"`: the retriever's scores.

    Raises ValueError if `deciders` is empty or a name collides with `retriever_name`.
    """
    if not deciders:
        raise ValueError("deciders is empty; pass at least one method's results")
    if retriever_name in deciders:
        raise ValueError(f"a decider is named {retriever_name!r}, like the retriever; rename one of them")
    index = retriever.index
    for frame in deciders.values():
        index = index.intersection(frame.index)
    index = index.sort_values()
    predictions = {name: frame.loc[index, "pred"] for name, frame in deciders.items()}
    retriever_pred = retriever.loc[index, "pred"]
    columns: dict[str, pd.Series] = {}
    for name, frame in deciders.items():
        columns[f"p {name}"] = frame.loc[index, "confidence"].astype(float)
    for name in deciders:
        columns[f"{name} = {retriever_name}"] = (predictions[name] == retriever_pred).astype(float)
    names = list(deciders)
    for first_at, first in enumerate(names):
        for second in names[first_at + 1:]:
            columns[f"{first} = {second}"] = (predictions[first] == predictions[second]).astype(float)
    columns["similarity"] = retriever.loc[index, "similarity"].astype(float)
    columns["margin"] = retriever.loc[index, "margin"].astype(float)
    return pd.DataFrame(columns, index=index)
