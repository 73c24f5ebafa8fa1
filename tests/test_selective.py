"""Tests for lib.selective: accuracy/risk-coverage curves, AURC, AUROC."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from lib.intervals import bootstrap_interval
from lib.selective import (UnreachableTargetWarning, accuracy_at_coverage, accuracy_coverage, agreement_features, aurc,
                           auroc, fit_threshold, precision_at_recall, risk_coverage, selective_score_intervals,
                           target_reached, threshold_curve, tie_aware_accuracy_coverage, top_two_gap)

# Ties on purpose: 0.9 twice, one right and one wrong.
CONFIDENCE = [0.8, 0.9, 0.5, 0.9]
CORRECT = [1, 0, 1, 1]


def test_accuracy_coverage_groups_ties():
    curve = accuracy_coverage(CONFIDENCE, CORRECT)
    assert list(curve.columns) == ["threshold", "count", "coverage", "accuracy"]
    np.testing.assert_allclose(curve["threshold"], [0.9, 0.8, 0.5])
    np.testing.assert_array_equal(curve["count"], [2, 3, 4])
    np.testing.assert_allclose(curve["coverage"], [0.5, 0.75, 1.0])
    np.testing.assert_allclose(curve["accuracy"], [0.5, 2 / 3, 0.75])


def test_threshold_curve_takes_any_real_scores_and_never_accepts_nan():
    curve = threshold_curve([-0.5, 2.0, np.nan, 2.0, 0.1], [1, 0, 1, 1, 0])
    np.testing.assert_allclose(curve["threshold"], [2.0, 0.1, -0.5])
    np.testing.assert_array_equal(curve["count"], [2, 3, 4])
    np.testing.assert_allclose(curve["coverage"], [2 / 5, 3 / 5, 4 / 5])  # the NaN item is never accepted
    np.testing.assert_allclose(curve["accuracy"], [1 / 2, 1 / 3, 2 / 4])
    with pytest.raises(ValueError, match="NaN"):
        threshold_curve([np.nan], [1])


def test_accuracy_coverage_is_the_threshold_curve_of_a_checked_confidence():
    pd.testing.assert_frame_equal(accuracy_coverage(CONFIDENCE, CORRECT), threshold_curve(CONFIDENCE, CORRECT))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        accuracy_coverage([1.5], [1])


def test_fit_threshold_constructed_case():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    positive = np.array([True, True, False, True, False])
    # precision accepting down to each score: 1, 1, 2/3, 3/4, 3/5
    assert fit_threshold(scores, positive, 0.75) == pytest.approx(0.6)
    assert fit_threshold(scores, positive, 1.0) == pytest.approx(0.8)
    assert fit_threshold(scores, positive, 0.5) == pytest.approx(0.5)
    with pytest.warns(UnreachableTargetWarning):
        t = fit_threshold(scores, np.zeros(5, bool), 0.9)
    assert t > 0.9 and not (scores >= t).any()
    with pytest.raises(ValueError):
        fit_threshold(scores, positive[:3])


def test_fit_threshold_min_count_nan_and_quiet_mode():
    scores = np.array([0.99] * 3 + [0.8] * 10 + [np.nan])
    correct = np.array([True] * 3 + [True] * 8 + [False] * 2 + [True])
    assert fit_threshold(scores, correct, 1.0) == 0.99
    # at least 5 accepted: 0.99 holds only 3, and 0.8 (11/13) misses 1.0
    with pytest.warns(UnreachableTargetWarning, match="at least 5"):
        assert fit_threshold(scores, correct, 1.0, min_count=5) == math.inf
    assert fit_threshold(scores, correct, 0.8, min_count=5) == 0.8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fit_threshold(scores, correct, 1.0, min_count=5, warn=False) == math.inf
    assert fit_threshold(scores, correct, 0.0) == 0.8  # target 0: every item with a score
    with pytest.raises(ValueError, match="target_precision"):
        fit_threshold(scores, correct, 1.5)
    with pytest.raises(ValueError, match="min_count"):
        fit_threshold(scores, correct, 0.9, min_count=0)


def test_risk_coverage_is_one_minus_accuracy():
    risk = risk_coverage(CONFIDENCE, CORRECT)
    np.testing.assert_allclose(risk["risk"], [0.5, 1 / 3, 0.25])
    assert "accuracy" not in risk.columns


def test_aurc_hand_computed_without_and_with_ties():
    # No ties: risks 0, 1/2, 1/3 at coverage 1/3, 2/3, 1.
    assert aurc([0.9, 0.8, 0.7], [1, 0, 1]) == pytest.approx((0 + 1 / 2 + 1 / 3) / 3)
    # Ties: widths 1/2, 1/4, 1/4 with risks 1/2, 1/3, 1/4.
    assert aurc(CONFIDENCE, CORRECT) == pytest.approx(0.5 * 0.5 + 0.25 / 3 + 0.25 * 0.25)


def test_aurc_prefers_a_confidence_that_ranks_right_answers_first():
    rng = np.random.default_rng(0)
    correct = rng.uniform(size=500) < 0.7
    informative = np.clip(0.5 + 0.3 * correct + rng.normal(scale=0.1, size=500), 0, 1)
    uninformative = rng.uniform(size=500)
    assert aurc(informative, correct) < aurc(uninformative, correct)


def test_curves_do_not_depend_on_row_order():
    rng = np.random.default_rng(1)
    confidence = rng.integers(0, 10, 200) / 10
    correct = rng.uniform(size=200) < confidence
    order = rng.permutation(200)
    assert accuracy_coverage(confidence, correct).equals(accuracy_coverage(confidence[order], correct[order]))


def test_auroc_equals_sklearn_on_random_data_with_ties():
    rng = np.random.default_rng(2)
    for _ in range(20):
        confidence = rng.integers(0, 12, 300) / 11  # heavy ties
        correct = rng.uniform(size=300) < 0.3 + 0.5 * confidence
        assert auroc(confidence, correct) == pytest.approx(roc_auc_score(correct, confidence), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), st.booleans()), min_size=2, max_size=40
    ).filter(lambda rows: len({c for _, c in rows}) == 2)
)
def test_auroc_equals_sklearn_property(rows):
    confidence, correct = map(np.array, zip(*rows))
    assert auroc(confidence, correct) == pytest.approx(roc_auc_score(correct, confidence), abs=1e-12)


def test_auroc_extremes_and_one_class_error():
    assert auroc([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]) == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0]) == 0.0
    with pytest.raises(ValueError, match="only one class"):
        auroc([0.2, 0.9], [1, 1])


def test_accuracy_at_coverage():
    assert accuracy_at_coverage(CONFIDENCE, CORRECT, 0.5) == 0.5
    assert accuracy_at_coverage(CONFIDENCE, CORRECT, 0.25) == 0.5  # ties: both 0.9 items enter
    assert accuracy_at_coverage(CONFIDENCE, CORRECT, 0.6) == pytest.approx(2 / 3)
    assert accuracy_at_coverage(CONFIDENCE, CORRECT, 1.0) == 0.75
    confidence = np.linspace(1, 0.1, 10)
    assert accuracy_at_coverage(confidence, np.arange(10) < 3, 0.3) == 1.0  # float 0.3 reaches 3/10
    with pytest.raises(ValueError, match="coverage"):
        accuracy_at_coverage(CONFIDENCE, CORRECT, 0.0)


@pytest.mark.parametrize("function", [accuracy_coverage, risk_coverage, aurc, auroc], ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("confidence", "correct", "message"),
    [([], [], "empty"), ([0.5, 0.6], [1], "same length"), ([np.nan, 0.5], [1, 0], "NaN")],
)
def test_selective_functions_reject_bad_input(function, confidence, correct, message):
    with pytest.raises(ValueError, match=message):
        function(confidence, correct)


def test_oracle_aurc_hand_computed_and_below_every_ranking():
    from lib.selective import oracle_aurc

    # 2 right of 4: risks of the top 1..4 are 0, 0, 1/3, 2/4.
    assert oracle_aurc([False, True, False, True]) == pytest.approx((0 + 0 + 1 / 3 + 1 / 2) / 4)
    assert oracle_aurc([True, True]) == 0.0
    assert oracle_aurc([False, False]) == 1.0
    rng = np.random.default_rng(0)
    correct = rng.random(300) < 0.6
    best = oracle_aurc(correct)
    assert best == pytest.approx(aurc(0.5 * correct + 0.4 * rng.random(300), correct))  # right first, no ties
    for _ in range(20):
        assert aurc(rng.random(300), correct) >= best
    # The two-valued "confidence = correct" ties every right answer: about (1 - accuracy)^2, worse.
    assert aurc(correct.astype(float), correct) > best


def test_precision_at_recall_by_hand():
    # Ranked 0.9 R, 0.8 W, 0.7 R, 0.6 W, 0.5 R: recall 1/3, 1/3, 2/3, 2/3, 1 as the threshold falls.
    confidence, correct = [0.9, 0.8, 0.7, 0.6, 0.5], [1, 0, 1, 0, 1]
    assert precision_at_recall(confidence, correct, 0.3) == pytest.approx(1.0)
    assert precision_at_recall(confidence, correct, 0.5) == pytest.approx(2 / 3)
    assert precision_at_recall(confidence, correct, 0.9) == pytest.approx(3 / 5)


def test_precision_at_recall_keeps_ties_together():
    # The top two items are tied (one right, one wrong): recall 1/2 needs both of them.
    assert precision_at_recall([0.9, 0.9, 0.5], [1, 0, 1], 0.5) == pytest.approx(0.5)


def test_precision_at_recall_rejects_bad_input():
    with pytest.raises(ValueError, match="recall must lie"):
        precision_at_recall([0.5, 0.6], [1, 0], 0.0)
    with pytest.raises(ValueError, match="no right answer"):
        precision_at_recall([0.5, 0.6], [0, 0], 0.9)


def test_agreement_features_joins_on_the_row_index():
    first = pd.DataFrame({"pred": ["a", "b", "c"], "confidence": [0.9, 0.4, 0.7]}, index=[2, 0, 1])
    second = pd.DataFrame({"pred": ["a", "x"], "confidence": [0.6, 0.3]}, index=[2, 0])
    retriever = pd.DataFrame({"pred": ["x", "a", "c"], "similarity": [0.8, 0.9, 0.5], "margin": [0.1, 0.2, 0.0]},
                             index=[0, 2, 1])
    table = agreement_features({"first": first, "second": second}, retriever)
    assert list(table.index) == [0, 2]  # rows in every frame, sorted
    assert list(table.columns) == ["p first", "p second", "first = knn", "second = knn", "first = second",
                                   "similarity", "margin"]
    assert table.loc[0].tolist() == [0.4, 0.3, 0.0, 1.0, 0.0, 0.8, 0.1]
    assert table.loc[2].tolist() == [0.9, 0.6, 1.0, 1.0, 1.0, 0.9, 0.2]


def test_agreement_features_rejects_a_name_clash():
    frame = pd.DataFrame({"pred": ["a"], "confidence": [0.5], "similarity": [0.5], "margin": [0.1]})
    with pytest.raises(ValueError, match="like the retriever"):
        agreement_features({"knn": frame}, frame)
    with pytest.raises(ValueError, match="empty"):
        agreement_features({}, frame)


def test_tie_aware_curve_on_a_tied_toy():
    # Two tie blocks: {0.9: one right, one wrong}, {0.5: two right}.
    curve = tie_aware_accuracy_coverage([0.9, 0.9, 0.5, 0.5], [1, 0, 1, 1])
    assert curve["count"].tolist() == [1, 2, 3, 4]
    # Taking one of the two tied 0.9 items at random is right half the time, not 100 % or 0 %.
    np.testing.assert_allclose(curve["accuracy"], [0.5, 0.5, 2 / 3, 0.75])
    np.testing.assert_allclose(curve["coverage"], [0.25, 0.5, 0.75, 1.0])


def test_tie_aware_curve_equals_the_threshold_curve_at_block_ends():
    rng = np.random.default_rng(3)
    confidence = np.round(rng.uniform(size=300), 1)  # 11 values: many ties
    correct = rng.uniform(size=300) < confidence
    blocks = accuracy_coverage(confidence, correct)
    curve = tie_aware_accuracy_coverage(confidence, correct).set_index("count")
    np.testing.assert_allclose(curve.loc[blocks["count"], "accuracy"], blocks["accuracy"])


def test_tie_aware_curve_without_ties_is_the_running_accuracy():
    confidence = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    correct = np.array([1, 0, 1, 1, 0])
    curve = tie_aware_accuracy_coverage(confidence, correct)
    np.testing.assert_allclose(curve["accuracy"], np.cumsum(correct) / np.arange(1, 6))


def test_top_two_gap_is_the_lead_of_the_best_option():
    assert top_two_gap([0.2, 0.5, 0.3]) == pytest.approx(0.2)
    assert top_two_gap(np.array([0.4, 0.4, 0.2])) == 0.0  # torn between two options
    assert top_two_gap([0.9]) == 0.9  # a single option leads by all of it
    with pytest.raises(ValueError, match="empty"):
        top_two_gap([])


def test_target_reached_is_the_rule_fit_threshold_applies():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    correct = np.array([True, True, False, True, False])
    for target in (0.5, 0.7, 0.75, 0.8, 1.0):
        threshold = fit_threshold(scores, correct, target, warn=False)
        assert target_reached(scores >= threshold, correct, target) is math.isfinite(threshold)
    assert target_reached([True, True, False], [1, 0, 0], 0.5) and not target_reached([True, True, False], [1, 0, 0], 0.6)
    assert not target_reached([False, False], [1, 1], 0.0)  # nothing accepted never reaches a target
    assert not target_reached([True, True], [1, 1], 1.0, min_count=3)
    with pytest.raises(ValueError, match="same length"):
        target_reached([True], [1, 0], 0.5)
    with pytest.raises(ValueError, match="target_precision"):
        target_reached([True], [1], 1.2)


@pytest.mark.parametrize("decimals", [None, 1, 2])
def test_selective_score_intervals_equal_three_bootstraps_on_the_same_resamples(decimals):
    rng = np.random.default_rng(4)
    confidence = rng.random(300)
    if decimals is not None:
        confidence = np.round(confidence, decimals)  # many ties
    correct = rng.random(300) < confidence
    expected = {
        "AUROC": bootstrap_interval(auroc, confidence, correct, n=150, seed=3),
        "AURC": bootstrap_interval(aurc, confidence, correct, n=150, seed=3),
        "precision": bootstrap_interval(lambda c, y: precision_at_recall(c, y, 0.8), confidence, correct, n=150, seed=3),
    }
    assert selective_score_intervals(confidence, correct, 0.8, n=150, seed=3) == expected


def test_selective_score_intervals_refuse_one_class_and_bad_settings():
    with pytest.raises(ValueError, match="one class"):
        selective_score_intervals([0.2, 0.9, 0.5], [True, True, True], 0.5)
    with pytest.raises(ValueError, match="only one class"):  # a resample of two items drew one of them twice
        selective_score_intervals([0.2, 0.9], [True, False], 0.5, n=50)
    with pytest.raises(ValueError, match="recall"):
        selective_score_intervals([0.2, 0.9], [True, False], 0.0)
    with pytest.raises(ValueError, match="n"):
        selective_score_intervals([0.2, 0.9], [True, False], 0.5, n=0)
