"""Tests for lib.routing: threshold and cost routers, conformal sets, and that test data never leak."""
from __future__ import annotations

import copy
import inspect
import itertools
import math

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.exceptions import NotFittedError

from lib.calibration import HistogramBinningCalibrator, IsotonicCalibrator, PlattCalibrator
from lib.actions import Action
from lib.routing import (ConformalClassifier, cost_thresholds, CostThresholds, coverage, mean_set_size, outcomes,
                         route_by_thresholds, set_router, ThresholdRouter)

ACT, ASK, HAND_OVER = Action.ACT, Action.ASK, Action.HAND_OVER


def _blocks() -> tuple[np.ndarray, np.ndarray]:
    """Four blocks of 30 items: confidence 0.99 / 0.9 / 0.6 / 0.2 with 30 / 27 / 18 / 3 right."""
    confidence = np.repeat([0.99, 0.9, 0.6, 0.2], 30)
    correct = np.concatenate([np.arange(30) < k for k in (30, 27, 18, 3)])
    return confidence, correct


def _synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Calibrated-ish synthetic system: right with probability equal to its confidence."""
    rng = np.random.default_rng(seed)
    confidence = rng.beta(5, 1.5, n)
    return confidence, rng.uniform(size=n) < confidence


def _probabilities(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Class probabilities and labels drawn from them (so the model is calibrated)."""
    rng = np.random.default_rng(seed)
    probabilities = softmax(rng.normal(scale=2.0, size=(n, k)), axis=1)
    labels = (rng.uniform(size=(n, 1)) > probabilities.cumsum(axis=1)).sum(axis=1)
    return probabilities, np.minimum(labels, k - 1)


# --- Action and route_by_thresholds ----------------------------------------------


def test_decision_is_a_string_enum():
    assert Action.ACT == "act" and Action("hand_over") is HAND_OVER
    assert f"{Action.ASK}" == "ask"


def test_route_by_thresholds_boundaries():
    decisions = route_by_thresholds([0.9, 0.8, 0.5, 0.4, 0.0, 1.0], act_threshold=0.8, hand_over_threshold=0.5)
    assert decisions.tolist() == [ACT, ACT, ASK, HAND_OVER, HAND_OVER, ACT]
    assert all(type(d) is Action for d in decisions)
    assert route_by_thresholds([1.0, 0.3], math.inf, 0.2).tolist() == [ASK, ASK]
    assert route_by_thresholds([1.0, 0.3], math.inf, math.inf).tolist() == [HAND_OVER, HAND_OVER]
    with pytest.raises(ValueError, match="hand_over_threshold must be <= act_threshold"):
        route_by_thresholds([0.5], act_threshold=0.3, hand_over_threshold=0.6)


# --- ThresholdRouter -----------------------------------------------------------------


def test_threshold_router_rules_on_hand_built_data():
    confidence, correct = _blocks()
    # ACT: 0.99 block is 30/30; adding 0.9 gives 57/60 = 0.95 < 0.97.
    # ASK band accuracy going down: 0.9 -> 27/30, 0.6 -> 45/60 = 0.75, 0.2 -> 48/90 = 0.533.
    router = ThresholdRouter(target_precision=0.97, min_ask_accuracy=0.5).fit(confidence, correct)
    assert router.reached_ and router.act_threshold_ == 0.99 and router.hand_over_threshold_ == 0.2
    assert router.act_coverage_ == 0.25 and router.act_accuracy_ == 1.0
    assert router.fitted_on_ == 120
    stricter = ThresholdRouter(target_precision=0.95, min_ask_accuracy=0.6).fit(confidence, correct)
    assert stricter.act_threshold_ == 0.9 and stricter.hand_over_threshold_ == 0.6
    assert stricter.ask_accuracy_ == 0.6 and stricter.ask_coverage_ == 0.25
    assert stricter.predict([0.95, 0.9, 0.7, 0.6, 0.59]).tolist() == [ACT, ACT, ASK, ASK, HAND_OVER]


def test_threshold_router_min_act_count_ignores_a_few_lucky_items():
    confidence = np.concatenate([np.full(5, 0.99), np.full(100, 0.8)])
    correct = np.concatenate([np.ones(5), np.arange(100) < 80])
    assert ThresholdRouter(0.97, min_act_count=5).fit(confidence, correct).act_threshold_ == 0.99
    cautious = ThresholdRouter(0.97, min_act_count=20).fit(confidence, correct)
    assert not cautious.reached_ and cautious.act_threshold_ == math.inf


def test_threshold_router_unreachable_target_acts_on_nothing():
    confidence, correct = _blocks()
    router = ThresholdRouter(target_precision=1.0, min_act_count=31).fit(confidence, correct)
    assert router.reached_ is False and router.act_threshold_ == math.inf
    assert math.isnan(router.act_accuracy_) and router.act_coverage_ == 0.0
    assert ACT not in router.predict(confidence).tolist()
    assert router.hand_over_threshold_ == 0.2  # the whole data set is the ASK band: 78/120 >= 0.5


def test_threshold_router_no_ask_band_when_floor_is_missed_right_away():
    confidence, correct = _blocks()
    router = ThresholdRouter(target_precision=0.97, min_ask_accuracy=0.95).fit(confidence, correct)
    assert router.hand_over_threshold_ == router.act_threshold_ == 0.99
    assert router.predict([0.99, 0.98]).tolist() == [ACT, HAND_OVER]


def test_threshold_router_checks_arguments_and_fitting():
    with pytest.raises(ValueError, match="target_precision"):
        ThresholdRouter(target_precision=1.5).fit([0.5, 0.6], [1, 0])
    with pytest.raises(ValueError, match="min_act_count"):
        ThresholdRouter(min_act_count=0).fit([0.5, 0.6], [1, 0])
    with pytest.raises(NotFittedError, match="ThresholdRouter is not fitted yet"):
        ThresholdRouter().predict([0.5])
    with pytest.raises(ValueError, match="same length"):
        ThresholdRouter().fit([0.5, 0.6], [1])
    with pytest.raises(ValueError, match="NaN"):
        ThresholdRouter().fit([0.5, np.nan], [1, 0])


def test_threshold_router_holds_its_target_on_held_out_data():
    calib = _synthetic(4000, seed=1)
    test_confidence, test_correct = _synthetic(20000, seed=2)
    router = ThresholdRouter(target_precision=0.95).fit(*calib)
    summary = outcomes(router.predict(test_confidence), test_correct)
    assert summary["act_accuracy"] == pytest.approx(0.95, abs=0.015)
    assert summary["share_act"] == pytest.approx(router.act_coverage_, abs=0.03)


# --- no leakage from test data --------------------------------------------------------


def _fitted_state(estimator) -> dict:
    return copy.deepcopy(vars(estimator))


def _assert_same_state(a: object, b: object) -> None:
    """Equal plain values and arrays; nested fitted objects (e.g. sklearn's) compared by attributes."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same_state(a[key], b[key])
    elif hasattr(a, "__dict__") and not inspect.isroutine(a):
        assert type(a) is type(b)
        _assert_same_state(vars(a), vars(b))
    else:
        np.testing.assert_equal(a, b)


FITTERS = {
    "threshold_router": (lambda: ThresholdRouter(0.95), "predict", "confidence"),
    "isotonic": (IsotonicCalibrator, "predict", "confidence"),
    "histogram": (HistogramBinningCalibrator, "predict", "confidence"),
    "platt": (PlattCalibrator, "predict", "confidence"),
    "conformal": (lambda: ConformalClassifier(0.1, "aps"), "predict_sets", "probabilities"),
}


def _data(kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if kind == "confidence":
        return _synthetic(600, seed)
    return _probabilities(600, 8, seed)


@pytest.mark.parametrize("name", FITTERS)
def test_fitted_state_comes_only_from_the_calibration_arrays(name):
    """Thresholds must not move when test data are seen, nor remember an earlier fit.

    A router fitted on calibration data, then used on two different test sets, and one
    first fitted on *test* data and then refitted on the calibration data must all end
    in exactly the state of a fresh fit on the calibration data.
    """
    make, method, kind = FITTERS[name]
    calib, test_a, test_b = _data(kind, 10), _data(kind, 11), _data(kind, 12)
    reference = _fitted_state(make().fit(*calib))

    used = make().fit(*calib)
    getattr(used, method)(test_a[0])
    getattr(used, method)(test_b[0])
    _assert_same_state(_fitted_state(used), reference)

    refitted = make().fit(*test_a).fit(*calib)
    _assert_same_state(_fitted_state(refitted), reference)
    assert refitted.fitted_on_ == len(calib[0])


@pytest.mark.parametrize("name", FITTERS)
def test_predictions_are_row_by_row(name):
    """predict must not use the test batch as a whole (e.g. re-fit thresholds on its quantiles):
    each row's output is the same alone as inside the batch."""
    make, method, kind = FITTERS[name]
    fitted = make().fit(*_data(kind, 20))
    batch = _data(kind, 21)[0][:50]
    together = getattr(fitted, method)(batch)
    alone = [getattr(fitted, method)(batch[i : i + 1])[0] for i in range(len(batch))]
    for row_together, row_alone in zip(together, alone):
        np.testing.assert_array_equal(row_together, row_alone)


def test_fit_does_not_modify_its_inputs():
    confidence, correct = _synthetic(300, seed=3)
    before = confidence.copy(), correct.copy()
    ThresholdRouter(0.9).fit(confidence, correct)
    cost_thresholds(confidence, correct, {"act_wrong": 5, "ask": 1, "hand_over": 2})
    np.testing.assert_array_equal(confidence, before[0])
    np.testing.assert_array_equal(correct, before[1])


# --- outcomes -------------------------------------------------------------------------


def test_outcomes_hand_computed():
    decisions = [ACT, ACT, "ask", "ask", "ask", HAND_OVER]
    summary = outcomes(decisions, [1, 0, 1, 0, 0, 1], in_options=[1, 1, 1, 0, 1, 0])
    assert summary == {
        "n": 6,
        "share_act": pytest.approx(2 / 6),
        "act_accuracy": 0.5,
        "share_ask": 0.5,
        "ask_in_options": pytest.approx(2 / 3),
        "share_hand_over": pytest.approx(1 / 6),
    }


def test_outcomes_empty_groups_and_bad_input():
    summary = outcomes([HAND_OVER, HAND_OVER], [1, 0])
    assert math.isnan(summary["act_accuracy"]) and math.isnan(summary["ask_in_options"])
    assert summary["share_hand_over"] == 1.0
    with pytest.raises(ValueError, match="same length"):
        outcomes([ACT], [1, 0])
    with pytest.raises(ValueError, match="decisions must hold"):
        outcomes(["maybe"], [1])
    with pytest.raises(ValueError, match="in_options"):
        outcomes([ACT, ASK], [1, 0], in_options=[1])


# --- cost thresholds -------------------------------------------------------------------

COSTS = {"act_wrong": 10.0, "ask": 1.0, "hand_over": 3.0}


def _mean_cost(confidence, correct, act_threshold, hand_over_threshold, costs) -> float:
    """Reference implementation of the documented cost model, item by item."""
    full = {"act_right": 0.0, "ask_wrong": costs["ask"] + costs["hand_over"], **costs}
    total = 0.0
    for decision, right in zip(route_by_thresholds(confidence, act_threshold, hand_over_threshold), correct):
        if decision == ACT:
            total += full["act_right"] if right else full["act_wrong"]
        elif decision == ASK:
            total += full["ask"] if right else full["ask_wrong"]
        else:
            total += full["hand_over"]
    return total / len(correct)


@pytest.mark.parametrize("seed", range(3))
def test_cost_thresholds_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    confidence = rng.integers(0, 15, 40) / 14  # ties
    correct = rng.uniform(size=40) < confidence
    result = cost_thresholds(confidence, correct, COSTS)
    assert isinstance(result, CostThresholds) and result.fitted_on == 40
    candidates = [*np.unique(confidence), math.inf]
    brute = min(
        _mean_cost(confidence, correct, a, h, COSTS) for h, a in itertools.combinations_with_replacement(candidates, 2)
    )
    assert result.expected_cost == pytest.approx(brute)
    assert _mean_cost(confidence, correct, result.act_threshold, result.hand_over_threshold, COSTS) == pytest.approx(
        brute
    )


def test_cost_thresholds_extremes():
    confidence, correct = _synthetic(200, seed=4)
    free_mistakes = cost_thresholds(confidence, correct, {"act_wrong": 0, "ask": 1, "hand_over": 1})
    assert free_mistakes.act_threshold == confidence.min() and free_mistakes.expected_cost == 0.0
    free_hand_over = cost_thresholds(confidence, correct, {"act_wrong": 1, "ask": 1, "hand_over": 0})
    assert free_hand_over.act_threshold == free_hand_over.hand_over_threshold == math.inf


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"act_wrong": 1, "ask": 1}, "missing \\['hand_over'\\]"),
        ({**COSTS, "oops": 1}, "unknown \\['oops'\\]"),
        ({**COSTS, "ask": -1}, "cost_table\\['ask'\\]"),
        ({**COSTS, "ask": float("nan")}, "finite"),
    ],
)
def test_cost_table_checks(table, message):
    with pytest.raises(ValueError, match=message):
        cost_thresholds([0.5, 0.9], [0, 1], table)


# --- conformal prediction ---------------------------------------------------------------


@pytest.mark.parametrize("score", ["lac", "aps"])
def test_conformal_coverage_on_synthetic_data(score):
    probabilities, labels = _probabilities(7000, 10, seed=5)
    conformal = ConformalClassifier(alpha=0.1, score=score).fit(probabilities[:2000], labels[:2000])
    sets = conformal.predict_sets(probabilities[2000:])
    assert coverage(sets, labels[2000:]) == pytest.approx(0.9, abs=0.025)
    assert 1.0 < mean_set_size(sets) < 10.0
    if score == "aps":
        assert min(s.size for s in sets) >= 1  # APS sets always hold the most likely label


def test_conformal_quantile_is_finite_sample():
    probabilities, labels = _probabilities(9, 4, seed=6)
    true_scores = 1 - probabilities[np.arange(9), labels]
    # n = 9, alpha = 0.1: ceil(10 * 0.9) = 9 -> the largest score.
    assert ConformalClassifier(alpha=0.1).fit(probabilities, labels).q_hat_ == true_scores.max()
    # n = 8: ceil(9 * 0.9) = 9 > 8 -> too few rows, every label is in every set.
    too_few = ConformalClassifier(alpha=0.1).fit(probabilities[:8], labels[:8])
    assert too_few.q_hat_ == math.inf
    assert all(s.size == 4 for s in too_few.predict_sets(probabilities))


def test_conformal_sets_are_ordered_and_aps_scores_are_cumulative():
    probabilities = np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]])
    aps = ConformalClassifier(alpha=0.5, score="aps").fit(probabilities, np.array([2, 1]))
    # True-label APS scores: 0.6 + 0.3 = 0.9 and (ties enter together) 1.0; ceil(3 * 0.5) = 2 -> 1.0.
    assert aps.q_hat_ == pytest.approx(1.0)
    sets = ConformalClassifier(alpha=0.5, score="lac").fit(probabilities, np.array([1, 0])).predict_sets(probabilities)
    # LAC scores of true labels 0.4, 0.5 -> q_hat = 0.5: labels with p >= 0.5.
    assert [s.tolist() for s in sets] == [[1], [0]]
    lac_loose = ConformalClassifier(alpha=0.5, score="lac").fit(probabilities, np.array([0, 1]))
    assert [s.tolist() for s in lac_loose.predict_sets(probabilities)] == [[1, 2, 0], [0, 1, 2]]


def test_conformal_bad_input():
    with pytest.raises(ValueError, match="alpha"):
        ConformalClassifier(alpha=0.0)
    with pytest.raises(ValueError, match="score"):
        ConformalClassifier(score="raps")
    with pytest.raises(ValueError, match="row 0 sums to"):
        ConformalClassifier().fit([[0.5, 0.6]], [0])
    with pytest.raises(ValueError, match="labels must lie in"):
        ConformalClassifier().fit([[0.5, 0.5]], [2])
    with pytest.raises(NotFittedError):
        ConformalClassifier().predict_sets([[0.5, 0.5]])
    fitted = ConformalClassifier().fit([[0.5, 0.5]], [0])
    with pytest.raises(ValueError, match="2 columns"):
        fitted.predict_sets([[0.2, 0.3, 0.5]])


def test_coverage_set_size_and_set_router():
    sets = [np.array([], dtype=int), np.array([1]), np.array([1, 2]), np.array([0, 1, 2]), np.arange(4)]
    assert coverage(sets, [0, 1, 1, 3, 3]) == pytest.approx(3 / 5)
    assert mean_set_size(sets) == 2.0
    assert set_router(sets, max_ask=3).tolist() == [HAND_OVER, ACT, ASK, ASK, HAND_OVER]
    assert set_router(sets, max_ask=1).tolist() == [HAND_OVER, ACT, HAND_OVER, HAND_OVER, HAND_OVER]
    with pytest.raises(ValueError, match="max_ask"):
        set_router(sets, max_ask=0)
    with pytest.raises(ValueError, match="one entry per set"):
        coverage(sets, [0, 1])


def test_outcome_intervals_match_outcomes_and_are_exact_binomial():
    from lib.intervals import binomial_interval
    from lib.routing import outcome_intervals

    rng = np.random.default_rng(3)
    decisions = rng.choice(["act", "ask", "hand_over"], size=300, p=[0.6, 0.3, 0.1])
    correct = rng.random(300) < 0.8
    in_options = correct | (rng.random(300) < 0.5)
    table = outcome_intervals(decisions, correct, in_options)
    point = outcomes(decisions, correct, in_options)
    for key, row in table.iterrows():
        assert row["value"] == pytest.approx(point[key])
        assert row["low"] <= row["value"] <= row["high"]
    acted = decisions == "act"
    assert table.loc["act_accuracy", "support"] == int(acted.sum())
    assert table.loc["share_act", "support"] == 300
    expected = binomial_interval(int((acted & correct).sum()), int(acted.sum()))
    assert tuple(table.loc["act_accuracy", ["value", "low", "high"]]) == pytest.approx(expected)
    without = outcome_intervals(decisions, correct)
    assert np.isnan(without.loc["ask_in_options", "value"]) and np.isnan(without.loc["ask_in_options", "low"])


def test_outcome_intervals_do_not_collapse_at_zero_or_one():
    # 8 items all acted on and all right: a percentile bootstrap gives [1, 1]; the exact interval
    # is about [0.63, 1]. Nothing asked: the share asked is 0 with an upper end above 0.
    from lib.routing import outcome_intervals

    table = outcome_intervals(["act"] * 8, [True] * 8, [True] * 8)
    assert table.loc["act_accuracy", "value"] == 1.0
    assert table.loc["act_accuracy", "low"] == pytest.approx(0.631, abs=1e-3)
    assert table.loc["share_ask", "value"] == 0.0 and table.loc["share_ask", "high"] == pytest.approx(0.369, abs=1e-3)
    assert np.isnan(table.loc["ask_in_options", "value"]) and table.loc["ask_in_options", "support"] == 0


def test_outcome_intervals_bad_input():
    from lib.routing import outcome_intervals

    with pytest.raises(ValueError, match="same length"):
        outcome_intervals(["act", "ask"], [True])
    with pytest.raises(ValueError, match="level"):
        outcome_intervals(["act"], [True], level=1.5)


def test_conformal_aps_includes_zero_probability_labels_when_q_hat_is_the_total_mass():
    # Half the calibration rows have their label at probability 0 (score = total mass, summed in floats),
    # so q_hat is a total mass; a test row's zero-probability labels must then enter its set.
    probs = np.array([[0.7, 0.2, 0.1, 0.0], [0.1, 0.6, 0.3, 0.0]] * 10)
    labels = np.array([0, 3] * 10)
    fitted = ConformalClassifier(alpha=0.1, score="aps").fit(probs, labels)
    assert math.isclose(fitted.q_hat_, 1.0)
    test_probs = np.array([[0.1, 0.2, 0.7, 0.0], [0.3, 0.3, 0.4, 0.0]])
    assert all(s.size == 4 for s in fitted.predict_sets(test_probs))


def test_mean_cost_and_routing_summary_hand_computed():
    from lib.routing import mean_cost, routing_summary

    costs = {"act_wrong": 10.0, "ask": 1.0, "hand_over": 3.0}
    confidence = np.array([0.95, 0.9, 0.6, 0.5, 0.1])
    correct = np.array([True, False, True, False, True])
    # act, act, ask, ask, hand over: 0 + 10 + 1 + (1 + 3) + 3 = 18 over 5 items
    decisions = route_by_thresholds(confidence, 0.9, 0.5)
    assert mean_cost(decisions, correct, costs) == pytest.approx(18 / 5)
    assert mean_cost(decisions, correct, {**costs, "act_right": 1.0, "ask_wrong": 2.0}) == pytest.approx(17 / 5)
    summary = routing_summary(confidence, correct, 0.9, 0.5, costs)
    assert summary == pytest.approx({"share_act": 0.4, "share_ask": 0.4, "share_hand_over": 0.2,
                                     "act_accuracy": 0.5, "cost_per_message": 18 / 5})
    assert math.isnan(routing_summary(confidence, correct, math.inf, 0.0, costs)["act_accuracy"])
    with pytest.raises(ValueError, match="hand_over_threshold"):
        routing_summary(confidence, correct, 0.3, 0.5, costs)
    with pytest.raises(ValueError, match="cost_table"):
        mean_cost(decisions, correct, {"ask": 1.0})


def test_cost_thresholds_minimise_mean_cost_of_their_own_routing():
    from lib.routing import mean_cost

    rng = np.random.default_rng(3)
    confidence = rng.random(200)
    correct = rng.random(200) < confidence
    costs = {"act_wrong": 15.0, "ask": 0.5, "hand_over": 4.0}
    fitted = cost_thresholds(confidence, correct, costs)
    routed = route_by_thresholds(confidence, fitted.act_threshold, fitted.hand_over_threshold)
    assert mean_cost(routed, correct, costs) == pytest.approx(fitted.expected_cost)


def test_routing_sweep_rows_match_routing_summary_and_shares_move_monotonically():
    from lib.routing import routing_summary, routing_sweep

    rng = np.random.default_rng(5)
    confidence = rng.random(300)
    correct = rng.random(300) < confidence
    costs = {"act_wrong": 15.0, "ask": 0.5, "hand_over": 4.0}
    sweep = routing_sweep(confidence, correct, [0.0, 0.2, 0.5, 0.9, 1.0], 0.2, costs)
    assert list(sweep["act_threshold"]) == [0.2, 0.2, 0.5, 0.9, 1.0]  # below the hand-over threshold: raised to it
    for row in sweep.itertuples():
        expected = routing_summary(confidence, correct, row.act_threshold, 0.2, costs)
        assert row.share_act == expected["share_act"] and row.cost_per_message == pytest.approx(expected["cost_per_message"])
    assert sweep["share_act"].is_monotonic_decreasing and sweep["share_ask"].is_monotonic_increasing
    assert np.allclose(sweep["share_hand_over"], np.mean(confidence < 0.2))
    with pytest.raises(ValueError, match="empty"):
        routing_sweep(confidence, correct, [], 0.2, costs)


def test_ask_costed_on_the_offered_options():
    # An ASK that offers three options succeeds when the right label is among them, not only when
    # the top answer is right: two asked items, top answer wrong for both, right label offered for one.
    from lib.routing import mean_cost

    costs = {"act_wrong": 10.0, "ask": 1.0, "hand_over": 3.0}
    decisions = ["act", "ask", "ask", "hand_over"]
    correct = [True, False, False, False]
    assert mean_cost(decisions, correct, costs) == pytest.approx((0 + 4 + 4 + 3) / 4)
    assert mean_cost(decisions, correct, costs, in_options=[True, True, False, False]) == pytest.approx((0 + 1 + 4 + 3) / 4)


def test_cost_thresholds_with_options_match_a_brute_force_search():
    from lib.routing import mean_cost

    rng = np.random.default_rng(7)
    confidence = np.round(rng.random(40), 1)  # many ties
    correct = rng.random(40) < confidence
    in_options = correct | (rng.random(40) < 0.6)
    costs = {"act_wrong": 12.0, "ask": 0.5, "hand_over": 4.0}
    levels = [math.inf] + sorted(set(confidence.tolist()), reverse=True)
    brute = min(mean_cost(route_by_thresholds(confidence, act, hand_over), correct, costs, in_options)
                for a, act in enumerate(levels) for hand_over in levels[a:])
    fitted = cost_thresholds(confidence, correct, costs, in_options=in_options)
    assert fitted.expected_cost == pytest.approx(brute)
    routed = route_by_thresholds(confidence, fitted.act_threshold, fitted.hand_over_threshold)
    assert mean_cost(routed, correct, costs, in_options) == pytest.approx(brute)
    assert fitted.expected_cost < cost_thresholds(confidence, correct, costs).expected_cost
    with pytest.raises(ValueError, match="same length"):
        cost_thresholds(confidence, correct, costs, in_options=in_options[:3])
