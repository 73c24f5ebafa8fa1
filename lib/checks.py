"""Input checks shared by the confidence modules, so that every public function refuses bad input alike.

`lib.calibration`, `lib.selective`, `lib.routing` and `lib.plots` take the same two arrays:

* `confidence`: 1-D float array, shape (n,), values in [0, 1], no NaN or inf.
* `correct`: 1-D array, shape (n,), of booleans or of 0/1 numbers: was the answer the
  system would give right?

Scores that are not probabilities (cosine similarities, logistic-regression scores, 1 /
perplexity) pass `check_scores` instead: any real numbers.

The checks here turn those arguments into numpy arrays or raise a `ValueError` that names
the faulty argument. `require_fitted` is the one not-fitted convention of the workbook, in
the scikit-learn style: `fit` sets attributes whose names end in `_`, and using an object
before `fit` raises `sklearn.exceptions.NotFittedError`.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "check_confidence",
    "check_binary",
    "check_scores",
    "check_confidence_correct",
    "check_positive_int",
    "check_unit_interval",
    "require_fitted",
]


def check_confidence(confidence: object, name: str = "confidence") -> np.ndarray:
    """Return `confidence` as a 1-D float array after checking it is a usable confidence.

    Raises ValueError naming `name` when the array is not 1-D, is empty, holds NaN/inf,
    or holds values outside [0, 1].
    """
    values = check_scores(confidence, name, allow_nan=True)
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(
            f"{name} contains NaN or inf at index {int(np.argmax(bad))}; "
            "a confidence must be a finite probability"
        )
    outside = (values < 0.0) | (values > 1.0)
    if outside.any():
        i = int(np.argmax(outside))
        raise ValueError(f"{name} must lie in [0, 1], but {name}[{i}] = {values[i].item()!r}")
    return values


def check_binary(values: object, name: str = "correct") -> np.ndarray:
    """Return `values` as a 1-D boolean array, checking it holds only True/False or 0/1.

    Raises ValueError naming `name` when the array is not 1-D, is empty, or holds anything
    other than booleans or the numbers 0 and 1.
    """
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of shape (n,), got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} is empty: need at least one item")
    if array.dtype == bool:
        return array
    if not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"{name} must hold booleans or 0/1, got dtype {array.dtype}")
    not_binary = ~np.isin(array, (0, 1))
    if not_binary.any():
        i = int(np.argmax(not_binary))
        raise ValueError(f"{name} must hold only booleans or 0/1, but {name}[{i}] = {array[i].item()!r}")
    return array.astype(bool)


def check_scores(values: object, name: str = "scores", *, allow_nan: bool = False) -> np.ndarray:
    """Return `values` as a 1-D float array, shape (n,), n >= 1: any real numbers, higher = more confident.

    Raises ValueError naming `name` when the values cannot be converted to numbers, are not
    1-D, are empty, or hold NaN (unless `allow_nan`: some callers treat NaN as "never accepted").
    """
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numbers; could not convert: {error}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of shape (n,), got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} is empty: need at least one item")
    if not allow_nan and np.isnan(array).any():
        raise ValueError(f"{name} holds NaN at index {int(np.argmax(np.isnan(array)))}; every item needs a score")
    return array


def check_confidence_correct(confidence: object, correct: object) -> tuple[np.ndarray, np.ndarray]:
    """Validate a (confidence, correct) pair; return `(float array, bool array)`, each shape (n,).

    Raises ValueError naming the faulty argument: empty arrays, mismatched lengths, NaN/inf
    confidence, confidence outside [0, 1], or non-binary `correct`.
    """
    conf = check_confidence(confidence, "confidence")
    corr = check_binary(correct, "correct")
    if conf.shape != corr.shape:
        raise ValueError(
            f"confidence and correct must have the same length, got {conf.size} and {corr.size}"
        )
    return conf, corr


def check_positive_int(value: int, name: str) -> None:
    """Raise ValueError naming `name` unless `value` is an integer >= 1 (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_unit_interval(value: float, name: str, *, include_zero: bool = True, include_one: bool = True) -> float:
    """Return `value` as a float after checking it lies in [0, 1] (bools, NaN and non-numbers refused).

    The two rules the workbook's parameters follow: a target precision or a share may be 0 or 1
    (`[0, 1]`, the default); a level or a recall must be above 0 (`include_zero=False`: `(0, 1]`),
    and a coverage level also below 1 (`include_one=False` too: `(0, 1)`).
    """
    low, high = "[" if include_zero else "(", "]" if include_one else ")"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not (
            (0.0 <= value if include_zero else 0.0 < value) and (value <= 1.0 if include_one else value < 1.0)):
        raise ValueError(f"{name} must lie in {low}0, 1{high}, got {value!r}")
    return float(value)


def require_fitted(estimator: object, attribute: str, method: str) -> None:
    """Raise sklearn's `NotFittedError` (a ValueError) if `estimator.fit` has not set `attribute` yet.

    Args:
        estimator: the object about to be used.
        attribute: a fitted attribute (name ending in `_`) that `fit` always sets.
        method: what was called, for the message (e.g. "predict").
    """
    if not hasattr(estimator, attribute):
        # Imported here, not at the top: importing scikit-learn takes about a second, and most
        # processes that import lib.checks never raise this error.
        from sklearn.exceptions import NotFittedError

        name = type(estimator).__name__
        raise NotFittedError(
            f"{name} is not fitted yet: call {name}.fit(...) on held-out data (calibration or dev) "
            f"before {method}(...)"
        )
