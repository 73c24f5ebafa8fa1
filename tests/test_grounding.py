"""Grounded answers and the shared "ask under a schema, validate, retry once" logic, with a fake model."""
from __future__ import annotations

import json

import pytest

from lib.grammar import schema_for_model
from lib.grounding import GROUNDING_SYSTEM_PROMPT, grounded_answer, grounding_messages
from lib.backends.protocol import Completion
from lib.quotes import GroundedAnswer
from lib.structured import ask_structured
from conftest import ScriptedLLM

SECTIONS = {
    "handbook/stipends": "In 2025-2026 the standard stipend is 3,140 per month before tax.",
    "handbook/parental-leave": "A student is entitled to 12 weeks of paid parental leave.",
}
GOOD = json.dumps({"answer": "3,140 per month",
                   "quotes": [{"text": "the standard stipend is 3,140 per month", "section_id": "handbook/stipends"},
                              {"text": "the standard stipend is 3,410 per month", "section_id": "handbook/stipends"}]})


def completion(text: str, finish_reason: str = "stop", tokens: int = 10) -> Completion:
    return Completion(text=text, finish_reason=finish_reason, prompt_tokens=50, completion_tokens=tokens, seconds=0.5)


def FakeLLM(*replies: Completion) -> ScriptedLLM:
    """Answers `chat` calls from prepared completions and remembers every request."""
    return ScriptedLLM(replies)


def test_valid_answer_is_parsed_and_its_quotes_verified():
    llm = FakeLLM(completion(GOOD))
    result = grounded_answer(llm, "How much is the stipend?", SECTIONS, max_tokens=200)
    assert result.ok and not result.errors and len(result.completions) == 1
    assert result.answer.answer == "3,140 per month"
    assert [v.ok for v in result.verdicts] == [True, False]  # the changed number is caught
    assert result.n_verified == 1
    assert result.verdicts[0].found_in == "handbook/stipends"
    request = llm.requests[0]
    assert request["json_schema"] == schema_for_model(GroundedAnswer) and request.get("grammar") is None
    assert request["max_tokens"] == 200


def test_prompt_shows_every_section_with_its_id_and_the_question():
    messages = grounding_messages("How much is the stipend?", SECTIONS)
    assert messages[0] == {"role": "system", "content": GROUNDING_SYSTEM_PROMPT}
    assert "[handbook/stipends]\nIn 2025-2026" in messages[1]["content"]
    assert "[handbook/parental-leave]" in messages[1]["content"]
    assert messages[1]["content"].endswith("Question: How much is the stipend?")


def test_cut_off_reply_is_retried_with_a_bigger_budget():
    llm = FakeLLM(completion('{"answer": "3,140 per', "length", 100), completion(GOOD))
    result = grounded_answer(llm, "How much is the stipend?", SECTIONS, max_tokens=100)
    assert result.ok and len(result.completions) == 2
    assert [r["max_tokens"] for r in llm.requests] == [100, 200]
    assert llm.requests[1]["messages"] == llm.requests[0]["messages"]
    assert "finish_reason 'length'" in result.errors[0]


def test_invalid_reply_is_retried_with_the_reason():
    llm = FakeLLM(completion('{"answer": "3,140"}'), completion(GOOD))
    result = grounded_answer(llm, "How much is the stipend?", SECTIONS)
    assert result.ok and len(result.errors) == 1 and "quotes" in result.errors[0]
    retry = llm.requests[1]["messages"]
    assert retry[2] == {"role": "assistant", "content": '{"answer": "3,140"}'}
    assert "rejected" in retry[3]["content"] and retry[3]["role"] == "user"


def test_two_failures_are_reported_never_guessed():
    llm = FakeLLM(completion('{"answer": "3,1', "length"), completion('{"answer": "3,140 per month", "quo', "length"))
    result = grounded_answer(llm, "How much is the stipend?", SECTIONS)
    assert not result.ok and result.answer is None and result.verdicts == ()
    assert len(result.errors) == 2 and len(result.completions) == 2
    assert result.completion is result.completions[-1]


def test_ask_structured_passes_sampling_arguments_on_every_attempt():
    llm = FakeLLM(completion("not json"), completion(GOOD))
    result = ask_structured(llm, [{"role": "user", "content": "q"}], GroundedAnswer, max_tokens=50, top_logprobs=5)
    assert result.ok and result.retried
    assert [r["top_logprobs"] for r in llm.requests] == [5, 5]


def test_ask_structured_rejects_a_non_model_class():
    with pytest.raises(TypeError, match="pydantic"):
        ask_structured(FakeLLM(), [{"role": "user", "content": "q"}], dict, max_tokens=10)


@pytest.mark.parametrize("question, sections", [("", SECTIONS), ("  ", SECTIONS), ("q", {})])
def test_bad_arguments_say_what_is_wrong(question, sections):
    with pytest.raises(ValueError):
        grounding_messages(question, sections)
