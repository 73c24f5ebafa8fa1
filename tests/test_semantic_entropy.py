"""Tests for lib.semantic_entropy: hand-computed entropies, toy clusterings, the gold rule."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lib.semantic_entropy import (LLMEntailment, bidirectional, cascade_confidence, cluster_by_embedding,
                                  cluster_by_meaning, discrete_semantic_entropy, max_entropy, rand_agreement)
from lib.text import matches_gold, normalize_answer


def test_entropy_of_one_cluster_is_zero():
    assert discrete_semantic_entropy([0, 0, 0, 0, 0]) == 0.0


def test_entropy_hand_computed():
    # shares 3/5 and 2/5: -(0.6 ln 0.6 + 0.4 ln 0.4) = 0.67301...
    assert discrete_semantic_entropy([0, 1, 0, 1, 0]) == pytest.approx(0.6730116670092565)
    # four answers in two equal clusters: ln 2
    assert discrete_semantic_entropy([3, 3, 7, 7]) == pytest.approx(math.log(2))


def test_entropy_all_different_is_log_n():
    assert discrete_semantic_entropy([0, 1, 2, 3, 4]) == pytest.approx(max_entropy(5))


def test_entropy_rejects_empty():
    with pytest.raises(ValueError):
        discrete_semantic_entropy([])


def _fake_entails(pairs_that_entail: set[tuple[str, str]]):
    calls = []

    def entails(a: str, b: str) -> bool:
        calls.append((a, b))
        return (a, b) in pairs_that_entail

    return entails, calls


def test_cluster_by_meaning_with_fake_entailment():
    answers = ["48 credits", "forty-eight credits", "36 credits", "48 credits.", "thirty-six"]
    same = {("48 credits", "forty-eight credits"), ("forty-eight credits", "48 credits"),
            ("36 credits", "thirty-six"), ("thirty-six", "36 credits")}
    entails, calls = _fake_entails(same)
    assert cluster_by_meaning(answers, bidirectional(entails)) == [0, 0, 1, 0, 1]
    # "48 credits." equals the representative after normalisation: no call for it
    assert ("48 credits", "48 credits.") not in calls


def test_cluster_compares_only_with_representatives():
    # b entails a's cluster representative, c only entails b: c must start a new cluster
    entails, calls = _fake_entails({("a", "b"), ("b", "a"), ("b", "c"), ("c", "b")})
    assert cluster_by_meaning(["a", "b", "c"], bidirectional(entails)) == [0, 0, 1]
    assert calls == [("a", "b"), ("b", "a"), ("a", "c")]


def test_bidirectional_needs_both_directions():
    entails, _ = _fake_entails({("in 2019", "in the 2010s")})
    same = bidirectional(entails)
    assert not same("in 2019", "in the 2010s")
    assert cluster_by_meaning(["in 2019", "in the 2010s"], same) == [0, 1]


def test_cluster_by_embedding_threshold():
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 2.0]])
    assert cluster_by_embedding(vectors, threshold=0.95) == [0, 0, 1, 1]
    assert cluster_by_embedding(vectors, threshold=0.9999) == [0, 1, 2, 3]
    assert cluster_by_embedding(vectors, threshold=-1.0) == [0, 0, 0, 0]


def test_cluster_by_embedding_rejects_bad_input():
    with pytest.raises(ValueError):
        cluster_by_embedding(np.zeros(3), 0.5)
    with pytest.raises(ValueError):
        cluster_by_embedding(np.ones((2, 2)), 1.5)
    with pytest.raises(ValueError):
        cluster_by_embedding(np.array([[1.0, 0.0], [0.0, 0.0]]), 0.5)


def test_rand_agreement():
    assert rand_agreement([0, 0, 1], [5, 5, 2]) == 1.0
    # pairs (0,1) (0,2) (1,2): same/diff/diff vs same/same/same -> agree on 1 of 3
    assert rand_agreement([0, 0, 1], [0, 0, 0]) == pytest.approx(1 / 3)
    assert rand_agreement([0], [0]) == 1.0
    with pytest.raises(ValueError):
        rand_agreement([0, 1], [0])


@pytest.mark.parametrize("answer, gold, expected", [
    ("48 credits in total", "48 credits", True),
    ("The total is 1200.", "1,200", True),
    ("3 weeks", "three weeks", True),
    ("148 credits", "48 credits", False),
    ("Room 4.112.", "Room 4.112", True),
    ("B+", "B+", True),
    ("B", "B+", False),
    ("four or more", "at least four", False),
    ("GS-01", "GS-01", True),
])
def test_matches_gold(answer, gold, expected):
    assert matches_gold(answer, gold) is expected


def test_normalize_answer():
    assert normalize_answer("  Thirty-Six, credits!") == "36 credits"
    assert normalize_answer("3.0.") == "3.0"
    with pytest.raises(ValueError):
        matches_gold("anything", "?!")


def test_llm_entailment_compares_yes_and_no_and_counts_cost(fake_llm):
    llm = fake_llm(scores={"yes": -0.1, "no": -2.5}, seconds=0.25)
    entails = LLMEntailment(llm, "How many credits?")
    assert entails("48", "forty-eight")
    assert entails.calls == 1 and entails.seconds == pytest.approx(0.25)
    assert "How many credits?" in llm.probes[0]["messages"][-1]["content"]
    assert not LLMEntailment(fake_llm(scores={"yes": -3.0, "no": -0.1}), "q")("a", "b")


def test_llm_entailment_on_a_server_that_reports_only_one_of_the_two_words(fake_llm):
    """A word outside a server's top candidates is less likely than every one of them."""
    assert LLMEntailment(fake_llm(scores={"yes": -0.5}), "q")("a", "b")
    assert not LLMEntailment(fake_llm(scores={"no": -0.5}), "q")("a", "b")
    with pytest.raises(ValueError, match="neither 'yes' nor 'no'.*embedded backend"):
        LLMEntailment(fake_llm(), "q")("a", "b")


def test_cascade_confidence_escalates_only_below_the_threshold():
    calibrated = [0.95, 0.4, 0.8, 0.0]
    semantic = [float("nan"), 1.0, 0.5, 0.0]  # the first answer never paid for samples
    combined = cascade_confidence(calibrated, semantic, threshold=0.8)
    assert combined[0] == pytest.approx(0.95)
    assert combined[2] == pytest.approx(0.8)  # at the threshold: trusted, the samples are not read
    assert combined[1] == pytest.approx(0.8 * (0.4 / 0.8 + 1.0) / 2)
    assert combined[3] == pytest.approx(0.0)
    assert (combined[[1, 3]] < 0.8).all()


def test_cascade_confidence_rejects_bad_input():
    with pytest.raises(ValueError):
        cascade_confidence([0.5], [float("nan")], threshold=0.8)  # escalated, but no semantic value
    with pytest.raises(ValueError):
        cascade_confidence([0.5, 0.2], [0.5], threshold=0.8)
    with pytest.raises(ValueError):
        cascade_confidence([0.5], [0.5], threshold=0.0)
