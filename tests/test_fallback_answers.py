"""The labelled fallback answer (lib.fallback_answers): a general answer behind a banner; the invented-policy rule."""
from __future__ import annotations

from collections.abc import Callable

import pytest

from lib.citations import FALLBACK_BANNER, GENERAL_ANSWER_BANNER
from lib.fallback_answers import (
    FALLBACK_MAX_TOKENS,
    FALLBACK_SYSTEM_PROMPT,
    fallback_answer,
    fallback_messages,
    invented_policy_sentences,
    states_invented_policy,
)
from conftest import ScriptedLLM, best_seconds


def test_the_model_is_told_there_is_no_section_and_is_shown_none():
    system, user = fallback_messages("  Is there a childcare subsidy?  ")
    assert system == {"role": "system", "content": FALLBACK_SYSTEM_PROMPT}
    assert "handbook says nothing" in FALLBACK_SYSTEM_PROMPT
    assert user == {"role": "user", "content": "Is there a childcare subsidy?"}


@pytest.mark.parametrize("question", ["", "   ", None])
def test_an_empty_question_is_refused(question):
    with pytest.raises(ValueError):
        fallback_messages(question)


def test_the_reply_starts_with_the_banner_added_by_code_and_greedy_decoding_is_asked():
    llm = ScriptedLLM(["  Such subsidies usually depend on the university; ask the graduate office.  "])
    answer = fallback_answer(llm, "Is there a childcare subsidy?")
    text = "Such subsidies usually depend on the university; ask the graduate office."
    assert answer.reply == f"{GENERAL_ANSWER_BANNER} {text}"
    assert answer.reply.startswith(GENERAL_ANSWER_BANNER) and GENERAL_ANSWER_BANNER != FALLBACK_BANNER
    assert not answer.invented_policy and answer.flagged == ()
    (request,) = llm.requests
    assert request["temperature"] == 0.0 and request["max_tokens"] == FALLBACK_MAX_TOKENS


def test_a_fallback_that_states_a_figure_is_flagged_with_its_sentence():
    answer = fallback_answer(ScriptedLLM(["The fee is $5,000 per semester. Ask the bursar to be sure."]), "Fee?")
    assert answer.invented_policy and answer.flagged == ("The fee is $5,000 per semester.",)


@pytest.mark.parametrize("text", [
    "The permit costs 40 per month.",                                        # a figure, as fact
    "You must apply within thirty days of arrival.",                         # an obligation and a deadline
    "Students are not allowed to bring pets to campus housing.",             # an obligation
    "Send the request to the Housing Office.",                               # a named office
    "Fill in the Leave Form and hand it in.",                                # a named form
    "Yes, you can write your dissertation in French.",                       # a verdict on the question
    "No. That is not offered.",                                              # a verdict, its own sentence
    "Quillmere typically charges 5,000 per year.",                           # a hedged figure for Quillmere
    "At QIT the fee is usually 12% of the stipend.",                         # the same, with its short name
    "The Deadline is the end of term.",                                      # case ignored in deadline words
    "The notice period is usually 6 months.",                                # a frequency word excuses no figure
    "The printer is likely an HP LaserJet 400.",                             # nor a name and model number
    "Graduate students can use the 3D printer if they have a student ID.",   # a permission
    "You may bring a dog to your office.",                                   # a permission
])
def test_statements_of_policy_as_fact_are_flagged(text):
    assert states_invented_policy(text), text


@pytest.mark.parametrize("text", [
    "Such rules usually depend on the university.",
    "Many universities offer a subsidy; check with the graduate office.",
    "Fees vary from 500 to 5,000 at most universities.",                     # a figure, hedged, not Quillmere's
    "The student could ask the office of student health.",
    "It is best to confirm with the Institute before you apply.",            # names the Institute, no specific
    "Nobody can say without the handbook.",                                  # "Nobody" is not "No"
    "Students can usually ask the department office.",                       # advice, not a permission
    "2. **Connect the console**: plug it in.",                               # a list number is no figure
    "Ask the Housing Office about it.",                                      # an office named as advice
    "",
])
def test_general_advice_is_not_flagged(text):
    assert not states_invented_policy(text), text


def test_only_the_sentences_that_state_policy_are_returned_in_order():
    text = ("Subsidies usually depend on the school. The fee is 30 per month.\n"
            "Students must register first! Contact the office to confirm.")
    assert invented_policy_sentences(text) == ["The fee is 30 per month.", "Students must register first!"]


def test_the_banner_is_not_read_as_part_of_the_answer():
    assert invented_policy_sentences(f"{GENERAL_ANSWER_BANNER} Such rules usually vary.") == []


def test_a_non_string_is_refused():
    with pytest.raises(TypeError):
        invented_policy_sentences(None)


def test_a_long_hostile_text_is_judged_in_time_linear_in_its_length():
    """200 KB of capitals that each could start an office's name ("A Office"): the rule reads it in
    time that grows with the length, not with its square. 50 KB must take under a second (0.03 s
    here; a quadratic rule took 12 s), and four times the text at most eight times as long (a
    quadratic rule takes sixteen)."""
    def judge(words: int) -> Callable[[], None]:
        text = ("A " * words) + "Office" + " 9" * 10
        return lambda: assert_flagged(text)

    def assert_flagged(text: str) -> None:
        assert states_invented_policy(text)

    short = best_seconds(judge(25_000))
    assert short < 1, f"{short:.2f} s for 50 KB"
    long = best_seconds(judge(100_000))
    assert long < 8 * short + 0.02, f"{short:.3f} s for 50 KB, {long:.3f} s for 200 KB"
