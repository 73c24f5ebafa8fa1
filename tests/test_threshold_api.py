"""One contract for every threshold estimator (the threshold API of `lib.selective`).

Each estimator is run through the same checks: the constructor only stores its parameters and
`fit` checks them; using it before `fit` raises `NotFittedError`; `fit` returns `self` and sets
`reached_` and `fitted_on_`; what it accepts has shape (n,) and reaches the target on the
fitting data; an unreachable target gives `reached_ = False` and accepts nothing, without a
warning; a fixed threshold given as a parameter is used as is, and `reached_` then says whether
it reaches the target. All share one base, `lib.selective.ThresholdEstimator`, whose `fitter`
chooses the threshold (by default `fit_threshold`; `lib.guarantees.fit_guaranteed_threshold` for a
promise that holds on new data); RetrievalGate's pair search is its own rule.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from lib.assistant import SupportModel
from lib.retrieval import RetrievalGate
from lib.actions import Action
from lib.routing import ThresholdRouter
from lib.guarantees import fit_guaranteed_threshold
from lib.selective import Gate, target_reached
from lib.selective import ThresholdEstimator as EstimatorBase


@dataclass(frozen=True)
class ThresholdEstimator:
    """How the contract drives one estimator: build it, shape its input, read what it accepts."""

    make: Callable[..., Any]
    fixed: dict[str, float]                  # constructor parameters that fix the threshold at FIXED
    inputs: Callable[[np.ndarray], Any]      # scores, shape (n,) -> what fit and predict take
    accepts: Callable[[Any, Any], np.ndarray]
    score: Callable[[Any, Any], np.ndarray]  # the number the threshold is compared with
    threshold: Callable[[Any], float]


FIXED = 0.6


def _features(scores: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"top_score": scores, "margin": np.ones_like(scores)})


ESTIMATORS = {
    "Gate": ThresholdEstimator(
        Gate, {"threshold": FIXED}, lambda s: s, lambda e, x: e.predict(x), lambda e, x: x, lambda e: e.threshold_),
    "RetrievalGate": ThresholdEstimator(
        RetrievalGate, {"score_threshold": FIXED, "margin_threshold": -math.inf}, _features,
        lambda e, x: e.predict(x), lambda e, x: x["top_score"].to_numpy(), lambda e: e.score_threshold_),
    "ThresholdRouter": ThresholdEstimator(
        lambda **p: ThresholdRouter(min_act_count=1, **p), {"act_threshold": FIXED}, lambda s: s,
        lambda e, x: e.predict(x) == Action.ACT, lambda e, x: x, lambda e: e.act_threshold_),
    "SupportModel": ThresholdEstimator(
        SupportModel, {"threshold": FIXED}, lambda s: (s, s, s), lambda e, x: e.accepts(*x),
        lambda e, x: e.probability(*x), lambda e: e.threshold_),
}
CASES = pytest.mark.parametrize("case", ESTIMATORS, ids=list(ESTIMATORS))


def fit(estimator: Any, inputs: Any, correct: np.ndarray) -> Any:
    return estimator.fit(*inputs, correct) if isinstance(inputs, tuple) else estimator.fit(inputs, correct)


def data() -> tuple[np.ndarray, np.ndarray]:
    """40 scores in [0, 1]; right above 0.5 except two, so a target of 0.9 is reachable and 1.0 only higher up."""
    scores = np.linspace(0.0, 1.0, 40)
    correct = scores > 0.5
    correct[[22, 25]] = False
    return scores, correct


@CASES
def test_the_constructor_stores_and_fit_checks(case):
    spec = ESTIMATORS[case]
    estimator = spec.make(target_precision=1.5)  # no error yet: parameters are checked in fit
    assert estimator.target_precision == 1.5
    scores, correct = data()
    with pytest.raises(ValueError, match="target_precision"):
        fit(estimator, spec.inputs(scores), correct)


@CASES
def test_not_fitted_raises(case):
    spec = ESTIMATORS[case]
    with pytest.raises(NotFittedError):
        spec.accepts(spec.make(), spec.inputs(data()[0]))


@CASES
def test_fit_returns_self_and_the_accepted_rows_reach_the_target(case):
    spec = ESTIMATORS[case]
    scores, correct = data()
    inputs = spec.inputs(scores)
    estimator = spec.make(target_precision=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fit(estimator, inputs, correct) is estimator
    accepted = spec.accepts(estimator, inputs)
    assert accepted.shape == (40,) and accepted.dtype == bool
    assert estimator.reached_ is True and estimator.fitted_on_ == 40
    assert accepted.any() and correct[accepted].mean() >= 0.9
    np.testing.assert_array_equal(accepted, spec.score(estimator, inputs) >= spec.threshold(estimator))


@CASES
def test_an_unreachable_target_accepts_nothing_without_a_warning(case):
    spec = ESTIMATORS[case]
    scores, correct = data()
    correct[-1] = False  # the top score is wrong: no threshold is right every time
    inputs = spec.inputs(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        estimator = fit(spec.make(target_precision=1.0), inputs, correct)
    assert estimator.reached_ is False and spec.threshold(estimator) == math.inf
    assert not spec.accepts(estimator, inputs).any()


@CASES
@pytest.mark.parametrize("target", [0.9, 1.0])
def test_a_fixed_threshold_is_used_as_given_and_measured(case, target):
    spec = ESTIMATORS[case]
    scores, correct = data()
    inputs = spec.inputs(scores)
    estimator = fit(spec.make(target_precision=target, **spec.fixed), inputs, correct)
    assert spec.threshold(estimator) == FIXED
    accepted = spec.accepts(estimator, inputs)
    np.testing.assert_array_equal(accepted, spec.score(estimator, inputs) >= FIXED)
    assert estimator.reached_ is target_reached(accepted, correct, target)


FITTED_BY_A_FITTER = [case for case in ESTIMATORS if case != "RetrievalGate"]


@CASES
def test_every_estimator_shares_the_one_base(case):
    assert isinstance(ESTIMATORS[case].make(), EstimatorBase)


@pytest.mark.parametrize("case", FITTED_BY_A_FITTER)
def test_a_guaranteed_fitter_sets_the_threshold_it_promises(case):
    """With `fitter=fit_guaranteed_threshold` the threshold is the guaranteed one on the estimator's
    own score, higher than the point estimate's (40 rows promise less than they show)."""
    spec = ESTIMATORS[case]
    scores, correct = data()
    inputs = spec.inputs(scores)
    point = fit(spec.make(target_precision=0.6), inputs, correct)
    guaranteed = fit(spec.make(target_precision=0.6, fitter=fit_guaranteed_threshold), inputs, correct)
    expected = fit_guaranteed_threshold(spec.score(guaranteed, inputs), correct, 0.6)
    assert math.isfinite(expected) and spec.threshold(guaranteed) == expected
    assert spec.threshold(guaranteed) > spec.threshold(point)
    assert guaranteed.reached_ is True


@pytest.mark.parametrize("case", FITTED_BY_A_FITTER)
def test_a_fitter_that_is_not_a_function_is_refused_in_fit(case):
    spec = ESTIMATORS[case]
    estimator = spec.make(fitter=0.9)  # stored as given
    scores, correct = data()
    with pytest.raises(TypeError, match="fitter must be a function"):
        fit(estimator, spec.inputs(scores), correct)
