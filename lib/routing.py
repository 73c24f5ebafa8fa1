"""Routing: turn confidence into a decision to ACT, ASK the user, or HAND_OVER to a person (`lib.actions.Action`).

Two families of routers, both fitted on calibration data and applied to new data:

* Thresholds on one confidence number: `ThresholdRouter` (accuracy targets) and
  `cost_thresholds` (minimum expected cost); both route with
  `route_by_thresholds`: `confidence >= act_threshold` -> ACT,
  `hand_over_threshold <= confidence < act_threshold` -> ASK, below -> HAND_OVER.
* Split conformal prediction sets (`ConformalClassifier`) routed by their size
  with `set_router`: one label -> ACT, a few -> ASK which one, none or many -> HAND_OVER.

Fitting reads only the arrays passed to `fit`; `predict` never changes a fitted
attribute and routes each row on its own, so test data cannot leak into the thresholds.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from lib.actions import Action
from lib.checks import (check_binary, check_confidence, check_confidence_correct, check_positive_int, check_unit_interval,
                        require_fitted)
from lib.intervals import binomial_interval
from lib.selective import ThresholdEstimator, ThresholdFitter, accuracy_coverage, fit_threshold

__all__ = [
    "route_by_thresholds",
    "ThresholdRouter",
    "outcomes",
    "outcome_intervals",
    "CostThresholds",
    "cost_thresholds",
    "mean_cost",
    "routing_summary",
    "routing_sweep",
    "ConformalClassifier",
    "coverage",
    "mean_set_size",
    "set_router",
    "ConformalScore",
]


def _decision_array(levels: np.ndarray) -> np.ndarray:
    """Map 0/1/2 to HAND_OVER/ASK/ACT as an object array of Action members.

    (`np.full(n, Action.ASK, dtype=object)` would not do: numpy turns the str-based
    enum member into a truncated plain string.)
    """
    return np.array([Action.HAND_OVER, Action.ASK, Action.ACT], dtype=object)[levels]


def route_by_thresholds(
    confidence: Sequence[float] | np.ndarray, act_threshold: float, hand_over_threshold: float
) -> np.ndarray:
    """Route each item by two thresholds; returns an object array of `Action`, shape (n,).

    `confidence >= act_threshold` -> ACT; `hand_over_threshold <= confidence < act_threshold`
    -> ASK; `confidence < hand_over_threshold` -> HAND_OVER. A threshold
    of `inf` switches its decision off (e.g. `act_threshold=inf` never acts). Each row
    is routed on its own: the result for one item does not depend on the others.
    """
    conf = check_confidence(confidence)
    if math.isnan(act_threshold) or math.isnan(hand_over_threshold) or hand_over_threshold > act_threshold:
        raise ValueError(
            "hand_over_threshold must be <= act_threshold (neither NaN), "
            f"got hand_over_threshold={float(hand_over_threshold)!r}, act_threshold={float(act_threshold)!r}"
        )
    return _decision_array((conf >= hand_over_threshold).astype(int) + (conf >= act_threshold))


class ThresholdRouter(ThresholdEstimator):
    """Pick ACT and HAND_OVER thresholds on calibration data from precision targets.

    Rules (on the calibration rows passed to `fit`, both fitted with
    `lib.selective.fit_threshold`: candidate thresholds are the distinct confidence
    values, and tied items always fall on the same side):

    * ACT threshold: the lowest threshold `t` such that the items with
      `confidence >= t` number at least `min_act_count` and are right at least
      `target_precision` of the time (the accuracy of the acted items). `min_act_count` stops
      a handful of lucky top items from setting the threshold. If no threshold qualifies, the
      router acts on nothing: `act_threshold_ = inf` and `reached_ = False` (no exception).
      `act_threshold` fixes it instead, and `fitter` chooses how it is fitted (the threshold API of
      `lib.selective.ThresholdEstimator`; e.g. `lib.guarantees.fit_guaranteed_threshold`).
    * HAND_OVER threshold: the lowest threshold `h <= act_threshold_` such that the ASK
      band `h <= confidence < act_threshold_` still has accuracy `>= min_ask_accuracy`,
      i.e. the top guess we would offer the user is right often enough to be worth asking
      about. Below `h` we hand over. If even the single most confident group below the
      ACT threshold misses the floor, there is no ASK band (`h = act_threshold_`). The floor is
      always `fit_threshold`'s: it decides what is worth asking about, not what is promised.

    Both rules use cumulative accuracy (over the whole acted set or whole band), so a band
    can contain a low-accuracy stretch balanced by a high-accuracy one above it.

    Attributes (after fit):
        act_threshold_, hand_over_threshold_: floats in [0, 1] or inf.
        reached_: whether the ACT threshold meets the target on the calibration rows.
        act_accuracy_, act_coverage_, ask_accuracy_, ask_coverage_: accuracy and share of
            the calibration rows in the ACT set and ASK band (accuracy NaN when empty).
        fitted_on_: number of calibration rows.
    """

    def __init__(self, target_precision: float = 0.97, min_ask_accuracy: float = 0.5, min_act_count: int = 20,
                 act_threshold: float | None = None, fitter: ThresholdFitter | None = None) -> None:
        self.target_precision = target_precision
        self.min_ask_accuracy = min_ask_accuracy
        self.min_act_count = min_act_count
        self.act_threshold = act_threshold
        self.fitter = fitter

    def fit(
        self, confidence: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray
    ) -> "ThresholdRouter":
        """Choose the thresholds from calibration rows only (`fitter`, by default `lib.selective.fit_threshold`); return self."""
        self.check_parameters()
        check_unit_interval(self.min_ask_accuracy, "min_ask_accuracy")
        check_positive_int(self.min_act_count, "min_act_count")
        conf, corr = check_confidence_correct(confidence, correct)
        self.act_threshold_ = self.threshold_for(conf, corr, self.act_threshold, min_count=self.min_act_count)
        acted = conf >= self.act_threshold_
        self.measure(acted, corr, min_count=self.min_act_count)

        below = ~acted
        self.hand_over_threshold_ = self.act_threshold_
        if below.any():
            floor = fit_threshold(conf[below], corr[below], self.min_ask_accuracy, warn=False)
            if math.isfinite(floor):
                self.hand_over_threshold_ = floor

        asked = ~acted & (conf >= self.hand_over_threshold_)
        self.act_coverage_ = float(acted.mean())
        self.act_accuracy_ = float(corr[acted].mean()) if acted.any() else math.nan
        self.ask_coverage_ = float(asked.mean())
        self.ask_accuracy_ = float(corr[asked].mean()) if asked.any() else math.nan
        return self

    def predict(self, confidence: Sequence[float] | np.ndarray) -> np.ndarray:
        """Action per item, object array of `Action`, shape (n,)."""
        require_fitted(self, "fitted_on_", "predict")
        return route_by_thresholds(confidence, self.act_threshold_, self.hand_over_threshold_)


def _check_decisions(decisions: Sequence[Action | str] | np.ndarray) -> np.ndarray:
    """Return a router's decisions as an object array of Action (members or their values).

    Only ACT, ASK and HAND_OVER: the summaries here split every item among those three, so an
    OUT_OF_SCOPE item would silently fall out of the shares.
    """
    values = list(decisions)
    if not values:
        raise ValueError("decisions is empty: need at least one item")
    try:
        checked = np.array([Action(d) for d in values], dtype=object)
    except ValueError as error:
        raise ValueError(f"decisions must hold Action members or 'act'/'ask'/'hand_over': {error}") from None
    if np.any(checked == Action.OUT_OF_SCOPE):
        raise ValueError("decisions: a router decides act, ask or hand_over; count out_of_scope items "
                         "separately before summarising")
    return checked


def outcomes(
    decisions: Sequence[Action | str] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    in_options: Sequence[bool] | np.ndarray | None = None,
) -> dict[str, float]:
    """Summarise what a routing did on labelled (test) data.

    Args:
        decisions: shape (n,), `Action` per item.
        correct: shape (n,), whether the system's top answer was right.
        in_options: optional shape (n,), whether the right label was among the options
            that an ASK would offer the user.

    Returns:
        dict with `n`; `share_act`, `share_ask`, `share_hand_over` (sum to 1);
        `act_accuracy` (accuracy among ACT items); `ask_in_options` (share of ASK items
        whose right label is among the offered options). A rate over an empty group, or
        `ask_in_options` without `in_options`, is NaN.
    """
    routed, corr, offered = _checked_outcome_inputs(decisions, correct, in_options)
    return {"n": routed.size, **_rates(*_route_masks(routed), corr, offered)}


def _checked_outcome_inputs(
    decisions: Sequence[Action | str] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    in_options: Sequence[bool] | np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The arguments of `outcomes` as checked arrays of one length (in_options may be None)."""
    routed = _check_decisions(decisions)
    corr = check_binary(correct, "correct")
    if corr.size != routed.size:
        raise ValueError(f"decisions and correct must have the same length, got {routed.size} and {corr.size}")
    offered = None
    if in_options is not None:
        offered = check_binary(in_options, "in_options")
        if offered.size != routed.size:
            raise ValueError(
                f"in_options and decisions must have the same length, got {offered.size} and {routed.size}"
            )
    return routed, corr, offered


def _checked_in_options(in_options: Sequence[bool] | np.ndarray | None, correct: np.ndarray) -> np.ndarray:
    """`in_options` as a checked boolean array as long as `correct`; `correct` itself when None."""
    if in_options is None:
        return correct
    offered = check_binary(in_options, "in_options")
    if offered.size != correct.size:
        raise ValueError(f"in_options and correct must have the same length, got {offered.size} and {correct.size}")
    return offered


_OUTCOME_KEYS = ("share_act", "act_accuracy", "share_ask", "ask_in_options", "share_hand_over")


def _route_masks(routed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boolean masks of the ACT, ASK and HAND_OVER items of a checked decision array."""
    return routed == Action.ACT, routed == Action.ASK, routed == Action.HAND_OVER


def _rates(acted: np.ndarray, asked: np.ndarray, handed: np.ndarray, corr: np.ndarray,
           offered: np.ndarray | None) -> dict[str, float]:
    """The five rates of `outcomes` from checked arrays of equal length (NaN over an empty group)."""
    return {
        "share_act": float(acted.mean()),
        "act_accuracy": float(corr[acted].mean()) if acted.any() else math.nan,
        "share_ask": float(asked.mean()),
        "ask_in_options": float(offered[asked].mean()) if offered is not None and asked.any() else math.nan,
        "share_hand_over": float(handed.mean()),
    }


def outcome_intervals(
    decisions: Sequence[Action | str] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    in_options: Sequence[bool] | np.ndarray | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """`outcomes` with exact binomial intervals, one row per outcome.

    Every outcome is a proportion, k of the items it is taken over, so each gets the exact
    (Clopper-Pearson) interval of `lib.intervals.binomial_interval`. Why not a percentile
    bootstrap: a share at 0 or 1 (no item acted on, every acted item right) resamples to the
    same share every time, and its interval collapses to a point, which claims certainty
    that a few items cannot give. A rate over an empty group is NaN with NaN ends.

    Args:
        decisions, correct, in_options: as for `outcomes`.
        level: interval coverage in (0, 1).

    Returns:
        DataFrame indexed by outcome (`share_act`, `act_accuracy`, `share_ask`,
        `ask_in_options`, `share_hand_over`) with columns `value` (as from `outcomes`),
        `low`, `high` and `support` (items the rate is taken over: all items for shares,
        the ACT or ASK items for accuracies).
    """
    routed, corr, offered = _checked_outcome_inputs(decisions, correct, in_options)
    check_unit_interval(level, "level", include_zero=False, include_one=False)
    acted, asked, handed = _route_masks(routed)
    counts = {  # outcome -> (successes, items it is taken over)
        "share_act": (acted, np.ones_like(acted)),
        "act_accuracy": (acted & corr, acted),
        "share_ask": (asked, np.ones_like(asked)),
        "ask_in_options": (asked & offered if offered is not None else None, asked),
        "share_hand_over": (handed, np.ones_like(handed)),
    }
    table = []
    for key in _OUTCOME_KEYS:
        hits, over = counts[key]
        support = int(over.sum())
        value, low, high = (binomial_interval(int(hits.sum()), support, level) if hits is not None and support
                            else (math.nan, math.nan, math.nan))
        table.append({"outcome": key, "value": value, "low": low, "high": high, "support": support})
    return pd.DataFrame(table).set_index("outcome")


# ---------------------------------------------------------------------------
# Cost-based thresholds
# ---------------------------------------------------------------------------

_REQUIRED_COSTS = {"act_wrong", "ask", "hand_over"}
_OPTIONAL_COSTS = {"act_right", "ask_wrong"}


@dataclass(frozen=True)
class CostThresholds:
    """Result of `cost_thresholds`; route new data with `route_by_thresholds`.

    act_threshold, hand_over_threshold: thresholds in [0, 1], or inf to switch off ACT
        (or, for hand_over_threshold, to hand over everything not acted on).
    expected_cost: mean cost per item on the calibration data at these thresholds.
    fitted_on: number of calibration rows.
    """

    act_threshold: float
    hand_over_threshold: float
    expected_cost: float
    fitted_on: int


def _check_cost_table(cost_table: dict[str, float]) -> dict[str, float]:
    """Validate the cost table and fill in the optional costs."""
    keys = set(cost_table)
    missing = _REQUIRED_COSTS - keys
    unknown = keys - _REQUIRED_COSTS - _OPTIONAL_COSTS
    if missing or unknown:
        raise ValueError(
            f"cost_table needs keys {sorted(_REQUIRED_COSTS)} (optional {sorted(_OPTIONAL_COSTS)}); "
            f"missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    for key, value in cost_table.items():
        if not (isinstance(value, (int, float, np.number)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"cost_table[{key!r}] must be a finite number >= 0, got {value!r}")
    costs = {"act_right": 0.0, "ask_wrong": cost_table["ask"] + cost_table["hand_over"]}
    costs.update(cost_table)
    return {key: float(value) for key, value in costs.items()}


def cost_thresholds(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    cost_table: dict[str, float],
    in_options: Sequence[bool] | np.ndarray | None = None,
) -> CostThresholds:
    """Thresholds that minimise the mean cost per item on calibration data.

    Cost model (costs in any one unit, e.g. minutes of staff time; all >= 0):

    * ACT: `act_right` (default 0) if the answer is right, `act_wrong` if wrong.
    * ASK: the user confirms or picks among the offered options. `ask` if the right label
      is among them; `ask_wrong` if not, by default `ask + hand_over` (the user declines,
      then we hand over anyway). Without `in_options` the only option is the top answer
      (a "did you mean X?" question), so an ASK succeeds when the top answer is right.
    * HAND_OVER: `hand_over`, whatever the answer.

    Args:
        confidence, correct: shape (n,), calibration confidences and whether the top answer
            was right.
        cost_table: keys `act_wrong`, `ask`, `hand_over` (optional `act_right`, `ask_wrong`).
        in_options: optional shape (n,), whether the right label is among the options an
            ASK would offer (e.g. the top 3); defaults to `correct`.

    So asking beats handing over when the top answer is right often enough, and acting
    beats asking when mistakes are rare enough. Every pair of thresholds at distinct
    calibration confidences is searched exactly (O(n log n)); among equal costs the
    higher thresholds (fewer automatic actions, fewer questions) win.
    """
    conf, corr = check_confidence_correct(confidence, correct)
    offered = _checked_in_options(in_options, corr)
    costs = _check_cost_table(cost_table)
    curve = accuracy_coverage(conf, corr)
    # Prefix sums over groups of tied confidence, index m = number of top groups taken.
    n_taken = np.concatenate([[0.0], curve["count"].to_numpy(dtype=float)])
    n_right = np.concatenate([[0.0], (curve["accuracy"] * curve["count"]).to_numpy()])
    n_wrong = n_taken - n_right
    group_ends = curve["count"].to_numpy() - 1  # a tie group ends at its cumulative count, whatever the order inside it
    n_offered = np.concatenate([[0.0], np.cumsum(offered[np.argsort(-conf, kind="stable")])[group_ends]])
    act_cost = costs["act_right"] * n_right + costs["act_wrong"] * n_wrong
    ask_cost = costs["ask"] * n_offered + costs["ask_wrong"] * (n_taken - n_offered)
    # total(i, j) = act_cost[i] + ask_cost[j] - ask_cost[i] + hand_over * (n - n_taken[j]), j >= i.
    tail = ask_cost - costs["hand_over"] * n_taken
    best_j = np.empty(tail.size, dtype=int)
    best = tail.size - 1
    for j in range(tail.size - 1, -1, -1):
        if tail[j] <= tail[best]:
            best = j
        best_j[j] = best
    totals = act_cost - ask_cost + tail[best_j] + costs["hand_over"] * conf.size
    i = int(np.argmin(totals))
    j = int(best_j[i])
    thresholds = curve["threshold"].to_numpy()
    return CostThresholds(
        act_threshold=float(thresholds[i - 1]) if i > 0 else math.inf,
        hand_over_threshold=float(thresholds[j - 1]) if j > 0 else math.inf,
        expected_cost=float(totals[i] / conf.size),
        fitted_on=conf.size,
    )


def mean_cost(
    decisions: Sequence[Action | str] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    cost_table: dict[str, float],
    in_options: Sequence[bool] | np.ndarray | None = None,
) -> float:
    """Mean cost per item of a routing under the cost model of `cost_thresholds`.

    Args:
        decisions: shape (n,), `Action` per item.
        correct: shape (n,), whether the top answer was right.
        cost_table: keys `act_wrong`, `ask`, `hand_over` (optional `act_right`,
            default 0, and `ask_wrong`, default `ask + hand_over`).
        in_options: optional shape (n,), whether the right label is among the options an
            ASK offers; an ASK costs `ask` when it is, `ask_wrong` when not. Defaults to
            `correct` (the top answer is the only option).
    """
    routed, corr, offered = _checked_outcome_inputs(decisions, correct, in_options)
    offered = corr if offered is None else offered
    costs = _check_cost_table(cost_table)
    acted, asked, _ = _route_masks(routed)
    per_item = np.select(
        [acted & corr, acted, asked & offered, asked],
        [costs["act_right"], costs["act_wrong"], costs["ask"], costs["ask_wrong"]],
        costs["hand_over"],
    )
    return float(per_item.mean())


def routing_summary(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    act_threshold: float,
    hand_over_threshold: float,
    cost_table: dict[str, float],
    in_options: Sequence[bool] | np.ndarray | None = None,
) -> dict[str, float]:
    """What two thresholds do to labelled data: shares, acted accuracy and mean cost.

    Routes with `route_by_thresholds` (a `hand_over_threshold` above
    `act_threshold` is an error) and summarises with `outcomes` and
    `mean_cost`. This is what a learner wants to see while moving the two
    thresholds and the costs: how the messages split, how often the acted ones are right,
    and what the whole routing costs per message. `in_options` is passed to `mean_cost`.

    Returns:
        dict with `share_act`, `share_ask`, `share_hand_over` (sum to 1),
        `act_accuracy` (NaN when nothing is acted on) and `cost_per_message`.
    """
    conf, corr = check_confidence_correct(confidence, correct)
    routed = route_by_thresholds(conf, act_threshold, hand_over_threshold)
    rates = outcomes(routed, corr)
    return {
        "share_act": rates["share_act"],
        "share_ask": rates["share_ask"],
        "share_hand_over": rates["share_hand_over"],
        "act_accuracy": rates["act_accuracy"],
        "cost_per_message": mean_cost(routed, corr, cost_table, in_options),
    }


def routing_sweep(
    confidence: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    act_thresholds: Sequence[float] | np.ndarray,
    hand_over_threshold: float,
    cost_table: dict[str, float],
    in_options: Sequence[bool] | np.ndarray | None = None,
) -> pd.DataFrame:
    """`routing_summary` for each act threshold, with the hand-over threshold held fixed.

    Act thresholds below `hand_over_threshold` would leave no valid ASK band, so they are
    raised to it (everything at or above the hand-over threshold is then acted on).

    Returns:
        DataFrame, one row per act threshold (in the order given), with column
        `act_threshold` and the keys of `routing_summary`.
    """
    rows = []
    for threshold in np.asarray(act_thresholds, dtype=float):
        act_threshold = max(float(threshold), hand_over_threshold)
        summary = routing_summary(confidence, correct, act_threshold, hand_over_threshold, cost_table, in_options)
        rows.append({"act_threshold": act_threshold, **summary})
    if not rows:
        raise ValueError("act_thresholds is empty: give at least one threshold")
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------
# Split conformal prediction
# ---------------------------------------------------------------------------

ConformalScore = Literal["lac", "aps"]
_SCORE_TOLERANCE = 1e-9
"""Scores within this of q_hat count as equal to it (float sums differ in the last bits)."""


def _check_probabilities(probabilities: object, name: str = "probabilities") -> np.ndarray:
    """Check a matrix of class probabilities, shape (n, k), whose rows sum to 1 (within 1e-6)."""
    array = np.asarray(probabilities, dtype=float)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array of shape (n, k), got shape {array.shape}")
    if not np.all(np.isfinite(array)) or array.min() < 0.0 or array.max() > 1.0:
        raise ValueError(f"{name} must hold finite probabilities in [0, 1]")
    row_sums = array.sum(axis=1)
    off = np.abs(row_sums - 1.0) > 1e-6
    if off.any():
        i = int(np.argmax(off))
        raise ValueError(f"each row of {name} must sum to 1, but row {i} sums to {row_sums[i].item()!r}")
    return array


def _conformal_scores(probabilities: np.ndarray, score: ConformalScore) -> np.ndarray:
    """Non-conformity score of every (row, label), shape (n, k); higher = less plausible.

    "lac": `1 - p[label]`.
    "aps" (deterministic): total probability of the labels at least as likely as this one,
    `sum_j p_j * [p_j >= p_label]`, i.e. the mass you must take, most likely first, to
    include the label. Tied labels get the same score, so they enter a set together.
    """
    if score == "lac":
        return 1.0 - probabilities
    ascending = np.sort(probabilities, axis=1)
    mass_from = np.cumsum(ascending[:, ::-1], axis=1)[:, ::-1]  # mass_from[i, m] = sum ascending[i, m:]
    scores = np.empty_like(probabilities)
    for i, row in enumerate(probabilities):
        scores[i] = mass_from[i, np.searchsorted(ascending[i], row, side="left")]
    return scores


class ConformalClassifier:
    """Split conformal prediction sets with coverage >= 1 - alpha.

    Fit on calibration rows (class probabilities and true labels): compute each row's
    score of its true label, then `q_hat` = the `ceil((n + 1)(1 - alpha))`-th smallest
    score. A new row's set holds every label whose score is `<= q_hat`. If calibration
    and test rows are exchangeable, the true label is in the set with probability at least
    `1 - alpha` (on average over rows, not per row). If `ceil((n + 1)(1 - alpha)) > n`
    there are too few calibration rows for this alpha and `q_hat = inf` (every label). The
    rank is `lib.guarantees.conformal_threshold`'s, counted from the other end (a lower score
    fits better here); a test keeps the two equal.

    Scores: "lac" (`1 - p[label]`; smallest sets on average, may be empty when no label
    is likely) or "aps" (cumulative mass down to the label; sets grow on hard rows). The
    APS version here is deterministic, without the usual random tie-breaking, and always
    includes the most likely label(s): otherwise a very confident row, whose top
    probability alone exceeds `q_hat`, would get an empty set. Both choices only add
    labels, so APS coverage is at least (rather than close to exactly) `1 - alpha`.

    Attributes (after fit): `q_hat_`, `n_classes_`, `fitted_on_`.
    """

    def __init__(self, alpha: float = 0.1, score: ConformalScore = "lac") -> None:
        check_unit_interval(alpha, "alpha", include_zero=False, include_one=False)
        if score not in ("lac", "aps"):
            raise ValueError(f"score must be 'lac' or 'aps', got {score!r}")
        self.alpha = alpha
        self.score = score

    def fit(self, probabilities: np.ndarray, labels: Sequence[int] | np.ndarray) -> "ConformalClassifier":
        """Compute `q_hat` from calibration rows; `probabilities` shape (n, k), `labels` shape (n,) in 0..k-1."""
        probs = _check_probabilities(probabilities)
        label_index = np.asarray(labels)
        if label_index.shape != (probs.shape[0],) or not np.issubdtype(label_index.dtype, np.integer):
            raise ValueError(
                f"labels must be {probs.shape[0]} integer class indices, "
                f"got dtype {label_index.dtype} and shape {label_index.shape}"
            )
        if label_index.min() < 0 or label_index.max() >= probs.shape[1]:
            raise ValueError(f"labels must lie in 0..{probs.shape[1] - 1} (columns of probabilities)")
        n = probs.shape[0]
        true_scores = np.sort(_conformal_scores(probs, self.score)[np.arange(n), label_index])
        # Small tolerance so that e.g. (n + 1) * 0.9 = 90.00000000000001 still ranks 90.
        rank = math.ceil((n + 1) * (1.0 - self.alpha) - 1e-9)
        self.q_hat_ = float(true_scores[rank - 1]) if rank <= n else math.inf
        self.n_classes_ = probs.shape[1]
        self.fitted_on_ = n
        return self

    def predict_sets(self, probabilities: np.ndarray) -> list[np.ndarray]:
        """Prediction set per row: int arrays of label indices, most probable first."""
        require_fitted(self, "q_hat_", "predict_sets")
        probs = _check_probabilities(probabilities)
        if probs.shape[1] != self.n_classes_:
            raise ValueError(
                f"probabilities must have {self.n_classes_} columns like the calibration data, got {probs.shape[1]}"
            )
        # Tolerance: APS scores are sums of floats, so the same mass can differ in the last bits
        # between rows (e.g. a label with probability 0 scores "1.0" as 0.9999999999999998).
        included = _conformal_scores(probs, self.score) <= self.q_hat_ + _SCORE_TOLERANCE
        if self.score == "aps":
            included |= probs == probs.max(axis=1, keepdims=True)
        order = np.argsort(-probs, axis=1, kind="stable")
        return [row_order[row_included[row_order]] for row_order, row_included in zip(order, included)]


def _check_sets(sets: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(sets) == 0:
        raise ValueError("sets is empty: need at least one prediction set")
    return [np.asarray(s) for s in sets]


def coverage(sets: Sequence[np.ndarray], labels: Sequence[int] | np.ndarray) -> float:
    """Share of rows whose true label is in their prediction set, in [0, 1]."""
    checked = _check_sets(sets)
    label_index = np.asarray(labels)
    if label_index.shape != (len(checked),):
        raise ValueError(f"labels must have one entry per set ({len(checked)}), got shape {label_index.shape}")
    return float(np.mean([label in s for s, label in zip(checked, label_index)]))


def mean_set_size(sets: Sequence[np.ndarray]) -> float:
    """Average number of labels per prediction set."""
    return float(np.mean([s.size for s in _check_sets(sets)]))


def set_router(sets: Sequence[np.ndarray], max_ask: int = 3) -> np.ndarray:
    """Route by set size: 1 label -> ACT, 2..max_ask -> ASK, empty or larger -> HAND_OVER.

    Returns an object array of `Action`, shape (n,). An empty set means no label
    is plausible enough (e.g. an out-of-scope request), hence HAND_OVER.
    """
    check_positive_int(max_ask, "max_ask")
    sizes = np.array([s.size for s in _check_sets(sets)])
    return _decision_array(np.where(sizes == 1, 2, ((sizes >= 2) & (sizes <= max_ask)).astype(int)))
