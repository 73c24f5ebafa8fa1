"""Calibration: does a confidence of 0.8 mean "right 8 times out of 10"?

This module measures calibration (reliability bins, ECE, Brier score, NLL; their intervals
come from `lib.intervals.bootstrap_interval`, or for several confidences of the same answers
at once from `bootstrap_calibration`, whose resamples give the same intervals) and repairs it with calibrators that are fitted
on calibration data and applied to new data, in the scikit-learn style: `fit` returns the fitted object, `predict`
refuses to run before `fit` (`lib.checks.require_fitted`).

Conventions used throughout the workbook (checked by `lib.checks`, so that every public
function rejects bad input with the same messages):

* `confidence`: 1-D float array, shape (n,), values in [0, 1], no NaN or inf.
* `correct`: 1-D array, shape (n,), of booleans or of 0/1 numbers: was the answer
  the system would give right?
* Option log-probabilities (temperature scaling): one 1-D array of scores per question,
  one score per offered option, rows may have different lengths.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.special import expit, logsumexp
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from lib.checks import check_confidence, check_confidence_correct, check_positive_int, require_fitted

__all__ = [
    "reliability_bins",
    "ece",
    "brier",
    "nll",
    "NLL_EPS",
    "CALIBRATION_SCORES",
    "CalibrationReplicates",
    "bootstrap_calibration",
    "TemperatureScaling",
    "softmax_at_temperature",
    "IsotonicCalibrator",
    "HistogramBinningCalibrator",
    "PlattCalibrator",
    "BinStrategy",
    "OptionLogprobs",
]

BinStrategy = Literal["uniform", "quantile"]

# ---------------------------------------------------------------------------
# Binning and calibration metrics
# ---------------------------------------------------------------------------


def _bin_edges(confidence: np.ndarray, n_bins: int, strategy: BinStrategy) -> np.ndarray:
    """Return `n_bins + 1` ascending bin edges.

    "uniform": edges `k / n_bins` computed exactly that way, so that a confidence of
    `2 / 15` sits exactly on the third edge. "quantile": empirical quantiles of
    `confidence`; repeated values can make edges coincide (those bins stay empty).
    """
    if strategy == "uniform":
        return np.arange(n_bins + 1) / n_bins
    if strategy == "quantile":
        return np.quantile(confidence, np.arange(n_bins + 1) / n_bins)
    raise ValueError(f"strategy must be 'uniform' or 'quantile', got {strategy!r}")


def _bin_index(confidence: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin number in `0 .. len(edges) - 2` for each confidence.

    A value exactly on an inner edge goes to the bin above it; values at or beyond the
    outer edges go to the first or last bin (so 0.0 is in the first, 1.0 in the last).
    """
    return np.searchsorted(edges[1:-1], confidence, side="right")


def _bin_sums(
    confidence: np.ndarray, correct: np.ndarray, edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-bin item count, sum of confidences and number correct, each of shape (n_bins,)."""
    n_bins = len(edges) - 1
    index = _bin_index(confidence, edges)
    counts = np.bincount(index, minlength=n_bins)
    confidence_sums = np.bincount(index, weights=confidence, minlength=n_bins)
    correct_sums = np.bincount(index, weights=correct.astype(float), minlength=n_bins)
    return counts, confidence_sums, correct_sums


def reliability_bins(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    n_bins: int = 15,
    strategy: BinStrategy = "uniform",
) -> pd.DataFrame:
    """Group items by confidence and compare, per group, mean confidence with accuracy.

    Args:
        confidence: shape (n,), values in [0, 1].
        correct: shape (n,), booleans or 0/1.
        n_bins: number of bins (positive integer).
        strategy: "uniform" for equal-width bins on [0, 1] with edges `k / n_bins`;
            "quantile" for bins holding roughly equal numbers of items (edges are
            quantiles of `confidence`; tied values can leave some bins empty).

    Returns:
        One row per bin (always `n_bins` rows, empty bins kept) with columns
        `lower`, `upper` (bin edges), `count`, `mean_confidence`, `accuracy`
        (both NaN for an empty bin) and `gap = accuracy - mean_confidence`: positive
        means the system is under-confident there, negative over-confident.

    A value exactly on an inner edge belongs to the bin above it; 0.0 belongs to the
    first bin and 1.0 to the last.
    """
    conf, corr = check_confidence_correct(confidence, correct)
    check_positive_int(n_bins, "n_bins")
    edges = _bin_edges(conf, n_bins, strategy)
    counts, confidence_sums, correct_sums = _bin_sums(conf, corr, edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = confidence_sums / counts
        accuracy = correct_sums / counts
    return pd.DataFrame(
        {
            "lower": edges[:-1],
            "upper": edges[1:],
            "count": counts,
            "mean_confidence": mean_confidence,
            "accuracy": accuracy,
            "gap": accuracy - mean_confidence,
        }
    )


def ece(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    n_bins: int = 15,
    strategy: BinStrategy = "uniform",
) -> float:
    """Expected calibration error over `n_bins` bins, in [0, 1].

    ECE = sum over bins of (count / n) * |accuracy - mean confidence|, using exactly the
    bins of `reliability_bins` with the same `strategy` (equal-width by default,
    or "quantile" for bins of roughly equal counts); empty bins add nothing. 0 means that
    within every bin the average confidence equals the share correct.
    """
    conf, corr = check_confidence_correct(confidence, correct)
    check_positive_int(n_bins, "n_bins")
    counts, confidence_sums, correct_sums = _bin_sums(conf, corr, _bin_edges(conf, n_bins, strategy))
    # |sum correct - sum confidence| per bin equals count * |accuracy - mean confidence|.
    return float(np.abs(correct_sums - confidence_sums).sum() / conf.size)


def brier(confidence: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray) -> float:
    """Brier score: mean squared difference between confidence and outcome (0/1), in [0, 1].

    Lower is better. Unlike ECE it rewards discrimination as well as calibration.
    """
    conf, corr = check_confidence_correct(confidence, correct)
    return float(np.mean(_squared_errors(conf, corr)))


def _squared_errors(confidence: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Each item's Brier term, shape (n,): `(confidence - outcome)^2` with outcome 1 if right, 0 if wrong."""
    return (confidence - correct) ** 2


NLL_EPS = 1e-12
"""Default clipping of `nll`: a confidence of exactly 0 or 1 counts as `eps` or `1 - eps`."""


def nll(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    eps: float = NLL_EPS,
) -> float:
    """Mean binary negative log-likelihood (natural log, nats per item), >= 0.

    -mean(correct * log(c) + (1 - correct) * log(1 - c)), with `c` clipped to
    `[eps, 1 - eps]`: a confident mistake (confidence 1.0 on a wrong answer) would
    otherwise cost infinitely much. With the default `eps = 1e-12` one such item costs
    about 27.6 nats, large enough to dominate but still a finite number.
    """
    conf, corr = check_confidence_correct(confidence, correct)
    if not 0.0 < eps < 0.5:
        raise ValueError(f"eps must lie in (0, 0.5), got {eps!r}")
    return float(-np.mean(_log_likelihoods(conf, corr, eps)))


def _log_likelihoods(confidence: np.ndarray, correct: np.ndarray, eps: float) -> np.ndarray:
    """Log-probability each item's outcome gets, shape (n,): `log(c)` if right, `log(1 - c)` if wrong, `c` clipped."""
    clipped = np.clip(confidence, eps, 1.0 - eps)
    return np.where(correct, np.log(clipped), np.log1p(-clipped))


CALIBRATION_SCORES = ("ECE", "Brier", "NLL")
"""The scores `bootstrap_calibration` resamples: `ece` (with its `n_bins` uniform bins), `brier`, `nll`."""

_RESAMPLES_PER_CHUNK = 250
"""Resamples scored together: 250 rows of a few thousand items keep each array to a few MB."""


@dataclass(frozen=True)
class CalibrationReplicates:
    """ECE, Brier and NLL of several confidences on the original answers and on each bootstrap resample.

    Attributes:
        estimates: `{score: {name: value}}`, each score of each confidence on the original answers.
        replicates: `{score: {name: array of shape (n,)}}`, the score on each of the n resamples.

    Scores are those of `CALIBRATION_SCORES`; names are the keys given to `bootstrap_calibration`.
    `lib.intervals.percentile_interval(*replicates.score("ECE", name))` gives `(estimate, low, high)`.
    """

    estimates: dict[str, dict[str, float]]
    replicates: dict[str, dict[str, np.ndarray]]

    def score(self, score: str, name: str) -> tuple[float, np.ndarray]:
        """`(estimate, replicates)` of `score` for the confidence `name`, the replicates of shape (n,)."""
        self._check(score, name)
        return self.estimates[score][name], self.replicates[score][name]

    def difference(self, score: str, first: str, second: str) -> tuple[float, np.ndarray]:
        """`(estimate, replicates)` of `score(first) - score(second)`, both scored on each resample (paired)."""
        self._check(score, first, second)
        return (self.estimates[score][first] - self.estimates[score][second],
                self.replicates[score][first] - self.replicates[score][second])

    def _check(self, score: str, *names: str) -> None:
        if score not in self.estimates:
            raise KeyError(f"score must be one of {list(self.estimates)}, got {score!r}")
        for name in names:
            if name not in self.estimates[score]:
                raise KeyError(f"no confidence named {name!r}; bootstrap_calibration was given {list(self.estimates[score])}")


def bootstrap_calibration(
    confidences: Mapping[str, Sequence[float] | np.ndarray],
    correct: Sequence[bool] | np.ndarray,
    *,
    n_bins: int = 15,
    n: int = 2000,
    seed: int = 0,
) -> CalibrationReplicates:
    """ECE, Brier and NLL of several confidences for the same answers, on one set of bootstrap resamples.

    `lib.intervals.percentile_interval` turns them into the intervals of
    `lib.intervals.bootstrap_interval` with the same `n` and `seed`, to the last bit:
    `percentile_interval(*result.score("ECE", name))` is `bootstrap_interval(ece, confidence,
    correct, n=n, seed=seed)`, and `percentile_interval(*result.difference("NLL", "after",
    "before"))` is the paired interval of `nll(after, correct) - nll(before, correct)`. The
    resamples are those `bootstrap_interval` draws (they depend only on the number of answers,
    `n` and `seed`) and every confidence is scored on all of them, so differences between two
    confidences are paired. Each score is computed for a block of resamples at once: per-bin
    sums by one `np.bincount` over (resample, bin) pairs, adding in the order `ece` adds, and
    means along each resample's row.

    Args:
        confidences: `{name: confidence}`, each of shape (m,), values in [0, 1], for the same m answers.
        correct: shape (m,), booleans or 0/1, shared by every confidence.
        n_bins: number of uniform bins of the ECE (positive integer), as in `ece`.
        n: number of bootstrap resamples (>= 1).
        seed: seed of `numpy.random.default_rng`, as in `bootstrap_interval`.

    Returns:
        A `CalibrationReplicates`; NLL uses `nll`'s default clipping `NLL_EPS`.
    """
    if not confidences:
        raise ValueError("confidences is empty: pass {name: confidence array} for at least one confidence")
    check_positive_int(n_bins, "n_bins")
    check_positive_int(n, "n (number of resamples)")
    checked: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, confidence in confidences.items():
        try:
            checked[name] = check_confidence_correct(confidence, correct)
        except ValueError as error:
            raise ValueError(f"confidences[{name!r}]: {error}") from None
    corr = next(iter(checked.values()))[1]
    m = corr.size
    right = corr.astype(float)
    # Per-item terms of each score, gathered by the resampled rows: the same numbers, in the same order,
    # that `ece`, `brier` and `nll` compute on `confidence[rows]`.
    items: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, (conf, _) in checked.items():
        items[name] = (conf, _bin_index(conf, _bin_edges(conf, n_bins, "uniform")), _squared_errors(conf, corr),
                       _log_likelihoods(conf, corr, NLL_EPS))
    replicates = {score: {name: np.empty(n) for name in checked} for score in CALIBRATION_SCORES}
    rng = np.random.default_rng(seed)
    for start in range(0, n, _RESAMPLES_PER_CHUNK):
        block = slice(start, min(start + _RESAMPLES_PER_CHUNK, n))
        rows = rng.integers(0, m, size=(block.stop - block.start, m))
        offsets = n_bins * np.arange(rows.shape[0])[:, None]
        right_rows = right[rows].ravel()
        for name, (conf, bin_of_item, squared_error, log_likelihood) in items.items():
            cells = (bin_of_item[rows] + offsets).ravel()
            confidence_sums = np.bincount(cells, weights=conf[rows].ravel(), minlength=offsets.size * n_bins)
            correct_sums = np.bincount(cells, weights=right_rows, minlength=offsets.size * n_bins)
            gaps = np.abs(correct_sums - confidence_sums).reshape(-1, n_bins)
            replicates["ECE"][name][block] = gaps.sum(axis=1) / m
            replicates["Brier"][name][block] = np.mean(squared_error[rows], axis=1)
            replicates["NLL"][name][block] = -np.mean(log_likelihood[rows], axis=1)
    estimates = {
        "ECE": {name: ece(conf, corr, n_bins) for name, (conf, _) in checked.items()},
        "Brier": {name: brier(conf, corr) for name, (conf, _) in checked.items()},
        "NLL": {name: nll(conf, corr) for name, (conf, _) in checked.items()},
    }
    return CalibrationReplicates(estimates, replicates)


# ---------------------------------------------------------------------------
# Temperature scaling of option log-probabilities
# ---------------------------------------------------------------------------

OptionLogprobs = Sequence[Sequence[float] | np.ndarray] | np.ndarray


def _pad_logprobs(option_logprobs: OptionLogprobs, name: str = "option_logprobs") -> np.ndarray:
    """Stack per-question option scores into shape (n, max_k), padding short rows with -inf.

    -inf padding gets probability exactly 0 under any temperature, so ragged rows and a
    rectangular array share one code path.
    """
    if isinstance(option_logprobs, np.ndarray) and option_logprobs.ndim == 2:
        rows = list(option_logprobs.astype(float))
    elif isinstance(option_logprobs, np.ndarray) and option_logprobs.dtype != object:
        raise ValueError(
            f"{name} must be a 2-D array (n, k) or a list of 1-D arrays, "
            f"got an array of shape {option_logprobs.shape}"
        )
    else:
        rows = [np.asarray(row, dtype=float) for row in option_logprobs]
    if not rows:
        raise ValueError(f"{name} is empty: need at least one question")
    # Checked and filled for all rows at once (sweeps pad thousands of rows hundreds of times);
    # the first row with a problem is named, whichever the problem.
    misshapen = next((i for i, row in enumerate(rows) if row.ndim != 1 or row.size == 0), len(rows))
    sizes = np.array([row.size for row in rows[:misshapen]], dtype=np.intp)
    values = np.concatenate(rows[:misshapen]) if misshapen else np.zeros(0)
    not_finite = np.flatnonzero(~np.isfinite(values))
    first_not_finite = int(np.searchsorted(np.cumsum(sizes), not_finite[0], side="right")) if not_finite.size else None
    if first_not_finite is not None:
        raise ValueError(f"{name}[{first_not_finite}] contains NaN or inf; option log-probabilities must be finite")
    if misshapen < len(rows):
        raise ValueError(f"{name}[{misshapen}] must be a non-empty 1-D array of option scores, "
                         f"got shape {rows[misshapen].shape}")
    padded = np.full((len(rows), int(sizes.max())), -np.inf)
    padded[np.arange(padded.shape[1]) < sizes[:, None]] = values  # row by row, each row's options first
    return padded


def _check_labels(labels: object, padded: np.ndarray, name: str = "labels") -> np.ndarray:
    """Check `labels` is one valid option index per row of `padded`; return an int array."""
    array = np.asarray(labels)
    if array.ndim != 1 or array.size != padded.shape[0]:
        raise ValueError(
            f"{name} must have shape ({padded.shape[0]},), one index per row, got shape {array.shape}"
        )
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be integer option indices, got dtype {array.dtype}")
    n_options = np.isfinite(padded).sum(axis=1)
    out_of_range = (array < 0) | (array >= n_options)
    if out_of_range.any():
        i = int(np.argmax(out_of_range))
        raise ValueError(
            f"{name}[{i}] = {array[i]} is not an index of one of the {n_options[i]} options of row {i}"
        )
    return array.astype(int)


def _check_bounds(bounds: tuple[float, float]) -> tuple[float, float]:
    """Check the temperature search interval `(low, high)` with `0 < low < high`."""
    if len(bounds) != 2 or not 0.0 < bounds[0] < bounds[1] < np.inf:
        raise ValueError(f"bounds must be (low, high) temperatures with 0 < low < high, got {bounds!r}")
    return (float(bounds[0]), float(bounds[1]))


def _log_softmax(padded: np.ndarray, temperature: float) -> np.ndarray:
    scaled = padded / temperature
    return scaled - logsumexp(scaled, axis=1, keepdims=True)


def _unpad_like(probabilities: np.ndarray, option_logprobs: OptionLogprobs) -> np.ndarray | list[np.ndarray]:
    """Return a 2-D array if the input was a 2-D array, else a list of per-row 1-D arrays."""
    if isinstance(option_logprobs, np.ndarray) and option_logprobs.ndim == 2:
        return probabilities
    return [probabilities[i, : len(row)] for i, row in enumerate(option_logprobs)]


def softmax_at_temperature(option_logprobs: OptionLogprobs, temperature: float) -> np.ndarray:
    """Option probabilities `softmax(logprobs / temperature)` of every row, shape (n, max_k).

    Rows with fewer options than the widest are padded with probability 0, so
    `probabilities[np.arange(n), chosen]` reads the probability of each row's chosen option.
    What `TemperatureScaling` applies with its fitted temperature, open to any temperature > 0
    (a slider, a sweep, or 1.0 for the unscaled probabilities).
    """
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    return np.exp(_log_softmax(_pad_logprobs(option_logprobs), float(temperature)))


class TemperatureScaling:
    """Rescale option log-probabilities by one temperature `T` fitted on calibration data.

    `p = softmax(logprobs / T)`: `T > 1` softens an over-confident model, `T < 1`
    sharpens an under-confident one. Dividing by a positive number keeps the order of the
    options, so the chosen option (argmax) never changes; only the confidence does.

    `T` minimises the NLL of the correct options on the calibration rows, searched on
    `log T` over `bounds` with `scipy.optimize.minimize_scalar(method="bounded")`.

    Input rows are the scores of the offered options of one question (log-probabilities;
    unnormalised is fine since softmax normalises). Either a 2-D array, shape (n, k), or a list
    of 1-D arrays with different numbers of options.

    Attributes (after fit):
        temperature_: fitted `T` (float > 0).
        fitted_on_: number of calibration rows.
    """

    def __init__(self, bounds: tuple[float, float] = (0.01, 100.0)) -> None:
        self.bounds = _check_bounds(bounds)

    def fit(self, option_logprobs: OptionLogprobs, labels: Sequence[int] | np.ndarray) -> "TemperatureScaling":
        """Fit `T` on calibration rows; `labels[i]` is the index of the correct option of row i."""
        padded = _pad_logprobs(option_logprobs)
        label_index = _check_labels(labels, padded)
        rows = np.arange(padded.shape[0])

        def mean_nll(log_temperature: float) -> float:
            return float(-_log_softmax(padded, np.exp(log_temperature))[rows, label_index].mean())

        result = minimize_scalar(mean_nll, bounds=np.log(self.bounds), method="bounded")
        self.temperature_ = float(np.exp(result.x))
        self.fitted_on_ = padded.shape[0]
        return self

    def predict_proba(self, option_logprobs: OptionLogprobs) -> np.ndarray | list[np.ndarray]:
        """Calibrated option probabilities, each row summing to 1.

        Returns an array of shape (n, k) for a 2-D array input, otherwise a list of 1-D
        arrays matching the input rows' lengths.
        """
        require_fitted(self, "temperature_", "predict_proba")
        return _unpad_like(softmax_at_temperature(option_logprobs, self.temperature_), option_logprobs)

    def predict_confidence(self, option_logprobs: OptionLogprobs) -> np.ndarray:
        """Probability of the top option of each row, shape (n,), values in (0, 1]."""
        require_fitted(self, "temperature_", "predict_confidence")
        return softmax_at_temperature(option_logprobs, self.temperature_).max(axis=1)


# ---------------------------------------------------------------------------
# Confidence -> calibrated confidence
# ---------------------------------------------------------------------------


class _ConfidenceCalibrator(ABC):
    """Shared fit/predict plumbing: validate input, check fitted, delegate to _fit/_predict."""

    def fit(
        self, confidence: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray
    ) -> "_ConfidenceCalibrator":
        """Learn the map from raw confidence to accuracy on calibration data; return self."""
        conf, corr = check_confidence_correct(confidence, correct)
        self._fit(conf, corr)
        self.fitted_on_ = conf.size
        return self

    def predict(self, confidence: Sequence[float] | np.ndarray) -> np.ndarray:
        """Calibrated confidence, shape (n,), values in [0, 1]."""
        require_fitted(self, "fitted_on_", "predict")
        return np.clip(self._predict(check_confidence(confidence)), 0.0, 1.0)

    @abstractmethod
    def _fit(self, confidence: np.ndarray, correct: np.ndarray) -> None:
        """Learn the calibration map from validated arrays."""

    @abstractmethod
    def _predict(self, confidence: np.ndarray) -> np.ndarray:
        """Apply the learned map to validated confidences."""


class IsotonicCalibrator(_ConfidenceCalibrator):
    """Monotone (non-decreasing) step map from confidence to accuracy.

    Wraps `sklearn.isotonic.IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")`:
    confidences outside the calibration range get the value at the nearest end. Flexible
    (no shape assumed) but needs a few hundred calibration items to avoid over-fitting.

    Attributes (after fit): `isotonic_` (the fitted regression), `fitted_on_`.
    """

    def _fit(self, confidence: np.ndarray, correct: np.ndarray) -> None:
        self.isotonic_ = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
        self.isotonic_.fit(confidence, correct.astype(float))

    def _predict(self, confidence: np.ndarray) -> np.ndarray:
        return self.isotonic_.predict(confidence)


class HistogramBinningCalibrator(_ConfidenceCalibrator):
    """Replace each confidence by the calibration accuracy of its equal-width bin.

    Bins are those of `reliability_bins` (edges `k / n_bins`, an edge value goes
    to the bin above). A bin with no calibration items keeps its midpoint as value: with
    no evidence there we leave that confidence range roughly where the model put it,
    rather than mapping it to the global accuracy, which could turn a 0.05 into a 0.9.

    Attributes (after fit): `bin_edges_` shape (n_bins + 1,), `bin_counts_` and
    `bin_values_` shape (n_bins,), `fitted_on_`.
    """

    def __init__(self, n_bins: int = 15) -> None:
        check_positive_int(n_bins, "n_bins")
        self.n_bins = n_bins

    def _fit(self, confidence: np.ndarray, correct: np.ndarray) -> None:
        edges = _bin_edges(confidence, self.n_bins, "uniform")
        counts, _, correct_sums = _bin_sums(confidence, correct, edges)
        midpoints = (edges[:-1] + edges[1:]) / 2.0
        self.bin_edges_ = edges
        self.bin_counts_ = counts
        self.bin_values_ = np.where(counts > 0, correct_sums / np.maximum(counts, 1), midpoints)

    def _predict(self, confidence: np.ndarray) -> np.ndarray:
        return self.bin_values_[_bin_index(confidence, self.bin_edges_)]


class PlattCalibrator(_ConfidenceCalibrator):
    """Logistic regression on `logit(confidence)`: calibrated = sigmoid(a * logit(c) + b).

    Two parameters, so it needs little data but can only stretch/shift the confidence
    curve. Confidence is clipped to `[eps, 1 - eps]` (eps = 1e-6) before the logit so
    that 0 and 1 stay finite. The regression is practically unregularised (C = 1e6).
    Calibration data must contain both right and wrong answers.

    Attributes (after fit): `slope_` (a), `intercept_` (b), `fitted_on_`.
    """

    _eps = 1e-6

    def _logit(self, confidence: np.ndarray) -> np.ndarray:
        clipped = np.clip(confidence, self._eps, 1.0 - self._eps)
        return np.log(clipped) - np.log1p(-clipped)

    def _fit(self, confidence: np.ndarray, correct: np.ndarray) -> None:
        if correct.all() or not correct.any():
            raise ValueError("correct must contain both right (1) and wrong (0) answers to fit a Platt calibrator")
        model = LogisticRegression(C=1e6).fit(self._logit(confidence)[:, None], correct)
        self.slope_ = float(model.coef_[0, 0])
        self.intercept_ = float(model.intercept_[0])

    def _predict(self, confidence: np.ndarray) -> np.ndarray:
        return expit(self.slope_ * self._logit(confidence) + self.intercept_)
