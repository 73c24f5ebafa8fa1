"""Plots used across the notebooks, with one colour per method everywhere.

Every function returns the matplotlib `Figure` (it never calls `plt.show`), gives the
plot a title and axis labels with units, and accepts `ax` to draw into existing axes.
Colours: `METHOD_COLORS` for the workbook's methods; any other name gets a fixed
colour from `FALLBACK_COLORS` chosen by a hash of the name, so it too keeps its
colour from one notebook to the next; `OUTCOME_COLORS` for right and wrong items.

New figures are made with `matplotlib.figure.Figure`, not pyplot: nothing global is
left open, and in Jupyter a figure shows when it is the last value of a cell (or via
`display(fig)`), never twice. Save with `fig.savefig(path)`.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lib.calibration import ece, reliability_bins
from lib.checks import check_confidence_correct, check_positive_int
from lib.actions import Action
from lib.selective import tie_aware_accuracy_coverage

__all__ = [
    "METHOD_COLORS",
    "FALLBACK_COLORS",
    "ACTION_COLORS",
    "OUTCOME_COLORS",
    "SERIES_COLORS",
    "method_color",
    "reliability_diagram",
    "reliability_grid",
    "accuracy_coverage_plot",
    "threshold_regions",
    "routing_shares_plot",
    "calibration_comparison",
]

METHOD_COLORS: dict[str, str] = {
    "full": "#1f77b4",  # blue
    "shortlist": "#ff7f0e",  # orange
    "knn": "#2ca02c",  # green
    "embed-logreg": "#9467bd",  # purple
}
FALLBACK_COLORS: tuple[str, ...] = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#d62728")
ACTION_COLORS: dict[Action, str] = {
    Action.ACT: "#2ca02c",
    Action.ASK: "#ffbf00",
    Action.OUT_OF_SCOPE: "#9467bd",
    Action.HAND_OVER: "#d62728",
}
OUTCOME_COLORS: dict[bool, str] = {True: "#1f77b4", False: "#d62728"}
"""Colour of right (True) and wrong (False) items, in every plot that shows both."""
SERIES_COLORS: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c")
"""Colours of series that are not methods, actions or outcomes (a retrieval score and its rivals),
in the order a plot introduces them: blue, orange, green."""
_PROBABILITY_LABEL = "Confidence (probability, 0-1)"


def method_color(name: str) -> str:
    """Colour of a method: from METHOD_COLORS, else a stable pick from FALLBACK_COLORS."""
    if name in METHOD_COLORS:
        return METHOD_COLORS[name]
    return FALLBACK_COLORS[zlib.crc32(name.encode("utf-8")) % len(FALLBACK_COLORS)]


def _new_axes(ax: Axes | None) -> tuple[Figure, Axes]:
    """Use `ax` if given, else create a new figure with one axes."""
    if ax is not None:
        return ax.figure, ax
    figure = Figure(figsize=(6.4, 4.2), layout="constrained")
    return figure, figure.add_subplot()


def reliability_diagram(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    n_bins: int = 15,
    title: str | None = None,
    ax: tuple[Axes, Axes] | None = None,
    legend: bool = True,
    strategy: str = "uniform",
    confidence_label: str = _PROBABILITY_LABEL,
) -> Figure:
    """Accuracy per confidence bin against the diagonal, with item counts underneath.

    Top axes: bars of accuracy per equal-width bin (bins of
    `lib.calibration.reliability_bins`), the perfect-calibration diagonal, ECE in
    the legend. Bottom axes: number of items per bin, so sparse bins are visible.

    Args:
        confidence, correct: shape (n,) each, see `lib.calibration`.
        title: defaults to "Reliability diagram (ECE = ...)".
        ax: optional pair `(top, bottom)` of axes to draw into, e.g. a column of
            `plt.subplots(2, k, height_ratios=[3, 1])`; by default a new figure.
        strategy: "uniform" (equal-width bins) or "quantile" (bins of roughly equal
            counts), as in `lib.calibration.reliability_bins`.
        legend: draw the legend inside the top axes (upper left). Figures with many
            panels pass False and draw one legend for all (see `reliability_grid`).
        confidence_label: the x-axis label; a score that is not a probability (knn's
            margin, `lib.saved_runs.decisions.CONFIDENCE_KINDS`) should say so here.
    """
    bins = reliability_bins(confidence, correct, n_bins=n_bins, strategy=strategy)
    error = ece(confidence, correct, n_bins=n_bins, strategy=strategy)
    if ax is None:
        figure = Figure(figsize=(5.2, 5.6), layout="constrained")
        top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    else:
        top, bottom = ax
        figure = top.figure
    width = bins["upper"] - bins["lower"]
    top.bar(bins["lower"], bins["accuracy"].fillna(0.0), width=width, align="edge",
            color=OUTCOME_COLORS[True], edgecolor="white", label=f"accuracy per bin (ECE = {error:.3f})")
    top.plot([0, 1], [0, 1], linestyle="--", color="black", label="perfect calibration")
    top.set(xlim=(0, 1), ylim=(0, 1), ylabel="Accuracy (share correct, 0-1)",
            title=title if title is not None else f"Reliability diagram (ECE = {error:.3f})")
    if legend:
        top.legend(loc="upper left")
    bottom.bar(bins["lower"], bins["count"], width=width, align="edge", color="0.5", edgecolor="white")
    bottom.set(xlim=(0, 1), xlabel=confidence_label, ylabel="Items (count)")
    return figure


def reliability_grid(
    signals: dict[str, tuple[Sequence[float] | np.ndarray, Sequence[bool] | np.ndarray]],
    columns: int = 3,
    n_bins: int = 15,
    title: str = "Accuracy per confidence bin against the diagonal",
    confidence_labels: dict[str, str] | None = None,
) -> Figure:
    """One `reliability_diagram` per signal, `columns` per row, with one shared legend.

    Each panel is titled with its name, its number of items and its ECE; the legend sits
    below all panels, so it covers no bar. Panels keep a readable size however many
    signals there are (rows are added, never squeezed).

    Args:
        signals: `{name: (confidence, correct)}`, arrays of shape (n,) each.
        confidence_labels: `{name: x-axis label}` for panels whose score is not a
            probability (e.g. knn's margin); the others keep `reliability_diagram`'s label.
    """
    if not signals:
        raise ValueError("signals is empty: pass {name: (confidence, correct)}")
    check_positive_int(columns, "columns")
    columns = min(columns, len(signals))
    rows = -(-len(signals) // columns)
    figure = Figure(figsize=(4.0 * columns, 4.6 * rows + 0.6), layout="constrained")
    axes = figure.subplots(2 * rows, columns, height_ratios=[3, 1] * rows, squeeze=False)
    for k, (name, (confidence, correct)) in enumerate(signals.items()):
        row, column = divmod(k, columns)
        error = ece(confidence, correct, n_bins=n_bins)
        label = (confidence_labels or {}).get(name, _PROBABILITY_LABEL)
        reliability_diagram(confidence, correct, n_bins=n_bins, legend=False, confidence_label=label,
                            ax=(axes[2 * row, column], axes[2 * row + 1, column]),
                            title=f"{name}\n(n = {len(np.asarray(correct))}, ECE {error:.3f})")
    for k in range(len(signals), rows * columns):
        row, column = divmod(k, columns)
        axes[2 * row, column].set_visible(False)
        axes[2 * row + 1, column].set_visible(False)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    labels = [label.split(" (ECE")[0] for label in labels]
    figure.legend(handles, labels, loc="outside lower center", ncols=len(handles))
    figure.suptitle(title)
    return figure


def accuracy_coverage_plot(
    curves: dict[str, tuple[Sequence[float] | np.ndarray, Sequence[bool] | np.ndarray]],
    title: str = "Accuracy when acting only on the most confident items",
    ax: Axes | None = None,
) -> Figure:
    """Accuracy of the acted set against coverage, one line per method.

    Each line is `lib.selective.tie_aware_accuracy_coverage`: exact at every threshold
    (every tie block's end) and, inside a tie block, the expected accuracy of taking the
    tied items in random order. A step held across a block would credit a method with
    accuracy it only has at the block's start.

    Args:
        curves: `{method name: (confidence, correct)}`; names in METHOD_COLORS get their
            workbook colour.
    """
    if not curves:
        raise ValueError("curves is empty: pass {method name: (confidence, correct)}")
    figure, axes = _new_axes(ax)
    for name, (confidence, correct) in curves.items():
        curve = tie_aware_accuracy_coverage(confidence, correct)
        axes.plot(100 * curve["coverage"], 100 * curve["accuracy"], color=method_color(name), label=name)
    axes.set(xlim=(0, 100), xlabel="Coverage (% of items acted on)",
             ylabel="Accuracy of acted items (%)", title=title)
    if len(curves) > 1:
        axes.legend(loc="lower left")
    return figure


def threshold_regions(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    act_threshold: float,
    hand_over_threshold: float,
    n_bins: int = 30,
    title: str = "Where the thresholds cut: right vs wrong answers by confidence",
    ax: Axes | None = None,
    log_counts: bool = False,
) -> Figure:
    """Histogram of confidence for right and wrong answers with ACT/ASK/HAND_OVER shaded.

    Regions: `[0, hand_over_threshold)` HAND_OVER, `[hand_over_threshold, act_threshold)`
    ASK, `[act_threshold, 1]` ACT; an `inf` threshold empties its
    region (as in `lib.routing.route_by_thresholds`). `log_counts=True` puts the
    count axis on a log scale: when right answers outnumber wrong ones tenfold, the wrong
    answers' histogram is otherwise a flat line at the bottom.
    """
    conf, corr = check_confidence_correct(confidence, correct)
    check_positive_int(n_bins, "n_bins")
    if not hand_over_threshold <= act_threshold:
        raise ValueError(
            f"hand_over_threshold ({hand_over_threshold!r}) must be <= act_threshold ({act_threshold!r})"
        )
    figure, axes = _new_axes(ax)
    act_from, ask_from = min(act_threshold, 1.0), min(hand_over_threshold, 1.0)
    regions = {
        Action.HAND_OVER: (0.0, ask_from),
        Action.ASK: (ask_from, act_from),
        Action.ACT: (act_from, 1.0),
    }
    for decision, (start, end) in regions.items():
        if end > start:
            axes.axvspan(start, end, color=ACTION_COLORS[decision], alpha=0.15, label=decision.name)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    axes.hist([conf[corr], conf[~corr]], bins=edges, color=[OUTCOME_COLORS[True], OUTCOME_COLORS[False]],
              label=["right", "wrong"], histtype="step", linewidth=1.8)
    axes.set(xlim=(0, 1), xlabel=_PROBABILITY_LABEL, title=title,
             ylabel="Items (count, log scale)" if log_counts else "Items (count)")
    if log_counts:
        axes.set_yscale("log")
    axes.legend(loc="upper left")
    return figure


def routing_shares_plot(
    sweep: pd.DataFrame,
    marked_threshold: float | None = None,
    title: str = "What the act threshold does: shares of messages and acted accuracy",
    ax: Axes | None = None,
) -> Figure:
    """Stacked shares acted / asked / handed over against the act threshold, with acted accuracy.

    Args:
        sweep: from `lib.routing.routing_sweep` (columns `act_threshold`,
            `share_act`, `share_ask`, `share_hand_over`, `act_accuracy`).
        marked_threshold: drawn as a dashed vertical line (e.g. the fitted act threshold).
    """
    required = {"act_threshold", "share_act", "share_ask", "share_hand_over", "act_accuracy"}
    missing = required - set(sweep.columns)
    if missing:
        raise ValueError(f"sweep is missing columns {sorted(missing)}; make it with lib.routing.routing_sweep")
    figure, axes = _new_axes(ax)
    x = sweep["act_threshold"].to_numpy(float)
    shares = [100 * sweep[f"share_{key}"].to_numpy(float) for key in ("act", "ask", "hand_over")]
    axes.stackplot(x, *shares, colors=[ACTION_COLORS[d] for d in (Action.ACT, Action.ASK, Action.HAND_OVER)],
                   alpha=0.45, labels=["ACT share", "ASK share", "HAND_OVER share"])
    axes.plot(x, 100 * sweep["act_accuracy"].to_numpy(float), color="black", linewidth=2, label="accuracy of acted messages")
    if marked_threshold is not None and math.isfinite(marked_threshold):
        axes.axvline(marked_threshold, color="black", linestyle="--", linewidth=1, label=f"act threshold {marked_threshold:.3f}")
    axes.set(xlim=(x.min(), x.max()), ylim=(0, 100), xlabel="Act threshold (confidence, 0-1)",
             ylabel="Share of messages, accuracy (%)", title=title)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=3, fontsize="small")
    return figure


def calibration_comparison(
    table: pd.DataFrame,
    title: str = "Calibration error by method and calibrator",
    ax: Axes | None = None,
) -> Figure:
    """Grouped bars of ECE with interval error bars: one group per calibrator, one bar per method.

    Args:
        table: one row per (method, calibrator) with columns `method`, `calibrator`,
            `ece` and the interval ends `ece_low`, `ece_high` (e.g. from
            `lib.intervals.bootstrap_interval`). Bars take the method's colour.
    """
    required = {"method", "calibrator", "ece", "ece_low", "ece_high"}
    missing = required - set(table.columns)
    if missing:
        raise ValueError(f"table is missing columns {sorted(missing)}; needs {sorted(required)}")
    if table.empty:
        raise ValueError("table is empty: need at least one (method, calibrator) row")
    if ((table["ece_low"] > table["ece"]) | (table["ece"] > table["ece_high"])).any():
        raise ValueError("table must satisfy ece_low <= ece <= ece_high in every row")
    figure, axes = _new_axes(ax)
    calibrators = list(dict.fromkeys(table["calibrator"]))
    methods = list(dict.fromkeys(table["method"]))
    width = 0.8 / len(methods)
    for m, method in enumerate(methods):
        rows = table[table["method"] == method].set_index("calibrator").reindex(calibrators)
        positions = np.arange(len(calibrators)) + (m - (len(methods) - 1) / 2) * width
        errors = np.vstack([rows["ece"] - rows["ece_low"], rows["ece_high"] - rows["ece"]])
        axes.bar(positions, rows["ece"], width=width, yerr=errors, capsize=3,
                 color=method_color(method), label=method)
    axes.set_xticks(np.arange(len(calibrators)), calibrators)
    axes.set(xlabel="Calibrator", ylabel="ECE (probability, 0-1; lower is better)", title=title)
    if len(methods) > 1:
        axes.legend(title="method")
    return figure
