"""Tests for lib.calibration: metrics on hand-computed cases, their bootstrap intervals, calibrators, input checks."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.calibration import calibration_curve
from sklearn.exceptions import NotFittedError

from lib.calibration import (
    CALIBRATION_SCORES,
    HistogramBinningCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    TemperatureScaling,
    bootstrap_calibration,
    brier,
    ece,
    nll,
    reliability_bins,
    softmax_at_temperature,
)
from lib.intervals import bootstrap_interval, percentile_interval
from lib.selective import auroc


def _overconfident(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic over-confident system: stated confidence c, true accuracy c ** 2."""
    rng = np.random.default_rng(seed)
    confidence = rng.uniform(0.3, 1.0, n)
    return confidence, rng.uniform(size=n) < confidence**2


# --- input checks -----------------------------------------------------------

METRICS = [ece, brier, nll, reliability_bins]
BAD_INPUTS = [
    ([], [], "empty"),
    ([0.5, 0.6], [1], "same length"),
    ([0.5, np.nan], [1, 0], "NaN"),
    ([0.5, np.inf], [1, 0], "NaN or inf"),
    ([0.5, 1.2], [1, 0], r"\[0, 1\]"),
    ([0.5, -0.1], [1, 0], r"\[0, 1\]"),
    ([0.5, 0.6], [1, 2], "0/1"),
    ([0.5, 0.6], ["yes", "no"], "correct"),
    ([[0.5, 0.6]], [1], "1-D"),
]


@pytest.mark.parametrize("metric", METRICS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("confidence", "correct", "message"), BAD_INPUTS)
def test_metrics_reject_bad_input_with_clear_message(metric, confidence, correct, message):
    with pytest.raises(ValueError, match=message):
        metric(confidence, correct)


def test_error_names_the_argument():
    with pytest.raises(ValueError, match=r"^confidence contains NaN or inf at index 1"):
        ece([0.5, np.nan], [1, 0])
    with pytest.raises(ValueError, match=r"^correct must hold only booleans or 0/1, but correct\[1\] = 2"):
        ece([0.5, 0.6], [1, 2])


@pytest.mark.parametrize("n_bins", [0, -3, 2.5, True])
def test_bad_n_bins(n_bins):
    with pytest.raises(ValueError, match="n_bins"):
        ece([0.5], [1], n_bins=n_bins)


def test_unknown_strategy():
    with pytest.raises(ValueError, match="strategy"):
        reliability_bins([0.5], [1], strategy="kmeans")


# --- reliability bins and ECE --------------------------------------------------


def test_bin_edges_inner_edge_goes_up_and_ends_stay_inside():
    confidence = [0.0, 1 / 15, 2 / 15, 14 / 15, 1.0]
    bins = reliability_bins(confidence, [1, 1, 1, 1, 1], n_bins=15)
    assert len(bins) == 15
    expected = np.zeros(15, dtype=int)
    expected[[0, 1, 2]] = 1
    expected[14] = 2  # 14/15 is the last inner edge, 1.0 joins it in the last bin
    np.testing.assert_array_equal(bins["count"], expected)
    assert bins.loc[1, "lower"] == 1 / 15 and bins.loc[1, "mean_confidence"] == 1 / 15


def test_empty_bins_are_kept_with_nan_means():
    bins = reliability_bins([0.05, 0.95], [0, 1], n_bins=10)
    assert bins["count"].tolist() == [1] + [0] * 8 + [1]
    assert bins.loc[1:8, ["mean_confidence", "accuracy", "gap"]].isna().all().all()
    assert list(bins.columns) == ["lower", "upper", "count", "mean_confidence", "accuracy", "gap"]


def test_ece_hand_computed():
    # 0.1 lies on the edge 1/10 -> bin [0.1, 0.2): mean 0.1, accuracy 0.5, weight 1/2.
    # 0.9 -> bin [0.9, 1.0]: mean 0.9, accuracy 1.0, weight 1/2.
    assert ece([0.1, 0.1, 0.9, 0.9], [0, 1, 1, 1], n_bins=10) == pytest.approx(0.5 * 0.4 + 0.5 * 0.1)


def test_ece_extreme_values():
    assert ece([0.0, 1.0], [0, 1]) == 0.0
    assert ece([0.0, 1.0], [1, 0]) == 1.0
    assert ece([1.0, 1.0, 1.0, 1.0], [1, 1, 1, 0]) == pytest.approx(0.25)


def test_ece_zero_for_perfectly_calibrated_data():
    # In each bin the share correct equals the (single) confidence value.
    confidence = np.repeat([0.1, 0.3, 0.7, 0.95], 20)
    correct = np.concatenate([np.arange(20) < k for k in (2, 6, 14, 19)])
    assert ece(confidence, correct) == pytest.approx(0.0, abs=1e-12)
    assert np.nanmax(np.abs(reliability_bins(confidence, correct)["gap"])) < 1e-12


def test_constant_confidence_trick_is_calibrated_but_useless():
    # Always saying the base rate is perfectly calibrated, but cannot rank right over wrong.
    rng = np.random.default_rng(0)
    correct = rng.uniform(size=1000) < 0.8
    confidence = np.full(1000, correct.mean())
    assert ece(confidence, correct) == pytest.approx(0.0, abs=1e-12)
    assert auroc(confidence, correct) == 0.5


def test_ece_matches_a_direct_weighted_sum():
    confidence, correct = _overconfident(500, seed=1)
    bins = reliability_bins(confidence, correct)
    filled = bins[bins["count"] > 0]
    direct = (filled["count"] * filled["gap"].abs()).sum() / len(confidence)
    assert ece(confidence, correct) == pytest.approx(direct)
    assert bins["count"].sum() == 500


def test_reliability_bins_match_sklearn_calibration_curve():
    # Continuous random confidences never sit on an edge, where sklearn sends values down.
    confidence, correct = _overconfident(2000, seed=2)
    prob_true, prob_pred = calibration_curve(correct, confidence, n_bins=10, strategy="uniform")
    bins = reliability_bins(confidence, correct, n_bins=10)
    filled = bins[bins["count"] > 0]
    np.testing.assert_allclose(filled["accuracy"], prob_true)
    np.testing.assert_allclose(filled["mean_confidence"], prob_pred)


def test_quantile_bins_hold_similar_counts():
    confidence, correct = _overconfident(1000, seed=3)
    bins = reliability_bins(confidence, correct, n_bins=10, strategy="quantile")
    assert bins["count"].sum() == 1000
    assert bins["count"].min() >= 99 and bins["count"].max() <= 101


def test_brier_and_nll_hand_computed():
    assert brier([1.0, 0.0], [1, 0]) == 0.0
    assert brier([0.8, 0.4], [1, 0]) == pytest.approx((0.04 + 0.16) / 2)
    assert nll([0.8, 0.4], [True, False]) == pytest.approx(-(np.log(0.8) + np.log(0.6)) / 2)
    assert nll([1.0], [0]) == pytest.approx(-np.log(1e-12))  # clipped, finite


# --- temperature scaling ---------------------------------------------------------


def _synthetic_logits(n: int, k: int, true_temperature: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels drawn from softmax(logits / true_temperature)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3.0, size=(n, k))
    probabilities = softmax(logits / true_temperature, axis=1)
    labels = (rng.uniform(size=(n, 1)) > probabilities.cumsum(axis=1)).sum(axis=1)
    return logits, labels


@pytest.mark.parametrize("true_temperature", [0.5, 2.0])
def test_temperature_scaling_recovers_known_temperature(true_temperature):
    logits, labels = _synthetic_logits(4000, 5, true_temperature, seed=5)
    fitted = TemperatureScaling().fit(logits, labels)
    assert fitted.temperature_ == pytest.approx(true_temperature, rel=0.1)
    assert fitted.fitted_on_ == 4000


def test_temperature_never_changes_argmax_on_ragged_rows():
    rng = np.random.default_rng(6)
    rows = [rng.normal(size=rng.integers(1, 8)) - 5.0 for _ in range(200)]
    labels = [int(rng.integers(len(row))) for row in rows]
    scaler = TemperatureScaling().fit(rows, labels)
    probabilities = scaler.predict_proba(rows)
    assert [p.shape for p in probabilities] == [row.shape for row in rows]
    for row, p in zip(rows, probabilities):
        assert np.argmax(p) == np.argmax(row)
        assert p.sum() == pytest.approx(1.0)
    confidence = scaler.predict_confidence(rows)
    np.testing.assert_allclose(confidence, [p.max() for p in probabilities])


def test_temperature_scaling_2d_input_gives_2d_output():
    logits, labels = _synthetic_logits(100, 4, 1.5, seed=7)
    probabilities = TemperatureScaling().fit(logits, labels).predict_proba(logits)
    assert probabilities.shape == (100, 4)
    np.testing.assert_array_equal(probabilities.argmax(axis=1), logits.argmax(axis=1))


def test_softmax_at_temperature_is_what_the_fitted_scaler_applies():
    logits, labels = _synthetic_logits(200, 4, true_temperature=2.0, seed=3)
    scaler = TemperatureScaling().fit(logits, labels)
    np.testing.assert_allclose(softmax_at_temperature(logits, scaler.temperature_), scaler.predict_proba(logits))
    ragged = softmax_at_temperature([np.log([0.5, 0.5]), np.log([0.2, 0.3, 0.5])], 1.0)
    np.testing.assert_allclose(ragged, [[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    with pytest.raises(ValueError, match="temperature must be"):
        softmax_at_temperature(logits, 0.0)


def test_temperature_scaling_bad_input():
    scaler = TemperatureScaling()
    with pytest.raises(NotFittedError, match="fit"):
        scaler.predict_confidence([[0.0, 1.0]])
    with pytest.raises(ValueError, match=r"labels\[0\] = 3"):
        scaler.fit([[0.0, 1.0, 2.0]], [3])
    with pytest.raises(ValueError, match=r"option_logprobs\[1\] contains NaN"):
        scaler.fit([[0.0, 1.0], [np.nan, 0.0]], [0, 1])
    with pytest.raises(ValueError, match=r"option_logprobs\[0\] must be a non-empty"):
        scaler.fit([[], [0.0]], [0, 0])
    with pytest.raises(ValueError, match="bounds"):
        TemperatureScaling(bounds=(0.0, 10.0))


# --- confidence calibrators ------------------------------------------------------

CALIBRATORS = [IsotonicCalibrator, HistogramBinningCalibrator, PlattCalibrator]


@pytest.mark.parametrize("make", CALIBRATORS, ids=lambda c: c.__name__)
def test_calibrators_reduce_ece_on_held_out_data(make):
    calib_confidence, calib_correct = _overconfident(3000, seed=10)
    test_confidence, test_correct = _overconfident(3000, seed=11)
    calibrator = make().fit(calib_confidence, calib_correct)
    assert calibrator.fitted_on_ == 3000
    calibrated = calibrator.predict(test_confidence)
    assert calibrated.shape == (3000,) and calibrated.min() >= 0.0 and calibrated.max() <= 1.0
    assert ece(calibrated, test_correct) < 0.5 * ece(test_confidence, test_correct)


@pytest.mark.parametrize("make", CALIBRATORS, ids=lambda c: c.__name__)
def test_calibrators_refuse_to_predict_before_fit_and_check_input(make):
    with pytest.raises(NotFittedError, match=rf"{make.__name__} is not fitted yet"):
        make().predict([0.5])
    fitted = make().fit([0.2, 0.4, 0.6, 0.8], [0, 1, 0, 1])
    with pytest.raises(ValueError, match="confidence"):
        fitted.predict([0.5, np.nan])
    with pytest.raises(ValueError, match="same length"):
        make().fit([0.2, 0.4], [1])


def test_isotonic_output_is_monotone():
    confidence, correct = _overconfident(1000, seed=12)
    grid = np.linspace(0.0, 1.0, 201)
    predicted = IsotonicCalibrator().fit(confidence, correct).predict(grid)
    assert np.all(np.diff(predicted) >= 0)


def test_histogram_binning_uses_bin_accuracy_and_midpoint_for_empty_bins():
    calibrator = HistogramBinningCalibrator(n_bins=10).fit([0.91, 0.95, 0.99, 0.92], [1, 0, 1, 1])
    np.testing.assert_allclose(calibrator.predict([0.9, 0.97, 1.0, 0.33]), [0.75, 0.75, 0.75, 0.35])
    assert calibrator.bin_counts_.sum() == 4


def test_platt_needs_both_classes_and_recovers_a_sigmoid():
    with pytest.raises(ValueError, match="both right"):
        PlattCalibrator().fit([0.2, 0.9], [1, 1])
    rng = np.random.default_rng(13)
    confidence = rng.uniform(0.01, 0.99, 5000)
    logit = np.log(confidence / (1 - confidence))
    correct = rng.uniform(size=5000) < 1 / (1 + np.exp(-(0.5 * logit + 1.0)))
    platt = PlattCalibrator().fit(confidence, correct)
    assert platt.slope_ == pytest.approx(0.5, abs=0.1)
    assert platt.intercept_ == pytest.approx(1.0, abs=0.15)


def test_quantile_ece_uses_the_quantile_bins():
    rng = np.random.default_rng(4)
    confidence = rng.uniform(0.0, 1.0, 600) ** 2
    correct = rng.random(600) < 0.5  # under-confident below 0.5, over-confident above: gaps of both signs
    bins = reliability_bins(confidence, correct, n_bins=10, strategy="quantile")
    expected = float((bins["count"] / len(confidence) * bins["gap"].abs()).sum())
    assert ece(confidence, correct, n_bins=10, strategy="quantile") == pytest.approx(expected)
    assert ece(confidence, correct, n_bins=10, strategy="quantile") != pytest.approx(ece(confidence, correct, n_bins=10))
    with pytest.raises(ValueError, match="strategy"):
        ece(confidence, correct, strategy="random")


# --- bootstrap intervals of several confidences -----------------------------

SCORE_FUNCTIONS = {"ECE": ece, "Brier": brier, "NLL": nll}


def _bootstrap_case(case: int) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
    """Three confidences of the same answers, built to hit the hard spots of the binning and the sums.

    Sizes run odd and even, from 1 item to over a thousand; values tie, sit exactly on the edges
    `k / n_bins`, at 0.0 and 1.0; some cases are all right or all wrong. Returns the confidences,
    `correct` and the number of bins.
    """
    rng = np.random.default_rng(case)
    m = [1, 2, 3, 8, 15, 64, 127, 128, 129, 300, 1001, 1024][case % 12]
    n_bins = 15 if case % 3 else int(rng.integers(1, 30))
    on_edges = rng.integers(0, n_bins + 1, size=m) / n_bins
    ties = rng.choice([0.0, 0.25, 0.5, 0.9, 1.0], size=m)
    smooth = rng.uniform(size=m)
    mixed = np.where(rng.uniform(size=m) < 0.5, on_edges, smooth)
    correct = {0: np.ones(m, bool), 1: np.zeros(m, int)}.get(case % 5, rng.uniform(size=m) < smooth)
    return {"edges": on_edges, "ties": ties, "mixed": mixed}, correct, n_bins


@pytest.mark.parametrize("case", range(24))
def test_bootstrap_calibration_equals_bootstrap_interval(case):
    confidences, correct, n_bins = _bootstrap_case(case)
    n, seed, level = [(301, case, 0.95), (250, 7, 0.9), (3, 11, 0.5)][case % 3]
    result = bootstrap_calibration(confidences, correct, n_bins=n_bins, n=n, seed=seed)
    metrics = {**SCORE_FUNCTIONS, "ECE": lambda c, y: ece(c, y, n_bins)}
    for score, metric in metrics.items():
        for name, confidence in confidences.items():
            assert percentile_interval(*result.score(score, name), level) == bootstrap_interval(
                metric, confidence, correct, n=n, seed=seed, level=level), (score, name)


@pytest.mark.parametrize("case", range(24))
def test_bootstrap_calibration_differences_equal_paired_bootstrap_interval(case):
    confidences, correct, n_bins = _bootstrap_case(case)
    n, seed = [(600, case), (257, 3), (1, 0), (501, 5)][case % 4]  # three blocks of resamples, the last one short
    result = bootstrap_calibration(confidences, correct, n_bins=n_bins, n=n, seed=seed)
    metrics = {**SCORE_FUNCTIONS, "ECE": lambda c, y: ece(c, y, n_bins)}
    for score, metric in metrics.items():
        assert percentile_interval(*result.difference(score, "mixed", "edges")) == bootstrap_interval(
            lambda new, old, right, metric=metric: metric(new, right) - metric(old, right),
            confidences["mixed"], confidences["edges"], correct, n=n, seed=seed), score


def test_bootstrap_calibration_keeps_every_replicate():
    confidences, correct, _ = _bootstrap_case(5)
    result = bootstrap_calibration(confidences, correct, n=40, seed=1)
    assert set(result.replicates) == set(CALIBRATION_SCORES)
    assert all(values.shape == (40,) for by_name in result.replicates.values() for values in by_name.values())
    assert result.estimates["Brier"]["ties"] == brier(confidences["ties"], correct)


@pytest.mark.parametrize(
    ("confidences", "correct", "kwargs", "message"),
    [
        ({}, [1, 0], {}, "confidences is empty"),
        ({"a": [0.5, 0.6], "b": [0.5]}, [1, 0], {}, r"confidences\['b'\]: .*same length, got 1 and 2"),
        ({"a": [0.5, 1.2]}, [1, 0], {}, r"confidences\['a'\]: .*\[0, 1\]"),
        ({"a": [0.5, 0.6]}, [1, 2], {}, "0/1"),
        ({"a": [0.5, 0.6]}, [1, 0], {"n": 0}, "n \\(number of resamples\\)"),
        ({"a": [0.5, 0.6]}, [1, 0], {"n_bins": 0}, "n_bins"),
    ],
)
def test_bootstrap_calibration_bad_input(confidences, correct, kwargs, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_calibration(confidences, correct, **kwargs)


def test_bootstrap_calibration_names_unknown_scores_and_confidences():
    result = bootstrap_calibration({"raw": [0.2, 0.9]}, [0, 1], n=5)
    with pytest.raises(KeyError, match="score must be one of"):
        result.score("AUROC", "raw")
    with pytest.raises(KeyError, match="no confidence named 'isotonic'"):
        result.difference("ECE", "isotonic", "raw")
