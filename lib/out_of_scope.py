"""Out-of-scope decisions: answer "none of our intents" when a message's in-scope score is low.

A decider picks one of the known intents for every message, so on its own it can never say
that a message belongs to none of them. An *in-scope score* (higher = more likely to be one
of the known intents) turns it into a decision with a way out: below a threshold the answer
is `Action.OUT_OF_SCOPE` (the workbook's one word for it, `lib.actions.Action`), above it the
decider's intent stands. `lib.datasets.OUT_OF_SCOPE` ("oos") is only CLINC150's label for such
messages in the data, which a decider offered "none of these" may also answer.

The threshold is fitted on calibration messages that are in scope: keep a chosen share of
them (e.g. 95%) above it. That promise is about the in-scope messages only; how many
out-of-scope messages fall below it is measured on test, never promised.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lib.checks import check_scores, check_unit_interval
from lib.datasets import OUT_OF_SCOPE
from lib.actions import Action

__all__ = [
    "keep_threshold", "decide_scope", "scope_report",
]


def keep_threshold(in_scope_scores: Sequence[float] | np.ndarray, keep: float = 0.95) -> float:
    """The score that keeps the share `keep` of in-scope messages at or above it.

    `in_scope_scores`: shape (n,), the scores of in-scope calibration messages only.
    Returns the (1 - keep) quantile of those scores (numpy's linear interpolation), so that
    about `keep` of them are not flagged. `keep` must be in (0, 1].
    """
    check_unit_interval(keep, "keep", include_zero=False)
    return float(np.quantile(check_scores(in_scope_scores, "in_scope_scores"), 1.0 - keep))


def decide_scope(predictions: Sequence[str], scores: Sequence[float] | np.ndarray, threshold: float) -> np.ndarray:
    """The decider's intents, with `Action.OUT_OF_SCOPE` wherever the in-scope score is below `threshold`.

    `predictions`: shape (n,), the intent each message was given; `scores`: shape (n,), the
    in-scope score of each message. Returns an object array of shape (n,).
    """
    values = check_scores(scores, "scores")
    decided = np.asarray(predictions, dtype=object)
    if decided.shape != values.shape:
        raise ValueError(f"predictions and scores must have the same length, got {decided.shape} and {values.shape}")
    decided = decided.copy()
    decided[values < threshold] = Action.OUT_OF_SCOPE  # assigned, so the element stays an Action
    return decided


def scope_report(labels: Sequence[str], decided: Sequence[str]) -> dict[str, float | int]:
    """How a decision with an out-of-scope answer did, split by what the messages really are.

    `labels`: shape (n,), the gold intents, the data's `lib.datasets.OUT_OF_SCOPE` ("oos") for
    messages that fit none; `decided`: shape (n,), the answers (from `decide_scope`), where
    `Action.OUT_OF_SCOPE`, or "oos" from a decider offered "none of these", flags a message. Returns:
    - "in scope", "out of scope": how many messages of each kind;
    - "in-scope accuracy": the share of in-scope messages given their right intent (a flagged
      in-scope message counts as wrong);
    - "in-scope flagged": the share of in-scope messages flagged out of scope;
    - "out-of-scope recall": the share of out-of-scope messages flagged out of scope;
    - "accuracy": the share of all messages answered right, a flag being the right answer for an
      out-of-scope message.
    A share over no messages is NaN.
    """
    gold = np.asarray(labels, dtype=object)
    answers = np.asarray(decided, dtype=object)
    if gold.shape != answers.shape or gold.ndim != 1 or gold.size == 0:
        raise ValueError(f"labels and decided must be non-empty and of the same length, got {gold.shape} and {answers.shape}")
    in_scope = gold != OUT_OF_SCOPE
    flagged = (answers == Action.OUT_OF_SCOPE) | (answers == OUT_OF_SCOPE)
    right = (answers == gold) | (flagged & ~in_scope)

    def share(mask: np.ndarray, of: np.ndarray) -> float:
        return float(mask[of].mean()) if of.any() else float("nan")

    return {"in scope": int(in_scope.sum()), "out of scope": int((~in_scope).sum()),
            "in-scope accuracy": share(right, in_scope), "in-scope flagged": share(flagged, in_scope),
            "out-of-scope recall": share(flagged, ~in_scope), "accuracy": float(right.mean())}
