"""Tests for lib.checks: the shared input checks and the not-fitted convention."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from lib.checks import (check_binary, check_confidence, check_confidence_correct, check_positive_int, check_scores,
                        check_unit_interval, require_fitted)


def test_check_confidence_returns_a_float_array():
    values = check_confidence([0, 0.5, 1])
    assert values.dtype == float and values.tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize(
    "confidence, message",
    [
        ([[0.5]], r"confidence must be a 1-D array of shape \(n,\)"),
        ([], "confidence is empty"),
        ([0.5, np.nan], "contains NaN or inf at index 1"),
        ([0.5, np.inf], "contains NaN or inf at index 1"),
        ([0.2, 1.5], r"must lie in \[0, 1\], but confidence\[1\] = 1.5"),
        (["high"], "could not convert"),
    ],
)
def test_check_confidence_refuses_bad_input(confidence, message):
    with pytest.raises(ValueError, match=message):
        check_confidence(confidence)


def test_check_confidence_names_the_argument():
    with pytest.raises(ValueError, match=r"p_yes\[0\] = -0.1"):
        check_confidence([-0.1], "p_yes")


def test_check_binary_accepts_booleans_and_zero_one():
    assert check_binary([True, False]).tolist() == [True, False]
    assert check_binary([1, 0, 1.0]).tolist() == [True, False, True]


@pytest.mark.parametrize(
    "values, message",
    [
        ([[1]], "1-D array"),
        ([], "is empty"),
        (["yes"], "booleans or 0/1, got dtype"),
        ([0, 2], r"only booleans or 0/1, but in_options\[1\] = 2"),
    ],
)
def test_check_binary_refuses_bad_input(values, message):
    with pytest.raises(ValueError, match=message):
        check_binary(values, "in_options")


def test_check_confidence_correct_needs_equal_lengths():
    conf, corr = check_confidence_correct([0.2, 0.9], [0, 1])
    assert conf.tolist() == [0.2, 0.9] and corr.tolist() == [False, True]
    with pytest.raises(ValueError, match="same length, got 2 and 1"):
        check_confidence_correct([0.2, 0.9], [1])
    with pytest.raises(ValueError, match="correct"):
        check_confidence_correct([0.2], [3])


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_check_positive_int_refuses(value):
    with pytest.raises(ValueError, match="n_bins must be a positive integer"):
        check_positive_int(value, "n_bins")


def test_check_positive_int_accepts_numpy_integers():
    check_positive_int(np.int64(3), "n_bins")


def test_require_fitted_raises_sklearns_error_until_the_attribute_exists():
    class Thing:
        def fit(self) -> "Thing":
            self.value_ = 1.0
            return self

    thing = Thing()
    with pytest.raises(NotFittedError, match=r"Thing is not fitted yet: call Thing.fit\(...\).*before predict"):
        require_fitted(thing, "value_", "predict")
    require_fitted(thing.fit(), "value_", "predict")
    assert issubclass(NotFittedError, ValueError)


def test_check_scores_takes_any_real_numbers():
    values = check_scores([-0.3, 0.0, 2.5], "similarity")
    assert values.dtype == float and values.tolist() == [-0.3, 0.0, 2.5]


@pytest.mark.parametrize("values, message", [
    ([], "similarity is empty"),
    ([[0.1, 0.2]], "1-D"),
    (["high"], "must be numbers"),
    ([0.1, float("nan")], "NaN at index 1"),
])
def test_check_scores_refuses_bad_input_naming_the_argument(values, message):
    with pytest.raises(ValueError, match=message):
        check_scores(values, "similarity")


def test_check_scores_lets_nan_through_when_asked():
    assert np.isnan(check_scores([0.5, float("nan")], allow_nan=True)[1])


@pytest.mark.parametrize(("value", "rule", "allowed"), [
    (0.0, {}, True), (1.0, {}, True), (0.5, {}, True), (-0.1, {}, False), (1.1, {}, False),
    (0.0, {"include_zero": False}, False), (1.0, {"include_zero": False}, True),
    (1.0, {"include_zero": False, "include_one": False}, False), (0.95, {"include_zero": False, "include_one": False}, True),
    (float("nan"), {}, False), (True, {}, False), ("0.5", {}, False), (np.float64(0.3), {}, True),
])
def test_check_unit_interval_follows_its_two_rules(value, rule, allowed):
    if allowed:
        assert check_unit_interval(value, "level", **rule) == float(value)
    else:
        with pytest.raises(ValueError, match=r"level must lie in [\[(]0, 1[\])], got"):
            check_unit_interval(value, "level", **rule)
