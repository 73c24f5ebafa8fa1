"""Tests for lib.code_steps: reading group and intent probabilities at the right step."""
from __future__ import annotations

import math

import pytest

from lib.code_steps import read_code
from lib.backends.protocol import TokenLogprob
from lib.logprobs import renormalize

CODES = ["A-A", "A-B", "B-A", "B-B", "B-C"]


def _step(token: str, top: dict[str, float]) -> TokenLogprob:
    return TokenLogprob(token, math.log(top[token]) if token in top else -5.0,
                        tuple((t, math.log(p)) for t, p in top.items()))


def test_two_token_spelling_reads_intent_at_step_two():
    tokens = [_step("B", {"B": 0.6, "A": 0.2, "The": 0.2}),
              _step("-C", {"-C": 0.5, "-A": 0.3, "-": 0.1, "-Z": 0.1})]
    reading = read_code(tokens, CODES)
    assert reading.code == "B-C" and reading.spelling == ("B", "-C") and reading.intent_step == 2
    assert reading.p_group == pytest.approx(0.75)          # 0.6 / (0.6 + 0.2)
    assert reading.group_off_label == pytest.approx(0.2)   # "The" is forbidden
    assert reading.p_intent == pytest.approx(0.5 / 0.8)    # "-" and "-Z" are not intents of B
    assert reading.intent_off_label == pytest.approx(0.2)
    assert reading.confidence == pytest.approx(0.75 * 0.625)


def test_three_token_spelling_reads_intent_at_step_three():
    tokens = [_step("A", {"A": 0.9, "B": 0.1}),
              _step("-", {"-": 0.7, "-B": 0.3}),
              _step("B", {"B": 0.4, "A": 0.4, "C": 0.2})]
    reading = read_code(tokens, CODES)
    assert reading.intent_step == 3
    assert reading.intent_probabilities == pytest.approx({"B": 0.5, "A": 0.5})  # "C" is no code of group A
    assert reading.intent_off_label == pytest.approx(0.2)


def test_missing_chosen_letter_gives_zero():
    tokens = [_step("A", {"B": 0.9, "A": 0.1}), _step("-B", {"-A": 0.8, "x": 0.2})]
    assert read_code(tokens, CODES).p_intent == 0.0


def test_rejects_invalid_replies():
    with pytest.raises(ValueError, match="not one of the codes"):
        read_code([_step("C", {"C": 1.0}), _step("-A", {"-A": 1.0})], CODES)
    with pytest.raises(ValueError, match="top_logprobs"):
        read_code([TokenLogprob("A", -0.1), TokenLogprob("-A", -0.1)], CODES)


def test_tokens_with_a_space_count_as_the_letter_they_spell():
    # one rule with lib.logprobs.renormalize: " B" is the answer B spelled with a space, so its
    # probability is B's, not off-label mass; read_code and the deciders read a reply the same way
    tokens = [_step("A", {"A": 0.5, " B": 0.3, "B": 0.2}), _step("-A", {"-A": 0.4, " -B": 0.6})]
    reading = read_code(tokens, CODES)
    assert reading.group_probabilities == pytest.approx({"A": 0.5, "B": 0.5})
    assert reading.group_off_label == pytest.approx(0.0, abs=1e-12)
    assert reading.intent_probabilities == pytest.approx({"B": 0.6, "A": 0.4})
    assert reading.intent_off_label == pytest.approx(0.0, abs=1e-12)
    assert reading.p_group == pytest.approx(renormalize(list(tokens[0].top), ["A", "B"])[0]["A"])
