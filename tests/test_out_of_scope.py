"""Tests for lib.out_of_scope: the keep threshold, the decision, the report."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lib.datasets import OUT_OF_SCOPE
from lib.out_of_scope import decide_scope, keep_threshold, scope_report
from lib.actions import Action


def test_keep_threshold_keeps_the_asked_share_of_in_scope_scores():
    scores = np.arange(1, 101) / 100  # 0.01 .. 1.00
    threshold = keep_threshold(scores, keep=0.95)
    assert threshold == pytest.approx(np.quantile(scores, 0.05))
    assert (scores >= threshold).mean() == pytest.approx(0.95, abs=0.01)
    assert keep_threshold(scores, keep=1.0) == pytest.approx(0.01)


@pytest.mark.parametrize("keep", [0.0, -0.1, 1.5])
def test_keep_threshold_rejects_a_share_outside_zero_one(keep):
    with pytest.raises(ValueError, match="keep"):
        keep_threshold([0.5, 0.6], keep=keep)


@pytest.mark.parametrize("scores", [[], [[0.1, 0.2]], [0.3, float("nan")]])
def test_keep_threshold_rejects_empty_nested_or_nan_scores(scores):
    with pytest.raises(ValueError, match="in_scope_scores"):
        keep_threshold(scores)


def test_decide_scope_flags_exactly_the_scores_below_the_threshold():
    decided = decide_scope(["a", "b", "c", "d"], [0.2, 0.5, 0.49, 0.9], threshold=0.5)
    assert decided.tolist() == [Action.OUT_OF_SCOPE, "b", Action.OUT_OF_SCOPE, "d"]
    assert decided[0] is Action.OUT_OF_SCOPE  # the one action vocabulary, not the data's "oos" label


def test_decide_scope_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="same length"):
        decide_scope(["a", "b"], [0.1], threshold=0.5)


def test_scope_report_by_hand():
    labels = ["a", "b", "c", OUT_OF_SCOPE, OUT_OF_SCOPE]
    decided = ["a", Action.OUT_OF_SCOPE, "x", OUT_OF_SCOPE, "a"]  # decide_scope's flag, and a decider's "oos"
    report = scope_report(labels, decided)
    assert report["in scope"] == 3 and report["out of scope"] == 2
    assert report["in-scope accuracy"] == pytest.approx(1 / 3)  # only "a"; the flagged "b" counts as wrong
    assert report["in-scope flagged"] == pytest.approx(1 / 3)
    assert report["out-of-scope recall"] == pytest.approx(1 / 2)
    assert report["accuracy"] == pytest.approx(2 / 5)


def test_scope_report_counts_decide_scopes_flags():
    labels = ["a", "b", OUT_OF_SCOPE, OUT_OF_SCOPE]
    decided = decide_scope(["a", "b", "a", "b"], [0.9, 0.9, 0.1, 0.9], threshold=0.5)
    report = scope_report(labels, decided)
    assert report["out-of-scope recall"] == pytest.approx(1 / 2) and report["accuracy"] == pytest.approx(3 / 4)


def test_scope_report_without_out_of_scope_messages_has_no_recall():
    report = scope_report(["a", "b"], ["a", "a"])
    assert report["out of scope"] == 0 and math.isnan(report["out-of-scope recall"])
    assert report["in-scope accuracy"] == pytest.approx(0.5)


def test_scope_report_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="same length"):
        scope_report(["a"], ["a", "b"])
