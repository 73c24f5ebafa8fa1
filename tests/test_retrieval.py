"""Tests for lib.retrieval: gates and routing.

They use the fake embedder, the tiny documents and the stub index of tests/test_indexes.py.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from lib.indexes import DenseIndex, chunk_by_heading
from lib.intervals import binomial_interval
from lib.retrieval import (RetrievalGate, Scope, boundary_scores, precision_recall_intervals, retrieval_features,
                           roc_points, route_many)
from lib.selective import Gate
from lib.actions import Action
from test_indexes import FixedIndex, fake_embed, sections, stub_chunk  # noqa: F401 (sections is a fixture)

# --------------------------------------------------------------------------- gates


def test_runner_up_is_from_a_different_section():
    chunks = [stub_chunk("a1", "s/a"), stub_chunk("a2", "s/a"), stub_chunk("ab", "s/a", "s/b"), stub_chunk("b", "s/b")]
    index = FixedIndex(chunks, {"q": [("a1", 0.80), ("a2", 0.79), ("ab", 0.75), ("b", 0.60)],
                                "lonely": [("a1", 0.7), ("a2", 0.6)]})
    feats = retrieval_features(index, ["q", "lonely"])
    row = feats.iloc[0]
    assert row["top_section_id"] == "s/a" and row["runner_up_section_id"] == "s/b"
    assert row["runner_up_score"] == pytest.approx(0.60)
    assert row["margin"] == pytest.approx(0.20)
    lonely = feats.iloc[1]  # no chunk of another section at all
    assert math.isnan(lonely["runner_up_score"]) and lonely["margin"] == math.inf


def test_gate_fit_predict():
    gate = Gate(target_precision=1.0).fit([0.2, 0.5, 0.7, 0.9], [False, False, True, True])
    assert gate.threshold_ == pytest.approx(0.7) and gate.reached_
    assert gate.predict([0.1, 0.7, 0.95, np.nan]).tolist() == [False, True, True, False]
    with pytest.raises(NotFittedError):
        Gate().predict([0.5])


def test_retrieval_gate_uses_margin_when_score_alone_is_not_enough():
    # The course's example: a high-scoring unanswerable question with a tiny margin.
    features = pd.DataFrame({
        "top_score": [0.70, 0.65, 0.60, 0.52, 0.551, 0.40, 0.30],
        "margin":    [0.10, 0.08, 0.07, 0.09, 0.029, 0.20, 0.01],
    })
    positive = np.array([True, True, True, True, False, False, False])
    gate = RetrievalGate(target_precision=1.0).fit(features, positive)
    assert gate.score_threshold_ == pytest.approx(0.52)
    assert gate.margin_threshold_ == pytest.approx(0.07)
    assert gate.dev_recall_ == 1.0 and gate.dev_precision_ == 1.0
    assert gate.predict(features).tolist() == positive.tolist()
    # where the score alone separates, the margin is not used
    easy = RetrievalGate(target_precision=1.0).fit(features.iloc[[0, 1, 2, 5, 6]], positive[[0, 1, 2, 5, 6]])
    assert easy.margin_threshold_ == -math.inf and easy.score_threshold_ == pytest.approx(0.60)
    none = RetrievalGate().fit(features, np.zeros(7, bool))
    assert not none.reached_ and not none.predict(features).any()


def test_roc_points_endpoints_and_monotone():
    roc = roc_points([0.1, 0.4, 0.35, 0.8], [False, False, True, True])
    assert (roc["fpr"].iloc[0], roc["tpr"].iloc[0]) == (0, 0)
    assert (roc["fpr"].iloc[-1], roc["tpr"].iloc[-1]) == (1, 1)
    assert roc["fpr"].is_monotonic_increasing and roc["tpr"].is_monotonic_increasing
    assert roc.loc[roc["threshold"] == 0.8, "precision"].item() == 1.0
    with pytest.raises(ValueError):
        roc_points([0.1, 0.2], [True, True])


def test_precision_recall_intervals_are_exact_binomial():
    pred = np.array([True] * 8 + [False] * 12)
    positive = np.array([True] * 6 + [False] * 2 + [True] * 4 + [False] * 8)
    table = precision_recall_intervals(pred, positive)
    assert table.loc["precision", "value"] == pytest.approx(6 / 8)
    assert table.loc["recall", "value"] == pytest.approx(6 / 10)
    assert tuple(table.loc["precision", ["value", "low", "high"]]) == binomial_interval(6, 8)
    assert tuple(table.loc["recall", ["value", "low", "high"]]) == binomial_interval(6, 10)
    assert table["support"].tolist() == [8, 10]
    nothing = precision_recall_intervals(np.zeros(20, bool), positive)
    assert math.isnan(nothing.loc["precision", "value"]) and nothing.loc["recall", "value"] == 0


def test_all_accepted_right_is_not_a_point_interval():
    table = precision_recall_intervals(np.ones(7, bool), np.ones(7, bool))
    assert table.loc["precision", "value"] == 1.0
    assert table.loc["precision", "low"] == pytest.approx(0.025 ** (1 / 7))
    assert table.loc["precision", "low"] < 0.6


def test_boundary_scores():
    examples = ["thesis committee members", "exam deadline second year"]
    s = boundary_scores(["thesis committee members", "write a poem about the sea"], examples, fake_embed)
    assert s[0] == pytest.approx(1.0) and s[1] < 0.2 + 1e-9
    np.testing.assert_allclose(s, boundary_scores(["thesis committee members", "write a poem about the sea"],
                                                  fake_embed(examples), fake_embed))


# --------------------------------------------------------------------------- routing


@pytest.fixture(scope="module")
def routing_setup(sections):
    index = DenseIndex(chunk_by_heading(sections), fake_embed)
    examples = ["who sits on the thesis committee", "when is the qualifying exam deadline",
                "how do I get travel funding", "how do I connect to the VPN", "printer setup"]
    return Scope(index, examples)


ONE_ROW = pd.DataFrame({"top_score": [0.5], "margin": [0.1]})
"""A fixed-threshold gate is fitted too (it measures `reached_`); one row is enough here."""


def test_route_each_path(routing_setup):
    scope = routing_setup
    boundary = Gate(threshold=0.2).fit([0.2], [True])
    retrieval = RetrievalGate(score_threshold=0.2, margin_threshold=0.05).fit(ONE_ROW, [True])

    v = route_many(["write a poem about the ocean"], boundary, retrieval, scope)[0]
    assert v.route is Action.OUT_OF_SCOPE and v.failed_gate == "boundary" and v.sources == ()
    assert "NOT from the corpus" in v.message

    v = route_many(["who sits on the thesis committee advisor chairs"], boundary, retrieval, scope)[0]
    assert v.route is Action.ACT and v.failed_gate is None
    assert v.sources[0] == "handbook/thesis-committee" and len(v.sources) == 3
    assert v.top_score >= 0.2 and v.margin >= 0.05 and v.explain().startswith("act:")

    # two words from each of two sections: the score clears its bar, the margin does not
    v = route_many(["qualifying exams conference grants"], boundary, retrieval, scope)[0]
    assert v.route is Action.ASK and v.failed_gate == "retrieval_margin"
    assert v.top_score >= 0.2 and v.margin < 0.05 and v.top_section_id != v.runner_up_section_id and v.sources == ()

    strict = RetrievalGate(score_threshold=0.99, margin_threshold=0.0).fit(ONE_ROW, [True])
    v = route_many(["how do I connect to the VPN"], boundary, strict, scope)[0]
    assert v.route is Action.ASK and v.failed_gate == "retrieval_score"

    with pytest.raises(NotFittedError):
        route_many(["x"], Gate(), retrieval, scope)


def test_gate_tradeoff_counts_routes_precision_and_recall():
    from lib.retrieval import gate_tradeoff

    types = ["answerable", "answerable", "answerable", "unanswerable", "out_of_scope", "out_of_scope"]
    passed = np.array([True, True, True, True, True, False])
    features = pd.DataFrame({"top_score": [0.9, 0.7, 0.4, 0.8, 0.6], "margin": [0.2, 0.02, 0.3, 0.1, 0.1]})
    summary, routes = gate_tradeoff(types, passed, features, score_threshold=0.5, margin_threshold=0.05)
    # grounded: rows 0 (answerable), 3 (unanswerable), 4 (out of scope that passed the boundary)
    assert summary["grounded"] == 3
    assert summary["precision"] == pytest.approx(1 / 3)
    assert summary["recall"] == pytest.approx(1 / 3)
    assert routes.loc["answerable"].tolist() == [1, 2, 0]
    assert routes.loc["unanswerable"].tolist() == [1, 0, 0]
    assert routes.loc["out_of_scope"].tolist() == [1, 0, 1]
    assert routes.to_numpy().sum() == len(types)
    # stricter thresholds ground nothing: precision is undefined, recall 0
    summary, routes = gate_tradeoff(types, passed, features, score_threshold=0.95, margin_threshold=0.0)
    assert summary["grounded"] == 0 and np.isnan(summary["precision"]) and summary["recall"] == 0
    assert routes["act"].sum() == 0


def test_gate_tradeoff_matches_a_fitted_gate():
    from lib.retrieval import RetrievalGate, gate_tradeoff

    rng = np.random.default_rng(0)
    features = pd.DataFrame({"top_score": rng.uniform(0.2, 0.9, 40), "margin": rng.uniform(0, 0.2, 40)})
    answerable = (features["top_score"] + rng.normal(0, 0.1, 40)) > 0.55
    gate = RetrievalGate(target_precision=0.8).fit(features, answerable)
    types = np.where(answerable, "answerable", "unanswerable")
    summary, _ = gate_tradeoff(types, np.ones(40, bool), features, gate.score_threshold_, gate.margin_threshold_)
    assert summary["precision"] == pytest.approx(gate.dev_precision_)
    assert summary["recall"] == pytest.approx(gate.dev_recall_)


def test_gate_tradeoff_checks_its_inputs():
    from lib.retrieval import gate_tradeoff

    features = pd.DataFrame({"top_score": [0.5], "margin": [0.1]})
    with pytest.raises(ValueError, match="feature rows"):
        gate_tradeoff(["answerable", "answerable"], [True, True], features, 0.5, 0.0)
    with pytest.raises(ValueError, match="unknown question types"):
        gate_tradeoff(["answerble"], [True], features, 0.5, 0.0)
