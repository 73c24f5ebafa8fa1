"""Tests for lib.logprobs, on hand-computed cases (no model is loaded)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.logprobs import log_softmax, perplexity, renormalize, sequence_confidence, top_k

# --- renormalize ---------------------------------------------------------------------


def test_renormalize_hand_computed_case():
    # Candidates A: -0.5, B: -1.5, C: -3.0; allowed {A, B}.
    # p(A) = e^-0.5 = 0.60653, p(B) = e^-1.5 = 0.22313, together 0.82966.
    # Renormalised: A = 0.60653 / 0.82966 = 0.73106, B = 0.22313 / 0.82966 = 0.26894
    # (= 1 / (1 + e^-1) and its complement, since A and B differ by 1 in log space).
    # Off-label mass = 1 - 0.82966 = 0.17034: C's e^-3.0 = 0.04979, plus 0.12055 that
    # went to tokens not among the candidates at all.
    probabilities, off_label = renormalize([("A", -0.5), ("B", -1.5), ("C", -3.0)], {"A", "B"})
    assert probabilities == pytest.approx({"A": 0.731059, "B": 0.268941}, abs=1e-6)
    assert off_label == pytest.approx(0.170339, abs=1e-6)


def test_renormalize_merges_whitespace_variants_and_sums_duplicates():
    # " A" and "A\n" mean "A"; the exact duplicate "B", "B" is summed too.
    # A: 0.3 + 0.2 = 0.5, B: 0.1 + 0.1 = 0.2, allowed total 0.7, off-label 0.3.
    candidates = [("A", math.log(0.3)), (" A", math.log(0.2)), ("B", math.log(0.1)), ("B", math.log(0.1))]
    probabilities, off_label = renormalize(candidates, ["A", "B"])
    assert probabilities == pytest.approx({"A": 0.5 / 0.7, "B": 0.2 / 0.7})
    assert off_label == pytest.approx(0.3)


def test_renormalize_lists_only_allowed_answers_that_appear_most_likely_first():
    probabilities, _ = renormalize([("C", -2.0), ("B", -1.0), ("x", -0.1)], ["A", "B", "C"])
    assert list(probabilities) == ["B", "C"]


@pytest.mark.parametrize(
    "candidates",
    [[("x", -0.1), ("y", -2.0)], [], [("A", -math.inf), ("x", -0.1)]],
    ids=["no allowed token", "no candidates", "allowed token with probability 0"],
)
def test_renormalize_without_allowed_evidence_invents_nothing(candidates):
    assert renormalize(candidates, ["A", "B"]) == ({}, 1.0)


def test_renormalize_clips_off_label_mass_at_zero():
    # Inconsistent inputs can put more than probability 1 on the allowed answers.
    _, off_label = renormalize([("A", math.log(0.7)), (" A", math.log(0.7))], ["A"])
    assert off_label == 0.0


def test_renormalize_stays_finite_for_tiny_probabilities():
    # e^-1000 underflows to 0 outside log space; the ratio A:B is still e^1.
    probabilities, off_label = renormalize([("A", -1000.0), ("B", -1001.0)], ["A", "B"])
    assert probabilities["A"] == pytest.approx(1 / (1 + math.exp(-1)))
    assert off_label == 1.0


@pytest.mark.parametrize(
    ("candidates", "allowed", "message"),
    [
        ([("A", -0.1)], [], "allowed is empty"),
        ([("A", -0.1)], [" A"], "surrounding whitespace"),
        ([("A", -0.1)], [""], "surrounding whitespace"),
        ([("A", float("nan"))], ["A"], "candidates contains NaN"),
        ([("A", 0.5)], ["A"], "candidates contains positive values"),
    ],
)
def test_renormalize_rejects_bad_arguments(candidates, allowed, message):
    with pytest.raises(ValueError, match=message):
        renormalize(candidates, allowed)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["A", " A", "B", "C", "x", " y"]), st.floats(min_value=-30, max_value=0)),
        min_size=1,
        max_size=8,
    )
)
def test_renormalize_returns_a_distribution(candidates):
    probabilities, off_label = renormalize(candidates, ["A", "B", "C"])
    assert 0.0 <= off_label <= 1.0
    if probabilities:
        assert sum(probabilities.values()) == pytest.approx(1.0)


# --- perplexity and sequence_confidence ---------------------------------------------


@pytest.mark.parametrize(
    ("token_probabilities", "expected"),
    [([1.0, 1.0], 1.0), ([0.5, 0.5], 2.0), ([0.25], 4.0), ([0.5, 0.125], 4.0)],
)
def test_perplexity_known_values(token_probabilities, expected):
    # [0.5, 0.125]: mean logprob = (log 0.5 + log 0.125) / 2 = log(0.0625) / 2 = -log 4.
    assert perplexity(np.log(token_probabilities)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("method", "expected"),
    [("mean", (0.5 + 0.125) / 2), ("geometric", 0.25), ("min", 0.125)],
)
def test_sequence_confidence_known_values(method, expected):
    # Token probabilities 0.5 and 0.125: mean 0.3125, geometric sqrt(0.0625) = 0.25, min 0.125.
    assert sequence_confidence(np.log([0.5, 0.125]), method) == pytest.approx(expected)


def test_geometric_confidence_is_inverse_perplexity_by_default():
    logprobs = [-0.1, -2.3, -0.7]
    assert sequence_confidence(logprobs) == pytest.approx(1 / perplexity(logprobs))


def test_tiny_positive_rounding_counts_as_certainty():
    assert sequence_confidence([1e-9, 0.0], "min") == 1.0
    assert perplexity([1e-9]) == 1.0


@pytest.mark.parametrize(
    ("token_logprobs", "message"),
    [
        ([], "token_logprobs is empty"),
        ([-0.1, float("nan")], "contains NaN"),
        ([-0.1, 0.2], "positive values"),
    ],
)
def test_sequence_scores_reject_bad_logprobs(token_logprobs, message):
    with pytest.raises(ValueError, match=message):
        perplexity(token_logprobs)
    with pytest.raises(ValueError, match=message):
        sequence_confidence(token_logprobs, "mean")


def test_sequence_confidence_rejects_unknown_method():
    with pytest.raises(ValueError, match="method must be one of"):
        sequence_confidence([-0.1], "median")


# --- log_softmax and top_k -----------------------------------------------------------


def test_log_softmax_known_values():
    # Logits 0 and log 3 give probabilities 1/4 and 3/4.
    assert log_softmax(np.array([0.0, math.log(3)])) == pytest.approx(np.log([0.25, 0.75]))


def test_log_softmax_does_not_overflow_and_works_per_row():
    result = log_softmax(np.array([[1000.0, 1000.0], [-1000.0, -1001.0]]))
    assert result[0] == pytest.approx(np.log([0.5, 0.5]))
    assert np.exp(result).sum(axis=-1) == pytest.approx([1.0, 1.0])


def test_log_softmax_keeps_masked_tokens_at_minus_infinity():
    result = log_softmax(np.array([0.0, -np.inf, 0.0]))
    assert result[1] == -np.inf
    assert result[[0, 2]] == pytest.approx(np.log([0.5, 0.5]))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(min_value=-50, max_value=50), min_size=1, max_size=20),
    st.floats(min_value=-100, max_value=100),
)
def test_log_softmax_sums_to_one_and_ignores_shifts(logits, shift):
    values = np.array(logits)
    assert np.exp(log_softmax(values)).sum() == pytest.approx(1.0)
    assert log_softmax(values + shift) == pytest.approx(log_softmax(values), abs=1e-9)


@pytest.mark.parametrize(
    ("logits", "message"),
    [
        ([], "logits is empty"),
        ([0.0, np.nan], "NaN"),
        ([-np.inf, -np.inf], "finite largest"),
        ([0.0, np.inf], "finite largest"),
    ],
)
def test_log_softmax_rejects_bad_logits(logits, message):
    with pytest.raises(ValueError, match=message):
        log_softmax(np.array(logits))


VOCAB = ["a", "b", "c", "d"]
LOGPROBS = np.log([0.1, 0.4, 0.1, 0.4])


def test_top_k_sorts_descending_and_keeps_token_order_on_ties():
    best = top_k(LOGPROBS, VOCAB, 3)
    assert [token for token, _ in best] == ["b", "d", "a"]
    assert [logprob for _, logprob in best] == pytest.approx(np.log([0.4, 0.4, 0.1]))


def test_top_k_accepts_a_lookup_function_and_k_beyond_the_vocabulary():
    looked_up = []

    def token_string(token_id: int) -> str:
        looked_up.append(token_id)
        return VOCAB[token_id].upper()

    assert [token for token, _ in top_k(LOGPROBS, token_string, 1)] == ["B"]
    assert looked_up == [1]
    assert len(top_k(LOGPROBS, VOCAB, 10)) == 4


@pytest.mark.parametrize(
    ("logprobs", "vocab", "k", "message"),
    [
        (LOGPROBS, VOCAB, 0, "k must be at least 1"),
        (LOGPROBS, VOCAB[:3], 2, "token_strings has 3 entries"),
        (np.stack([LOGPROBS, LOGPROBS]), VOCAB, 2, "one-dimensional"),
        (np.array([2.0, 1.0, 0.5, 0.1]), VOCAB, 2, "Are these logits"),
    ],
)
def test_top_k_rejects_bad_arguments(logprobs, vocab, k, message):
    with pytest.raises(ValueError, match=message):
        top_k(logprobs, vocab, k)


# --- at_temperature --------------------------------------------------------------------

from lib.logprobs import at_temperature  # noqa: E402


def test_at_temperature_one_renormalises_over_the_candidates():
    # p = 0.6, 0.2 (0.2 left to other tokens): at T=1 renormalised to 0.75, 0.25.
    probs = at_temperature([("A", math.log(0.6)), ("B", math.log(0.2))], 1.0)
    assert probs == pytest.approx({"A": 0.75, "B": 0.25})


def test_at_temperature_half_squares_the_ratio():
    # T=0.5 doubles each log-probability: 0.6^2 = 0.36, 0.2^2 = 0.04 -> 0.9, 0.1.
    probs = at_temperature([("B", math.log(0.2)), ("A", math.log(0.6))], 0.5)
    assert list(probs) == ["A", "B"]
    assert probs == pytest.approx({"A": 0.9, "B": 0.1})


def test_at_temperature_zero_collapses_to_one():
    probs = at_temperature([("A", math.log(0.4)), ("B", math.log(0.35)), ("C", -math.inf)], 0.0)
    assert probs == {"A": 1.0, "B": 0.0, "C": 0.0}


def test_at_temperature_sums_duplicates_and_rejects_bad_input():
    probs = at_temperature([("A", math.log(0.25)), ("A", math.log(0.25)), ("B", math.log(0.5))], 1.0)
    assert probs == pytest.approx({"A": 0.5, "B": 0.5})
    with pytest.raises(ValueError, match="temperature"):
        at_temperature([("A", -1.0)], -0.1)
    with pytest.raises(ValueError, match="empty"):
        at_temperature([], 1.0)
    with pytest.raises(ValueError, match="logits"):
        at_temperature([("A", 2.0)], 1.0)
