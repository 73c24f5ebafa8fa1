"""Guaranteed thresholds (lib.guarantees): the bound, the search, the conformal cuts, and whether the promises hold."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.stats import binomtest

from lib.guarantees import (conformal_threshold, conformal_threshold_pac, fit_guaranteed_threshold,
                            guaranteed_threshold_search, precision_lower_bound)
from lib.selective import UnreachableTargetWarning, fit_threshold

# ------------------------------------------------------------------ the bound


@pytest.mark.parametrize("right, accepted", [(1, 1), (9, 10), (95, 100), (970, 1000), (3, 40)])
def test_the_lower_bound_is_where_the_exact_test_stops_rejecting(right, accepted):
    """At the bound, seeing `right` or more of `accepted` has probability delta exactly."""
    bound = precision_lower_bound(right, accepted, 0.05)
    assert binomtest(right, accepted, bound, alternative="greater").pvalue == pytest.approx(0.05, rel=1e-6)
    assert bound < right / accepted


def test_the_lower_bound_of_nothing_right_is_zero_and_bad_counts_are_refused():
    assert precision_lower_bound(0, 10, 0.1) == 0.0
    assert precision_lower_bound(10, 10, 0.1) == pytest.approx(0.1 ** (1 / 10))  # all right: delta^(1/n)
    with pytest.raises(ValueError, match="accepted"):
        precision_lower_bound(3, 2, 0.1)
    with pytest.raises(ValueError, match="accepted"):
        precision_lower_bound(0, 0, 0.1)
    with pytest.raises(TypeError, match="integer"):
        precision_lower_bound(2.5, 10, 0.1)
    with pytest.raises(ValueError, match="delta"):
        precision_lower_bound(2, 10, 1.0)


# ------------------------------------------------------------------ the search


def test_the_search_returns_the_most_lenient_probe_that_passed_within_its_budget():
    rng = np.random.default_rng(0)
    scores = rng.random(1000)
    correct = rng.random(1000) < scores
    search = guaranteed_threshold_search(scores, correct, 0.9, 0.1)
    assert search.most_probes == math.ceil(math.log2(1000 + 1)) and len(search.probes) <= search.most_probes
    assert search.level == pytest.approx(0.1 / search.most_probes)
    passed = [probe for probe in search.probes if probe.passed]
    assert passed and search.threshold == min(probe.threshold for probe in passed)
    for probe in search.probes:
        accepted = scores >= probe.threshold
        assert (probe.accepted, probe.right) == (int(accepted.sum()), int(correct[accepted].sum()))
        assert probe.lower_bound == precision_lower_bound(probe.right, probe.accepted, search.level)
        assert probe.passed == (probe.lower_bound >= 0.9)
    assert search.threshold == fit_guaranteed_threshold(scores, correct, 0.9, 0.1)


def test_the_guaranteed_threshold_is_stricter_than_the_point_estimate():
    rng = np.random.default_rng(1)
    scores = rng.random(2000)
    correct = rng.random(2000) < scores
    naive = fit_threshold(scores, correct, 0.9)
    guaranteed = fit_guaranteed_threshold(scores, correct, 0.9, 0.1)
    assert naive < guaranteed < 1
    accepted = scores >= guaranteed
    assert precision_lower_bound(int(correct[accepted].sum()), int(accepted.sum()), 0.1 / 11) >= 0.9


def test_an_unreachable_promise_accepts_nothing():
    scores = np.linspace(0, 1, 50)
    correct = np.arange(50) % 2 == 0  # half right at every threshold
    assert fit_guaranteed_threshold(scores, correct, 0.9) == math.inf
    # All right, but too few to promise 0.99 with delta 0.1 (0.1 ** (1/50) < 0.99)
    assert fit_guaranteed_threshold(scores, np.ones(50, bool), 0.99) == math.inf
    # Every probe of 500 right items passes (the first accepts 250: (0.1 / 9) ** (1 / 250) = 0.98): accept all
    assert fit_guaranteed_threshold(np.linspace(0, 1, 500), np.ones(500, bool), 0.9) == 0.0


def test_the_search_follows_the_bound_not_the_best_threshold():
    """SGR assumes that accepting more only lowers the bound. 50 right items: all 50 would pass 0.9
    ((0.1 / 6) ** (1 / 50) = 0.92), but the first probe accepts 25 ((0.1 / 6) ** (1 / 25) = 0.85)
    and fails, so the search turns to stricter thresholds, which fail too: it promises nothing."""
    search = guaranteed_threshold_search(np.linspace(0, 1, 50), np.ones(50, bool), 0.9)
    assert search.probes[0].accepted == 25 and not search.probes[0].passed
    assert precision_lower_bound(50, 50, search.level) >= 0.9 and search.threshold == math.inf


def test_min_count_leaves_out_thresholds_that_accept_too_few():
    scores = np.arange(100.0)
    correct = np.ones(100, bool)
    search = guaranteed_threshold_search(scores, correct, 0.5, 0.1, min_count=60)
    assert all(probe.accepted >= 60 for probe in search.probes)
    assert search.most_probes == math.ceil(math.log2(41 + 1))


def test_tied_scores_are_accepted_together():
    scores = np.array([0.9, 0.9, 0.9, 0.5, 0.5])
    search = guaranteed_threshold_search(scores, [1, 1, 0, 1, 1], 0.1, 0.1)
    assert {probe.accepted for probe in search.probes} <= {3, 5}


@pytest.mark.parametrize("arguments, message", [
    (([0.5, float("nan")], [1, 0], 0.9), "NaN"),
    (([0.5, 0.6], [1, 0, 1], 0.9), "same length"),
    (([0.5, 0.6], [1, 0], 1.0), "target_precision"),
    (([0.5, 0.6], [1, 0], 0.0), "target_precision"),
    (([0.5, 0.6], [1, 2], 0.9), "correct"),
])
def test_bad_input_is_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        fit_guaranteed_threshold(*arguments)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 1.5])
def test_delta_outside_the_open_unit_interval_is_refused(delta):
    with pytest.raises(ValueError, match="delta"):
        fit_guaranteed_threshold([0.5, 0.6], [1, 0], 0.9, delta)


# ------------------------------------------------------------------ the promise, simulated


def _precision_above(threshold: float) -> float:
    """The population's precision above `threshold`: scores uniform on [0, 1], right with probability
    equal to the score, so the accepted items are right (1 + t) / 2 of the time."""
    return 1.0 if math.isinf(threshold) else (1.0 + max(threshold, 0.0)) / 2.0


def test_the_promise_holds_in_at_least_1_minus_delta_of_fitting_draws_and_the_point_estimate_does_not():
    """300 fitting draws of 1,000 items from one population (target 0.9, delta 0.1): the guaranteed
    threshold misses the target on the population in at most 10% of the draws (plus noise), the
    point estimate of `fit_threshold` in about half of them."""
    rng = np.random.default_rng(7)
    draws, target, delta = 300, 0.9, 0.1
    guaranteed_missed = naive_missed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreachableTargetWarning)
        for _ in range(draws):
            scores = rng.random(1000)
            correct = rng.random(1000) < scores
            guaranteed_missed += _precision_above(fit_guaranteed_threshold(scores, correct, target, delta)) < target
            naive_missed += _precision_above(fit_threshold(scores, correct, target)) < target
    assert guaranteed_missed / draws <= delta + 3 * math.sqrt(delta * (1 - delta) / draws)
    assert 0.3 <= naive_missed / draws <= 0.7


# ------------------------------------------------------------------ conformal cuts


def test_the_conformal_cut_is_the_floor_alpha_n_plus_1_th_smallest_score():
    scores = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 8.0, 7.0, 6.0])  # n = 9
    assert conformal_threshold(scores, 0.2) == 2.0  # floor(0.2 * 10) = 2: the 2nd smallest
    assert conformal_threshold(scores, 0.35) == 3.0
    assert conformal_threshold(scores, 0.05) == -math.inf  # floor(0.5) = 0: flag nothing
    with pytest.raises(ValueError, match="alpha"):
        conformal_threshold(scores, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        conformal_threshold([1.0, float("nan")], 0.1)


def test_conformal_cuts_keep_their_promises_on_new_items():
    """400 draws of 200 in-distribution scores: the plain cut flags at most alpha of new items on
    average; the PAC cut flags more than alpha in at most delta of the draws."""
    rng = np.random.default_rng(3)
    alpha, delta, draws = 0.05, 0.1, 400
    plain, pac_missed = [], 0
    for _ in range(draws):
        scores = rng.normal(size=200)
        plain.append(_normal_share_below(conformal_threshold(scores, alpha)))
        pac_missed += _normal_share_below(conformal_threshold_pac(scores, alpha, delta)) > alpha
    assert np.mean(plain) <= alpha + 3 * np.std(plain) / math.sqrt(draws)
    assert pac_missed / draws <= delta + 3 * math.sqrt(delta * (1 - delta) / draws)
    assert conformal_threshold_pac(np.arange(10.0), 0.05) == -math.inf  # ten scores cannot promise 5%


def _normal_share_below(cut: float) -> float:
    return 0.0 if math.isinf(cut) else float(0.5 * (1 + math.erf(cut / math.sqrt(2))))


def test_the_conformal_sets_of_lib_routing_use_the_same_rank():
    """ConformalClassifier's q_hat (the ceil((n + 1)(1 - alpha))-th smallest score of the true label,
    lower = fits better) is the conformal cut of the negated scores, negated back."""
    from lib.routing import ConformalClassifier

    rng = np.random.default_rng(5)
    for n in (9, 19, 99, 100, 769):
        probabilities = rng.dirichlet(np.ones(4), size=n)
        labels = rng.integers(0, 4, size=n)
        true_scores = 1 - probabilities[np.arange(n), labels]  # the "lac" score
        for alpha in (0.05, 0.1, 0.2, 0.5):
            fitted = ConformalClassifier(alpha, "lac").fit(probabilities, labels)
            assert fitted.q_hat_ == -conformal_threshold(-true_scores, alpha), (n, alpha)
