"""lib.asking: the grammars and readers of asked confidences, the category map, P(True)'s renormalisation."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from lib.asking import (ask_all, ask_true, asking_messages, CATEGORIES, CATEGORY_GRAMMAR, CategoryCalibrator,
                        NUMBER_GRAMMAR, p_true, paired_metrics, read_category, read_number, true_messages,
                        TRUE_QUESTION)
from lib.saved_runs.asking import stratified_sample
from lib.calibration import ece
from lib.grammar import check_grammar
from lib.selective import auroc

TASK = [{"role": "system", "content": "Answer from the section."}, {"role": "user", "content": "When is it due?"}]


# --------------------------------------------------------------------------- grammars and readers


def test_grammars_parse_with_llama_cpp():
    check_grammar(NUMBER_GRAMMAR)
    check_grammar(CATEGORY_GRAMMAR)


@pytest.mark.parametrize("reply, number", [("0", 0), ("7", 7), ("42", 42), ("95", 95), ("100", 100), (" 80\n", 80)])
def test_read_number_accepts_every_whole_number_from_0_to_100(reply, number):
    assert read_number(reply) == number


@pytest.mark.parametrize("reply", ["101", "007", "95%", "", "ninety", "-1", "1000", "9 5", "50.5"])
def test_read_number_refuses_what_the_grammar_cannot_produce(reply):
    with pytest.raises(ValueError, match="NUMBER_GRAMMAR"):
        read_number(reply)


def test_read_category_accepts_only_the_closed_list():
    assert [read_category(f" {word}\n") for word in CATEGORIES] == list(CATEGORIES)
    with pytest.raises(ValueError, match="CATEGORY_GRAMMAR"):
        read_category("Certain")


def test_the_number_grammar_allows_exactly_0_to_100(embedded):
    """llama.cpp's own grammar sampler, token by token over the model's digits: every number from 0
    to 100 can be written and ended, and nothing else (a leading zero, 101, a fourth digit) can."""
    import llama_cpp

    from lib.grammar import GrammarConstraint

    names = {embedded.single_token_id(str(d)): str(d) for d in range(10)}
    names[embedded.token_ids("<|im_end|>", special=True)[-1]] = "end"
    ids = np.array(list(names), dtype=np.int32)

    def allowed_after(text: str) -> set[str]:
        constraint = GrammarConstraint(llama_cpp, embedded._vocab, NUMBER_GRAMMAR)
        try:
            for char in text:
                constraint.accept(embedded.single_token_id(char))
            masked = constraint.mask_subset(ids, np.zeros(len(ids), dtype=np.float32))
        finally:
            constraint.close()
        return {names[int(token)] for token, m in zip(ids, masked) if np.isfinite(m)}

    assert allowed_after("") == {str(d) for d in range(10)}
    assert allowed_after("0") == {"end"}
    assert allowed_after("7") == {str(d) for d in range(10)} | {"end"}
    assert allowed_after("10") == {"0", "end"}
    assert allowed_after("42") == {"end"}
    assert allowed_after("100") == {"end"}


# --------------------------------------------------------------------------- prompts


def test_asking_messages_keep_the_system_message_and_put_the_rest_in_one_last_turn():
    asked = asking_messages(TASK, "31 October", "How sure are you?")
    assert asked[0] == TASK[0] and len(asked) == 2
    assert asked[1] == {"role": "user",
                        "content": "Question: When is it due?\nYour answer: 31 October\n\nHow sure are you?"}


def test_true_messages_show_the_answer_as_a_proposal():
    shown = true_messages(TASK, "31 October", shown_as="Customer message")[-1]["content"]
    assert shown == f"Customer message: When is it due?\nProposed answer: 31 October\n\n{TRUE_QUESTION}"


def test_asking_needs_the_question_last():
    with pytest.raises(ValueError, match="end with the user's question"):
        asking_messages([TASK[0]], "x", "How sure are you?")


# --------------------------------------------------------------------------- P(True)


def test_p_true_renormalises_over_yes_and_no_summing_both_spellings():
    scores = {"Yes": math.log(0.6), "yes": math.log(0.1), "No": math.log(0.2), "no": math.log(0.05)}
    result = p_true(scores)
    assert result.probability == pytest.approx(0.7 / 0.95)
    assert result.off_label_mass == pytest.approx(0.05)
    assert not result.bounded


def test_p_true_is_the_share_among_the_two_answers_not_the_raw_probability():
    """Pitfall: most probability elsewhere (off-label) must not lower P(Yes) among Yes and No."""
    result = p_true({"Yes": math.log(0.02), "No": math.log(0.01)})
    assert result.probability == pytest.approx(2 / 3)
    assert result.off_label_mass == pytest.approx(0.97)


def test_p_true_never_inflates_an_answer_whose_rival_was_not_reported():
    """Pitfall: a server's top candidates hold Yes but not No. Renormalising over Yes alone would give
    1.0; No is counted at the lowest reported candidate instead, the most it can have."""
    result = p_true({"Yes": math.log(0.5)}, lowest_candidate=math.log(0.1))
    assert result.probability == pytest.approx(0.5 / 0.6)
    assert result.bounded
    assert math.isnan(p_true({"Yes": math.log(0.5)}).probability)


def test_p_true_of_an_unreported_yes_is_zero_and_of_nothing_nan():
    assert p_true({"No": math.log(0.4)}, lowest_candidate=math.log(0.01)).probability == 0.0
    nothing = p_true({}, lowest_candidate=math.log(0.01))
    assert math.isnan(nothing.probability) and nothing.off_label_mass == 1.0


# --------------------------------------------------------------------------- the category map


def test_category_calibrator_maps_each_word_to_its_share_of_right_answers():
    words = ["certain"] * 4 + ["likely"] * 2 + ["guessing"]
    right = [True, True, True, False, True, False, False]
    calibrator = CategoryCalibrator().fit(words, right)
    assert calibrator.counts_["certain"] == (4, 3)
    np.testing.assert_allclose(calibrator.predict(["certain", "likely", "guessing"]), [0.75, 0.5, 0.0])
    assert calibrator.predict(["unsure"])[0] == pytest.approx(4 / 7)  # never said: the overall share


def test_category_calibrator_refuses_unknown_words_and_predicting_before_fit():
    with pytest.raises(ValueError, match="not fitted"):
        CategoryCalibrator().predict(["certain"])
    with pytest.raises(ValueError, match="sure"):
        CategoryCalibrator().fit(["sure"], [True])


# --------------------------------------------------------------------------- measuring


def test_paired_metrics_agree_with_the_metrics_and_pair_the_resamples():
    rng = np.random.default_rng(0)
    correct = rng.random(200) < 0.6
    token = np.clip(correct * 0.3 + rng.random(200) * 0.7, 0, 1)
    noise = rng.random(200)
    table = paired_metrics({"token": token, "noise": noise, "same": token.copy()}, correct,
                           {"ECE": ece, "AUROC": auroc}, reference="token", n=200)
    value = table.set_index(["confidence", "metric"])
    assert value.loc[("noise", "AUROC"), "value"] == pytest.approx(auroc(noise, correct))
    assert value.loc[("token", "ECE"), "value"] == pytest.approx(ece(token, correct))
    same = value.loc[("same", "AUROC")]
    assert same["difference"] == same["diff_low"] == same["diff_high"] == 0.0  # identical on every resample
    assert value.loc[("noise", "AUROC"), "diff_high"] < 0  # the informative confidence wins, paired


def test_paired_metrics_name_a_missing_reference():
    with pytest.raises(ValueError, match="reference 'token'"):
        paired_metrics({"x": np.array([0.1, 0.9])}, [False, True], {"AUROC": auroc}, reference="token")


def test_stratified_sample_keeps_every_label_share():
    labels = [f"label{k}" for k in range(77) for _ in range(40)]
    chosen = stratified_sample(labels, 1000, seed=27)
    assert len(chosen) == 1000 and chosen == sorted(set(chosen))
    assert set(Counter(labels[p] for p in chosen).values()) <= {12, 13}
    assert chosen == stratified_sample(labels, 1000, seed=27)


# --------------------------------------------------------------------------- on the model


@pytest.mark.slow  # three requests on the embedded model
def test_ask_all_on_the_embedded_model(embedded):
    task = [{"role": "system", "content": "Answer from the section: the thesis is due on 31 October."},
            {"role": "user", "content": "When is the thesis due?"}]
    asked = ask_all(embedded, task, "31 October")
    assert 0 <= asked.number <= 100
    assert asked.category in CATEGORIES
    assert 0.0 <= asked.p_true.probability <= 1.0 and not asked.p_true.bounded
    assert set(asked.p_true.scores) == {"Yes", "No", "yes", "no"}
    assert min(asked.number_seconds, asked.category_seconds, asked.p_true_seconds) > 0


def test_p_true_on_a_real_server_agrees_with_the_embedded_model(served, embedded):
    """The asking path make test keeps on a real server: P(True) read from the candidates
    llama_cpp.server reports (one forward pass each), as the embedded model computes it; the
    grammar-constrained number and word are checked on a server by the test below (slow) and by
    test_llm's grammar tests."""
    task = [{"role": "system", "content": "Answer from the section: the thesis is due on 31 October."},
            {"role": "user", "content": "When is the thesis due?"}]
    (remote, _), (local, _) = ask_true(served, task, "31 October"), ask_true(embedded, task, "31 October")
    assert set(local.scores) == {"Yes", "No", "yes", "no"}  # the embedded model scores every spelling
    assert {"Yes", "No"} <= set(remote.scores) <= set(local.scores)  # the server: those among its candidates
    assert remote.probability == pytest.approx(local.probability, abs=0.05)


@pytest.mark.slow  # six requests, three of them generated under grammars on the server: 15 s on one thread
def test_ask_all_on_a_real_server_agrees_with_the_embedded_model(served, embedded):
    """The same three questions through llama_cpp.server: the grammars hold, P(True) is read from
    the reported candidates, and the replies are the embedded model's (the same GGUF)."""
    task = [{"role": "system", "content": "Answer from the section: the thesis is due on 31 October."},
            {"role": "user", "content": "When is the thesis due?"}]
    remote, local = ask_all(served, task, "31 October"), ask_all(embedded, task, "31 October")
    assert 0 <= remote.number <= 100 and remote.category in CATEGORIES
    assert (remote.number, remote.category) == (local.number, local.category)
    assert remote.p_true.probability == pytest.approx(local.p_true.probability, abs=0.05)
