"""Model-written citations (lib.model_citations): each claim's marker checked against the section it names."""
from __future__ import annotations

import json

import pytest

from lib.datasets import load_corpus
from lib.grammar import schema_for_model
from lib.backends.protocol import Completion
from lib.model_citations import (
    MAX_CLAIMS,
    MODEL_CITATION_SYSTEM_PROMPT,
    Claim,
    ClaimedAnswer,
    check_claims,
    model_citation_messages,
    model_cited_answer,
)
from lib.saved_runs.items import load_run
from lib.saved_runs.questions import MODEL_CITATIONS
from conftest import ScriptedLLM

SECTIONS = {  # in the order shown: [1] is the qualifying exam, [2] the committee
    "handbook/qualifying-exam": "The qualifying exam must be passed by the end of the fourth semester.",
    "handbook/thesis-committee": ("The committee has at least four members with a faculty appointment. "
                                  "The advisor chairs it."),
}
QUESTION = "Who chairs the thesis committee, and how big is it?"


def reply(*claims: tuple[str, int | None, str]) -> str:
    return json.dumps({"claims": [{"sentence": s, "source": n, "quote": q} for s, n, q in claims]})


def answer(*claims: tuple[str, int | None, str]) -> ClaimedAnswer:
    return ClaimedAnswer.model_validate_json(reply(*claims))


def test_sections_are_shown_numbered_in_order_without_their_ids():
    system, user = model_citation_messages(QUESTION, SECTIONS)
    assert system == {"role": "system", "content": MODEL_CITATION_SYSTEM_PROMPT}
    assert user["role"] == "user"
    assert user["content"] == ("Sections:\n\n[1]\nThe qualifying exam must be passed by the end of the fourth semester."
                               f"\n\n[2]\n{SECTIONS['handbook/thesis-committee']}\n\nQuestion: {QUESTION}")
    assert "handbook/" not in user["content"]


@pytest.mark.parametrize("question, sections", [("", SECTIONS), ("  ", SECTIONS), (QUESTION, {})])
def test_an_empty_question_or_no_sections_is_refused(question, sections):
    with pytest.raises(ValueError):
        model_citation_messages(question, sections)


def test_a_marker_is_valid_when_its_quote_is_in_the_section_it_names():
    (verdict,) = check_claims(answer(("The advisor chairs it.", 2, "The advisor chairs it")), SECTIONS)
    assert verdict.marked and verdict.valid and verdict.marker == "[2]"
    start, end = verdict.citation.span
    assert SECTIONS["handbook/thesis-committee"][start:end] == "The advisor chairs it"


def test_a_quote_from_another_shown_section_than_the_one_named_is_invalid():
    (verdict,) = check_claims(answer(("The advisor chairs it.", 1, "The advisor chairs it")), SECTIONS)
    assert verdict.marked and not verdict.valid
    assert verdict.citation.problem == ("the quote is not in handbook/qualifying-exam "
                                        "(it is in handbook/thesis-committee)")


@pytest.mark.parametrize("number", [0, 3, -1, 12])
def test_a_number_that_names_no_shown_section_is_invalid(number):
    (verdict,) = check_claims(answer(("The advisor chairs it.", number, "The advisor chairs it")), SECTIONS)
    assert verdict.marked and not verdict.valid and verdict.marker == f"[{number}]"
    assert verdict.citation.problem == "names no section shown (sections 1 to 2 were shown)"


@pytest.mark.parametrize("quote", ["", "The committee has five members", "The advisor chairs the exam"])
def test_an_empty_or_unverified_quote_makes_the_marker_invalid(quote):
    (verdict,) = check_claims(answer(("The committee has five members.", 2, quote)), SECTIONS)
    assert verdict.marked and not verdict.valid
    assert verdict.citation.problem.startswith("the quote is not in handbook/thesis-committee")


def test_a_claim_without_a_number_has_no_marker():
    (verdict,) = check_claims(answer(("Ask the graduate office.", None, "")), SECTIONS)
    assert not verdict.marked and not verdict.valid and verdict.citation is None and verdict.marker == ""


def test_counts_rendering_and_hand_over_of_a_mixed_answer():
    llm = ScriptedLLM([reply(("The advisor chairs the committee.", 2, "The advisor chairs it"),
                             ("It has at least four members.", 2, "at least four members"),
                             ("The exam comes first.", 1, "The exam comes first"),
                             ("Ask the office for more.", None, ""))])
    result = model_cited_answer(llm, QUESTION, SECTIONS)
    assert result.ok and result.shown == tuple(SECTIONS)
    assert (result.n_claims, result.n_valid, result.n_invalid, result.n_unmarked) == (4, 2, 1, 1)
    assert result.handed_over
    assert result.problems == ["claim 3: [1] the quote is not in handbook/qualifying-exam", "claim 4: no marker"]
    assert result.render().splitlines() == [
        "The advisor chairs the committee. [2] It has at least four members. [2] The exam comes first. [1] "
        "Ask the office for more.",
        "[2] handbook/thesis-committee: \u201cThe advisor chairs it\u201d",
        "[1] handbook/qualifying-exam: \u201cThe exam comes first\u201d"]


def test_an_answer_whose_every_claim_has_a_valid_marker_is_not_handed_over():
    elided = "must be passed by ... the fourth semester"
    llm = ScriptedLLM([reply(("The advisor chairs it.", 2, "The advisor chairs it."),
                             ("It must be passed by the fourth semester.", 1, elided))])
    result = model_cited_answer(llm, QUESTION, SECTIONS)
    assert (result.n_claims, result.n_valid, result.n_invalid, result.n_unmarked) == (2, 2, 0, 0)
    assert not result.handed_over and result.problems == []


def test_an_answer_with_no_claims_is_handed_over():
    result = model_cited_answer(ScriptedLLM([reply()]), QUESTION, SECTIONS)
    assert result.ok and result.n_claims == 0 and result.handed_over


def test_a_reply_that_never_validates_is_handed_over_with_its_reasons():
    llm = ScriptedLLM(['{"claims": [{"sentence": "x"}]}', Completion('{"claims": [', "length", 100, 300, 1.0)])
    result = model_cited_answer(llm, QUESTION, SECTIONS)
    assert not result.ok and result.verdicts == () and result.handed_over
    assert len(result.errors) == 2 and "cut off" in result.errors[1]


def test_the_request_is_constrained_by_the_claims_schema_which_caps_the_claims():
    llm = ScriptedLLM([reply(("The advisor chairs it.", 2, "The advisor chairs it"))])
    model_cited_answer(llm, QUESTION, SECTIONS, max_tokens=77)
    (request,) = llm.requests
    assert request["json_schema"] == schema_for_model(ClaimedAnswer) and request["max_tokens"] == 77
    assert request["json_schema"]["properties"]["claims"]["maxItems"] == MAX_CLAIMS
    too_many = reply(*[("The advisor chairs it.", 2, "The advisor chairs it")] * (MAX_CLAIMS + 1))
    with pytest.raises(ValueError):
        ClaimedAnswer.model_validate_json(too_many)


def test_claim_fields_are_required():
    with pytest.raises(ValueError):
        Claim.model_validate({"sentence": "x", "quote": ""})


def test_the_saved_runs_verdicts_and_counts_are_check_claims_on_its_claims():
    header, rows = load_run(MODEL_CITATIONS)
    assert list(rows["id"]) == header["settings"]["questions"] == sorted(rows["id"])
    texts = {section.id: section.text for section in load_corpus()}
    for row in rows.itertuples():
        claims = [Claim(sentence=c["sentence"], source=c["source"], quote=c["quote"]) for c in row.claims]
        verdicts = check_claims(ClaimedAnswer(claims=claims), {sid: texts[sid] for sid in row.shown})
        assert [v.valid for v in verdicts] == [c["valid"] for c in row.claims], row.id
        assert (row.n_valid, row.n_invalid, row.n_unmarked) == (
            sum(v.valid for v in verdicts), sum(v.marked and not v.valid for v in verdicts),
            sum(not v.marked for v in verdicts)), row.id
        assert row.handed_over == (not row.valid_reply or not claims or row.n_valid < len(claims)), row.id
