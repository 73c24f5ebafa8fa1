"""Tests for lib.plots: every plot returns a Figure with a title and labelled axes."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from lib.plots import (
    reliability_grid,  # noqa: E402
    FALLBACK_COLORS,
    METHOD_COLORS,
    OUTCOME_COLORS,
    accuracy_coverage_plot,
    calibration_comparison,
    method_color,
    reliability_diagram,
    threshold_regions,
)


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.2, 1.0, 300)
    return confidence, rng.uniform(size=300) < confidence**2


def _assert_labelled(axes) -> None:
    assert axes.get_title()
    assert axes.get_xlabel() and axes.get_ylabel()


def test_reliability_diagram(data):
    figure = reliability_diagram(*data, n_bins=10)
    assert isinstance(figure, Figure)
    top, bottom = figure.axes
    assert top.get_title().startswith("Reliability diagram (ECE = ")
    assert top.get_ylabel() and bottom.get_xlabel() and bottom.get_ylabel()
    assert any("ECE" in text.get_text() for text in top.get_legend().get_texts())
    assert len(top.patches) == len(bottom.patches) == 10


def test_reliability_diagram_into_given_axes(data):
    figure = Figure()
    axes = figure.subplots(2, 2)
    assert reliability_diagram(*data, title="Model A", ax=axes[:, 1]) is figure
    assert axes[0, 1].get_title() == "Model A" and not axes[0, 0].get_title()


def test_accuracy_coverage_plot_uses_method_colours(data):
    figure = accuracy_coverage_plot({"full": data, "knn": (data[0][::-1], data[1])})
    (axes,) = figure.axes
    _assert_labelled(axes)
    assert "%" in axes.get_xlabel() and "%" in axes.get_ylabel()
    colours = {line.get_label(): to_hex(line.get_color()) for line in axes.get_lines()}
    assert colours == {"full": METHOD_COLORS["full"], "knn": METHOD_COLORS["knn"]}
    with pytest.raises(ValueError, match="curves is empty"):
        accuracy_coverage_plot({})


def test_fallback_colour_is_stable_and_distinct_from_named_methods():
    assert method_color("bm25") == method_color("bm25") in FALLBACK_COLORS
    assert not set(FALLBACK_COLORS) & set(METHOD_COLORS.values())


@pytest.mark.parametrize(("act", "hand_over", "regions"), [(0.9, 0.5, 3), (math.inf, 0.5, 2), (0.7, 0.7, 2)])
def test_threshold_regions(data, act, hand_over, regions):
    figure = threshold_regions(*data, act_threshold=act, hand_over_threshold=hand_over)
    (axes,) = figure.axes
    _assert_labelled(axes)
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert {"right", "wrong"} <= set(legend)
    assert len(set(legend) & {"ACT", "ASK", "HAND_OVER"}) == regions
    with pytest.raises(ValueError, match="must be <= act_threshold"):
        threshold_regions(*data, act_threshold=0.3, hand_over_threshold=0.6)


def test_calibration_comparison():
    table = pd.DataFrame(
        {
            "method": ["full", "full", "knn", "knn"],
            "calibrator": ["none", "isotonic", "none", "isotonic"],
            "ece": [0.12, 0.03, 0.08, 0.02],
            "ece_low": [0.10, 0.02, 0.06, 0.01],
            "ece_high": [0.14, 0.05, 0.10, 0.04],
        }
    )
    figure = calibration_comparison(table)
    (axes,) = figure.axes
    _assert_labelled(axes)
    assert [tick.get_text() for tick in axes.get_xticklabels()] == ["none", "isotonic"]
    bar_colours = {to_hex(patch.get_facecolor()) for patch in axes.patches}
    assert bar_colours == {METHOD_COLORS["full"], METHOD_COLORS["knn"]}
    with pytest.raises(ValueError, match=r"missing columns \['ece_high'\]"):
        calibration_comparison(table.drop(columns="ece_high"))


def test_reliability_grid_one_legend_below_and_hidden_spare_panels(data):
    confidence, correct = data
    signals = {f"signal {k}": (confidence, correct) for k in range(4)}
    figure = reliability_grid(signals, columns=3, n_bins=10, title="four signals")
    visible = [axes for axes in figure.axes if axes.get_visible()]
    assert len(visible) == 8 and len(figure.axes) == 12
    tops = [axes for axes in visible if axes.get_ylabel().startswith("Accuracy")]
    assert len(tops) == 4 and all(axes.get_legend() is None for axes in tops)
    assert all("ECE" in axes.get_title() and "n = 300" in axes.get_title() for axes in tops)
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["perfect calibration", "accuracy per bin"]
    assert figure.get_suptitle() == "four signals"
    with pytest.raises(ValueError, match="empty"):
        reliability_grid({})


def test_reliability_grid_labels_a_score_that_is_not_a_probability(data):
    confidence, correct = data
    signals = {"knn (margin)": (confidence, correct), "full": (confidence, correct)}
    figure = reliability_grid(signals, columns=2, confidence_labels={"knn (margin)": "knn margin (not a probability)"})
    bottoms = [axes for axes in figure.axes if axes.get_ylabel() == "Items (count)"]
    assert [axes.get_xlabel() for axes in bottoms] == ["knn margin (not a probability)", "Confidence (probability, 0-1)"]
    assert reliability_diagram(*data, confidence_label="margin").axes[1].get_xlabel() == "margin"


def test_outcome_colours_are_public_and_used(data):
    bars = reliability_diagram(*data).axes[0].patches
    assert to_hex(bars[0].get_facecolor()) == OUTCOME_COLORS[True] != OUTCOME_COLORS[False]


def test_reliability_diagram_without_legend(data):
    figure = reliability_diagram(*data, legend=False)
    assert figure.axes[0].get_legend() is None


def test_threshold_regions_log_counts(data):
    figure = threshold_regions(*data, act_threshold=0.9, hand_over_threshold=0.5, log_counts=True)
    (axes,) = figure.axes
    assert axes.get_yscale() == "log" and "log" in axes.get_ylabel()


def test_routing_shares_plot(data):
    from lib.plots import routing_shares_plot
    from lib.routing import routing_sweep

    sweep = routing_sweep(*data, np.linspace(0.0, 1.0, 21), 0.3, {"act_wrong": 10.0, "ask": 1.0, "hand_over": 3.0})
    figure = routing_shares_plot(sweep, marked_threshold=0.8)
    (axes,) = figure.axes
    _assert_labelled(axes)
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert labels[:3] == ["ACT share", "ASK share", "HAND_OVER share"] and "act threshold 0.800" in labels
    with pytest.raises(ValueError, match="missing columns"):
        routing_shares_plot(sweep.drop(columns="share_ask"))


def test_reliability_diagram_quantile_bins(data):
    figure = reliability_diagram(*data, n_bins=8, strategy="quantile")
    top, bottom = figure.axes
    counts = [patch.get_height() for patch in bottom.patches]
    assert len(counts) == 8 and max(counts) - min(counts) <= 2  # roughly equal counts per bin
