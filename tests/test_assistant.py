"""The assembled assistant (lib.assistant) with a fake model and a fake embedder: no model file needed.

The corpus is four tiny sections; the gates are set by hand to values that put each test
question on a known path (the numbers are in the comments, computed with `fake_embed`).
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from lib import retrieval as R
from lib.selective import Gate
from lib.assistant import (
    ANSWERABILITY_QUESTION,
    ANSWERABILITY_SYSTEM_PROMPT,
    PENDING,
    Assistant,
    CalibratedPYes,
    CostRule,
    SupportModel,
    answer_is_right,
    answerability_messages,
    answerability_probability,
    decision_table,
    quotes_verified,
)
from lib.assistant_fitting import fit_answerability_gate, fit_ask_gate, fit_gates, fit_perplexity_ceiling
from lib.citations import FALLBACK_BANNER
from lib.datasets import Section
from lib.grounding import GROUNDING_SYSTEM_PROMPT, answer_field_logprobs
from lib.indexes import DenseIndex, chunk_by_heading
from lib.backends.protocol import Completion, TokenLogprob
from lib.actions import Action
from lib.routing import CostThresholds
from conftest import ScriptedLLM
from test_indexes import fake_embed

SECTIONS = [
    Section("handbook/thesis-committee", "handbook", "Graduate Handbook", "Thesis committee",
            "The committee has at least four members with a faculty appointment. The advisor chairs it."),
    Section("handbook/qualifying-exam", "handbook", "Graduate Handbook", "Qualifying exam",
            "The qualifying exam must be passed by the end of the fourth semester."),
    Section("handbook/stipends", "handbook", "Graduate Handbook", "Stipends",
            "The standard stipend is 3,140 per month before tax."),
    Section("helpdesk/vpn", "helpdesk/vpn", "VPN", "Connecting",
            "Connect to the VPN with the Quillmere client and your staff account."),
]
TEXTS = {s.id: s.text for s in SECTIONS}
EXAMPLES = ["How many members does a thesis committee have?", "When is the qualifying exam deadline?",
            "What is the stipend per month?", "How do I connect to the VPN?"]

GROUNDED_Q = "How many members must a thesis committee have?"  # boundary 0.857, top 0.390, margin 0.293
OUT_Q = "Write a poem about the sea"                             # boundary 0.000
ASK_Q = "What is the exam semester for the committee?"           # boundary 0.25, top 0.387, margin 0.129
NOTHING_Q = "What is the monthly stipend?"                       # boundary 0.577, top 0.174

GOOD = json.dumps({"answer": "At least four members",
                   "quotes": [{"text": "The committee has at least four members",
                               "section_id": "handbook/thesis-committee"}]})
BAD_QUOTE = json.dumps({"answer": "Five members",
                        "quotes": [{"text": "The committee has five members", "section_id": "handbook/thesis-committee"}]})
NO_QUOTES = json.dumps({"answer": "The sections do not say.", "quotes": []})


def FakeLLM(replies=(), p_yes: float = 0.9, other: float = 0.0) -> ScriptedLLM:
    """Answers `chat` with prepared texts and the probe with P(yes) = `p_yes`, `other` of the mass elsewhere."""
    mass = 1.0 - other
    # Split each answer's mass over its two spellings, to check they are summed.
    return ScriptedLLM(replies, scores={
        "yes": math.log(0.75 * mass * p_yes), "Yes": math.log(0.25 * mass * p_yes),
        "no": math.log(0.5 * mass * (1 - p_yes)), "No": math.log(0.5 * mass * (1 - p_yes))})


@pytest.fixture(scope="module")
def index():
    return DenseIndex(chunk_by_heading(SECTIONS), fake_embed)


def fixed_gates() -> dict[str, Gate | R.RetrievalGate]:
    """The three gates at fixed thresholds (fitted on one accepted row, which only sets `reached_`)."""
    return {"boundary_gate": Gate(threshold=0.2).fit([0.2], [True]),
            "retrieval_gate": R.RetrievalGate(score_threshold=0.35, margin_threshold=0.2).fit(
                pd.DataFrame({"top_score": [0.35], "margin": [0.2]}), [True]),
            "ask_gate": Gate(threshold=0.25).fit([0.25], [True])}


def make_assistant(index, llm, threshold=0.5):
    return Assistant(llm=llm, scope=R.Scope(index, EXAMPLES), sections=TEXTS, **fixed_gates(),
                     answerability_threshold=threshold, n_sources=2, n_offer=2, max_tokens=120)


def test_out_of_scope_stops_at_the_boundary_without_model_calls(index):
    llm = FakeLLM()
    trace = make_assistant(index, llm).run(OUT_Q)
    assert trace.decision is Action.OUT_OF_SCOPE
    assert [s.verdict for s in trace.steps] == ["fail", "skipped", "skipped", "skipped", "skipped"]
    assert trace.step("boundary").numbers["threshold"] == 0.2
    assert not llm.requests and not llm.probes


def test_unsure_retrieval_with_close_sections_asks_offering_their_headings(index):
    llm = FakeLLM()
    trace = make_assistant(index, llm).run(ASK_Q)
    assert trace.decision is Action.ASK
    assert trace.step("retrieval").verdict == "fail"
    assert [sid for sid, _ in trace.offered] == ["handbook/qualifying-exam", "handbook/thesis-committee"]
    assert "(1) Qualifying exam" in trace.reply and "(2) Thesis committee" in trace.reply
    assert not llm.requests and not llm.probes


def test_unsure_retrieval_with_nothing_close_hands_over(index):
    llm = FakeLLM()
    trace = make_assistant(index, llm).run(NOTHING_Q)
    assert trace.decision is Action.HAND_OVER
    assert "nothing is close" in trace.why
    assert not llm.requests


def test_verified_quotes_and_high_answerability_answer(index):
    llm = FakeLLM([GOOD], p_yes=0.9)
    trace = make_assistant(index, llm).run(GROUNDED_Q)
    assert trace.decision is Action.ACT
    assert trace.answer == "At least four members"
    assert "handbook/thesis-committee" in trace.reply
    assert trace.answerability.probability == pytest.approx(0.9)
    # The model saw the two best sections, in the grounding prompt, with the set budget.
    request = llm.requests[0]
    assert request["messages"][0]["content"] == GROUNDING_SYSTEM_PROMPT and request["max_tokens"] == 120
    assert "[handbook/thesis-committee]" in request["messages"][1]["content"]
    assert "[handbook/qualifying-exam]" in request["messages"][1]["content"]
    assert len(llm.probes) == 1 and llm.probes[0]["top_k"] == 0


def test_failed_quote_hands_over_without_asking_answerability(index):
    llm = FakeLLM([BAD_QUOTE])
    trace = make_assistant(index, llm).run(GROUNDED_Q)
    assert trace.decision is Action.HAND_OVER
    assert trace.step("grounded answer").verdict == "fail"
    assert trace.step("answerability").verdict == "skipped"
    assert not llm.probes


def test_answer_without_quotes_hands_over(index):
    trace = make_assistant(index, FakeLLM([NO_QUOTES])).run(GROUNDED_Q)
    assert trace.decision is Action.HAND_OVER
    assert trace.step("grounded answer").note == "no quotes"


def test_low_answerability_hands_over(index):
    trace = make_assistant(index, FakeLLM([GOOD], p_yes=0.3)).run(GROUNDED_Q)
    assert trace.decision is Action.HAND_OVER
    assert trace.step("answerability").verdict == "fail"


def test_unfitted_threshold_leaves_the_decision_pending_and_decide_needs_no_model(index):
    llm = FakeLLM([GOOD], p_yes=0.9)
    assistant = make_assistant(index, llm, threshold=math.nan)
    trace = assistant.run(GROUNDED_Q)
    assert trace.decision is PENDING and trace.decision_name == "PENDING" and "PENDING" in trace.render()
    assistant.answerability_threshold = 0.95
    assert assistant.decide(trace).decision is Action.HAND_OVER
    assistant.answerability_threshold = 0.85
    decided = assistant.decide(trace)
    assert decided.decision is Action.ACT
    assert [s.name for s in decided.steps] == ["boundary", "retrieval", "grounded answer", "citations",
                                               "answerability"]
    assert len(llm.requests) == 1 and len(llm.probes) == 1


def test_trace_renders_every_step_with_its_numbers(index):
    trace = make_assistant(index, FakeLLM([GOOD])).run(GROUNDED_Q)
    text = str(trace)
    assert text == trace.render()
    for piece in ("Q: " + GROUNDED_Q, "boundary", "retrieval", "grounded answer", "answerability",
                  "P(yes) 0.900", "threshold 0.500", "=> act (verified quotes and answerable)", "\u2713"):
        assert piece in text
    page = trace._repr_html_()
    assert page.startswith("<p><b>Q:</b>") and "<b>act</b>" in page and "<table>" in page


def test_answerability_sums_both_spellings_and_reports_off_label_mass():
    llm = FakeLLM(p_yes=0.8, other=0.2)
    result = answerability_probability(llm, "How big?", {"a/b": "Four members."})
    assert result.probability == pytest.approx(0.8)
    assert result.off_label_mass == pytest.approx(0.2)
    assert set(llm.probes[0]["score_tokens"]) == {"yes", "no", "Yes", "No"}
    messages = answerability_messages("How big?", {"a/b": "Four members."})
    assert messages[0]["content"] == ANSWERABILITY_SYSTEM_PROMPT
    assert "[a/b]\nFour members." in messages[1]["content"]
    assert ANSWERABILITY_QUESTION in messages[1]["content"]


def test_answerability_is_nan_when_neither_answer_is_visible():
    result = answerability_probability(ScriptedLLM(), "How big?", {"a/b": "Four members."})
    assert math.isnan(result.probability) and result.off_label_mass == 1.0


def test_quotes_verified_needs_a_valid_answer_with_every_quote_found(index):
    assert not quotes_verified(None)
    good = make_assistant(index, FakeLLM([GOOD])).run(GROUNDED_Q).grounding
    assert quotes_verified(good)


def test_answerability_threshold_fits_only_on_probed_traces(index):
    traces = [make_assistant(index, FakeLLM([GOOD], p_yes=p), threshold=math.nan).run(GROUNDED_Q)
              for p in (0.95, 0.9, 0.6, 0.4)]
    skipped = make_assistant(index, FakeLLM(), threshold=math.nan).run(OUT_Q)  # no probability: ignored
    gate = fit_answerability_gate(traces + [skipped], [True, True, False, True, True], target_precision=0.9)
    assert gate.threshold_ == pytest.approx(0.9) and gate.reached_ and gate.fitted_on_ == 4
    unreachable = fit_answerability_gate(traces, [False] * 4)
    assert not unreachable.reached_ and unreachable.threshold_ > 0.95
    with pytest.raises(ValueError, match="length"):
        fit_answerability_gate(traces, [True])
    with pytest.raises(ValueError, match="no trace"):
        fit_answerability_gate([skipped], [True])


def test_fit_gates_and_ask_gate_on_dev_frame(index):
    dev = pd.DataFrame({
        "question": [GROUNDED_Q, "How many members are on the committee?", OUT_Q, "Tell me a joke about cats",
                     ASK_Q, NOTHING_Q, "What does the advisor chair?"],
        "type": ["answerable", "answerable", "out_of_scope", "out_of_scope", "answerable", "unanswerable",
                 "answerable"],
        "section_ids": [["handbook/thesis-committee"], ["handbook/thesis-committee"], [], [],
                        ["handbook/qualifying-exam"], [], ["handbook/thesis-committee"]],
    })
    boundary, retrieval = fit_gates(dev, R.Scope(index, EXAMPLES))
    assert not math.isnan(boundary.threshold_) and not math.isnan(retrieval.score_threshold_)
    ask = fit_ask_gate(dev, boundary, retrieval, R.Scope(index, EXAMPLES), n_offer=2, target_precision=0.5)
    assert not math.isnan(ask.threshold_)


def test_answer_is_right_rules(index):
    trace = make_assistant(index, FakeLLM([GOOD])).run(GROUNDED_Q)  # answer "At least four members"
    assert answer_is_right(trace, "answerable", "four members") is True
    assert answer_is_right(trace, "answerable", "five members") is False
    assert answer_is_right(trace, "unanswerable", "") is False
    assert answer_is_right(trace, "answerable", "two faculty members and one graduate student") is None
    no_answer = make_assistant(index, FakeLLM()).run(OUT_Q)
    assert answer_is_right(no_answer, "answerable", "four members") is None
    assert answer_is_right("At least four members", "answerable", "four members") is True  # the answer's text alone
    assert answer_is_right(None, "answerable", "four members") is None


def test_decision_table_has_fixed_rows_and_columns(index):
    assistant = make_assistant(index, FakeLLM([GOOD]))
    traces = assistant.run_many([GROUNDED_Q, OUT_Q, ASK_Q, NOTHING_Q])
    table = decision_table(traces, ["answerable", "out_of_scope", "answerable", "unanswerable"])
    assert list(table.index) == ["answerable", "unanswerable", "out_of_scope"]
    assert list(table.columns) == ["act", "ask", "out_of_scope", "hand_over"]
    assert table.loc["answerable", "act"] == 1 and table.loc["answerable", "ask"] == 1
    assert table.loc["out_of_scope", "out_of_scope"] == 1 and table.loc["unanswerable", "hand_over"] == 1
    assert int(table.to_numpy().sum()) == 4
    with pytest.raises(ValueError):
        decision_table(traces, ["answerable"])


def test_decision_table_reads_saved_decision_names_too():
    table = decision_table(["act", "ask", "hand_over", "PENDING"], ["answerable", "answerable", "unanswerable",
                                                                     "answerable"])
    assert table.loc["answerable", "act"] == 1 and table.loc["unanswerable", "hand_over"] == 1
    assert list(table.columns)[-1] == "PENDING" and table.loc["answerable", "PENDING"] == 1


def test_bad_arguments_are_refused(index):
    with pytest.raises(ValueError, match="n_sources"):
        Assistant(llm=FakeLLM(), scope=R.Scope(index, EXAMPLES), sections=TEXTS, **fixed_gates(), n_sources=0)
    with pytest.raises(NotFittedError, match="ask_gate"):
        Assistant(llm=FakeLLM(), scope=R.Scope(index, np.asarray(fake_embed(EXAMPLES))), sections=TEXTS,
                  **{**fixed_gates(), "ask_gate": Gate()})


def test_repr_is_the_readable_trace_not_a_dump(index):
    trace = make_assistant(index, FakeLLM([GOOD])).run(GROUNDED_Q)
    assert repr(trace) == trace.render()
    assert "Completion(" not in repr(trace)


def tokenized(text: str, answer_logprob: float) -> Completion:
    """`text` as a completion of one-word tokens: the answer's words at `answer_logprob`, the rest near-certain."""
    answer = json.loads(text)["answer"]
    start = text.index(answer)
    pieces = re.findall(r"\s*\S+", text)
    tokens, position = [], 0
    for piece in pieces:
        inside = position < start + len(answer) and position + len(piece) > start
        tokens.append(TokenLogprob(piece, answer_logprob if inside else -0.01, ()))
        position += len(piece)
    return Completion(text, "stop", 100, len(tokens), 1.0, tuple(tokens))


def test_answer_field_logprobs_reads_only_the_answer_tokens():
    completion = tokenized(GOOD, math.log(0.5))
    logprobs = answer_field_logprobs(completion)
    assert len(logprobs) == len("At least four members".split())
    assert logprobs == [pytest.approx(math.log(0.5))] * 4
    assert answer_field_logprobs(Completion(GOOD, "stop", 100, 20, 1.0)) == []  # no tokens kept


def test_a_perplexity_ceiling_turns_an_unsure_answer_into_ask(index):
    for answer_logprob, ceiling, expected in ((math.log(0.5), math.inf, Action.ACT),
                                              (math.log(0.5), 1.5, Action.ASK),
                                              (math.log(0.9), 1.5, Action.ACT)):
        llm = FakeLLM([tokenized(GOOD, answer_logprob)], p_yes=0.9)
        assistant = make_assistant(index, llm)
        assistant.perplexity_ceiling = ceiling
        trace = assistant.run(GROUNDED_Q)
        assert trace.answer_perplexity == pytest.approx(math.exp(-answer_logprob))
        assert trace.decision is expected
        if expected is Action.ASK:
            assert "perplexity" in trace.why and "(1) Thesis committee" in trace.reply


def test_the_trace_prints_the_answers_perplexity_and_its_weakest_token(index):
    completion = tokenized(GOOD, math.log(0.5))
    weakest = completion.tokens[[t.token.strip() for t in completion.tokens].index("four")]
    completion = Completion(completion.text, "stop", 100, len(completion.tokens), 1.0, tuple(
        TokenLogprob(t.token, math.log(0.2), ()) if t is weakest else t for t in completion.tokens))
    trace = make_assistant(index, FakeLLM([completion], p_yes=0.9)).run(GROUNDED_Q)
    assert trace.weakest_token_logprob == pytest.approx(math.log(0.2))
    assert trace.answer_perplexity == pytest.approx(math.exp(-(3 * math.log(0.5) + math.log(0.2)) / 4))
    assert f"answer perplexity {trace.answer_perplexity:.3f}" in trace.render()
    assert f"weakest token logprob {math.log(0.2):.3f}" in trace.render()
    assert "weakest token logprob" in trace._repr_html_()
    untokenized = make_assistant(index, FakeLLM([GOOD], p_yes=0.9)).run(GROUNDED_Q)
    assert untokenized.weakest_token_logprob is None and "perplexity" not in untokenized.render()


def test_an_answer_without_tokens_is_never_turned_into_ask(index):
    assistant = make_assistant(index, FakeLLM([GOOD], p_yes=0.9))
    assistant.perplexity_ceiling = 1.0
    trace = assistant.run(GROUNDED_Q)
    assert trace.answer_perplexity is None and trace.decision is Action.ACT


def test_fit_perplexity_ceiling():
    perplexities = [1.0, 1.1, 1.3, 1.6, 2.5, math.nan]
    correct = [True, True, True, False, False, True]
    assert fit_perplexity_ceiling(perplexities, correct, target_precision=1.0) == pytest.approx(1.3)
    assert fit_perplexity_ceiling(perplexities, correct, target_precision=0.75) == pytest.approx(1.6)
    with pytest.raises(ValueError):
        fit_perplexity_ceiling([0.5], [True])


WRONG_SECTION = json.dumps({"answer": "At least four members",
                            "quotes": [{"text": "The committee has at least four members",
                                        "section_id": "handbook/qualifying-exam"}]})
NOT_SHOWN = json.dumps({"answer": "At least four members",
                        "quotes": [{"text": "The committee has at least four members",
                                    "section_id": "handbook/thesis-committee"},
                                   {"text": "The advisor chairs it.", "section_id": "handbook/stipends"}]})


def test_an_answer_cites_the_sections_by_the_order_they_were_shown(index):
    trace = make_assistant(index, FakeLLM([GOOD], p_yes=0.9)).run(GROUNDED_Q)
    assert trace.shown_sections == ("handbook/thesis-committee", "handbook/qualifying-exam")
    assert trace.decision is Action.ACT and trace.citations.valid
    assert trace.reply.splitlines()[0] == "At least four members [1]"
    assert trace.reply.splitlines()[1].startswith("[1] handbook/thesis-committee:")
    assert trace.step("citations").verdict == "pass" and trace.step("citations").numbers == {"citations": 1, "valid": 1}


@pytest.mark.parametrize("reply, problem", [(WRONG_SECTION, "the quote is not in handbook/qualifying-exam"),
                                            (NOT_SHOWN, "which was not among the sections retrieved")])
def test_a_bad_citation_hands_over_and_the_trace_says_why(index, reply, problem):
    trace = make_assistant(index, FakeLLM([reply], p_yes=0.9)).run(GROUNDED_Q)
    assert trace.decision is Action.HAND_OVER and trace.why == "a citation does not hold"
    assert trace.step("citations").verdict == "fail"
    assert problem in trace.render()
    assert trace.reply.startswith(FALLBACK_BANNER) and "[1]" not in trace.reply


def test_every_reply_but_an_answer_carries_the_banner_and_no_citation(index):
    llm = FakeLLM([GOOD, NO_QUOTES], p_yes=0.3)
    assistant = make_assistant(index, llm)
    traces = assistant.run_many([OUT_Q, ASK_Q, NOTHING_Q, GROUNDED_Q, GROUNDED_Q])
    assert [t.decision for t in traces] == [Action.OUT_OF_SCOPE, Action.ASK] + [Action.HAND_OVER] * 3
    for trace in traces:
        assert trace.reply.startswith(FALLBACK_BANNER) and not re.search(r"\[\d+\]", trace.reply)


def test_answer_past_boundary_asks_the_model_but_the_gates_still_decide(index):
    llm = FakeLLM([GOOD], p_yes=0.9)
    trace = make_assistant(index, llm).run(ASK_Q, answer_past_boundary=True)
    assert trace.decision is Action.ASK and trace.answerability.probability == pytest.approx(0.9)
    assert trace.shown_sections == ("handbook/qualifying-exam", "handbook/thesis-committee")
    assert len(llm.requests) == 1 and not make_assistant(index, FakeLLM()).run(OUT_Q, answer_past_boundary=True).grounding


def support_data():
    rng = np.random.default_rng(0)
    p_yes, top, margin = rng.uniform(0, 1, 200), rng.uniform(0.2, 0.7, 200), rng.uniform(0, 0.2, 200)
    right = rng.uniform(0, 1, 200) < 1 / (1 + np.exp(-(6 * (p_yes - 0.5) + 10 * (top - 0.45))))
    return p_yes, top, margin, right


def test_support_model_combines_p_yes_with_the_retrieval_scores():
    p_yes, top, margin, right = support_data()
    support = SupportModel(target_precision=0.9).fit(p_yes, top, margin, right)
    assert support.coef_.shape == (3,) and support.coef_[0] > 0 and support.coef_[1] > 0 and support.reached_
    chance = support.probability(p_yes, top, margin)
    assert chance.shape == (200,) and ((chance > 0) & (chance < 1)).all()
    assert right[support.accepts(p_yes, top, margin)].mean() >= 0.9
    assert np.isnan(support.probability([np.nan], [0.5], [0.1])[0]) and not support.accepts([np.nan], [0.5], [0.1])[0]


def test_support_model_refuses_what_it_cannot_fit():
    with pytest.raises(NotFittedError, match="not fitted"):
        SupportModel().probability([0.5], [0.5], [0.1])
    with pytest.raises(ValueError, match="both right and wrong"):
        SupportModel().fit([0.5, 0.6], [0.5, 0.5], [0.1, 0.1], [True, True])


def test_with_a_support_model_the_last_step_asks_it_instead_of_the_threshold(index):
    p_yes, top, margin, right = support_data()
    support = SupportModel(target_precision=0.9).fit(p_yes, top, margin, right)
    # GROUNDED_Q has top 0.390 and margin 0.293: P(yes) 0.99 is accepted, 0.2 is not.
    assert support.accepts([0.99, 0.2], [0.390, 0.390], [0.293, 0.293]).tolist() == [True, False]
    for p, decision in ((0.99, Action.ACT), (0.2, Action.HAND_OVER)):
        assistant = make_assistant(index, FakeLLM([GOOD], p_yes=p), threshold=0.0)
        assistant.support = support
        trace = assistant.run(GROUNDED_Q)
        step = trace.step("answerability")
        assert trace.decision is decision and step.numbers["threshold"] == support.threshold_
        assert step.numbers["P(right)"] == pytest.approx(support.probability([p], [trace.routing.top_score], [trace.routing.margin])[0])
    assert make_assistant(index, FakeLLM()).run(ASK_Q).decision is Action.ASK  # the gates still come first


def cost_rule(act: float = 0.8, ask: float = 0.5) -> CostRule:
    """P(yes) as it is, acted on at `act`, asked about at `ask`."""
    return CostRule(CalibratedPYes(), CostThresholds(act_threshold=act, hand_over_threshold=ask,
                                                     expected_cost=0.0, fitted_on=1))


@pytest.mark.parametrize(("p_yes", "decision"), [(0.9, Action.ACT), (0.6, Action.ASK), (0.3, Action.HAND_OVER)])
def test_with_a_cost_rule_the_calibrated_probability_routes_every_checked_answer(index, p_yes, decision):
    llm = FakeLLM([GOOD], p_yes=p_yes)
    assistant = make_assistant(index, llm)
    assistant.cost_rule = cost_rule()
    trace = assistant.run(ASK_Q)  # the retrieval gate fails, but with a cost rule the model answers anyway
    assert trace.decision is decision and len(llm.requests) == 1
    assert trace.step("retrieval").verdict == "skipped" and "not a gate" in trace.step("retrieval").note
    step = trace.step("answerability")
    assert step.numbers["P(right)"] == pytest.approx(p_yes)
    assert (step.numbers["act threshold"], step.numbers["ask threshold"]) == (0.8, 0.5)
    if decision is Action.ASK:
        assert "(1) Qualifying exam" in trace.reply and trace.reply.startswith(FALLBACK_BANNER)


def test_with_a_cost_rule_the_boundary_and_the_code_checks_still_come_first(index):
    assistant = make_assistant(index, FakeLLM())
    assistant.cost_rule = cost_rule()
    assert assistant.run(OUT_Q).decision is Action.OUT_OF_SCOPE
    assistant = make_assistant(index, FakeLLM([BAD_QUOTE], p_yes=0.99))
    assistant.cost_rule = cost_rule()
    trace = assistant.run(GROUNDED_Q)
    assert trace.decision is Action.HAND_OVER and "not verified" in trace.why


def test_calibrated_p_yes_maps_through_its_calibrator_and_keeps_nan():
    from lib.calibration import PlattCalibrator

    p_yes, top, margin, right = support_data()
    signal = CalibratedPYes(PlattCalibrator()).fit(p_yes, top, margin, right)
    direct = PlattCalibrator().fit(p_yes, right).predict(p_yes)
    assert np.array_equal(signal.probability(p_yes, top, margin), direct)
    raw = CalibratedPYes().fit(p_yes, top, margin, right)
    assert np.array_equal(raw.probability(p_yes, top, margin), p_yes)
    assert np.isnan(signal.probability([np.nan, 0.5], [0, 0], [0, 0])).tolist() == [True, False]
