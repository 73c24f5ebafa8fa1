"""Inline citations (lib.citations): numbered by the order the sections were shown, each checked against its section."""
from __future__ import annotations

import pytest

from lib.citations import FALLBACK_BANNER, Citation, CitedAnswer, cite, fallback_reply, number_sections
from lib.quotes import GroundedAnswer, Quote, verify_answer

SECTIONS = {
    "handbook/thesis-committee": "The committee has at least four members with a faculty appointment. The advisor chairs it.",
    "handbook/qualifying-exam": "The qualifying exam must be passed by the end of the fourth semester.",
}
SHOWN = ("handbook/qualifying-exam", "handbook/thesis-committee")


def cited(*quotes: tuple[str, str | None], answer: str = "An answer") -> CitedAnswer:
    grounded = GroundedAnswer(answer=answer, quotes=[Quote(text=t, section_id=s) for t, s in quotes])
    return cite(grounded.answer, verify_answer(grounded, SECTIONS), SHOWN)


def test_sections_are_numbered_in_the_order_shown_from_one():
    assert number_sections(SHOWN) == {"handbook/qualifying-exam": 1, "handbook/thesis-committee": 2}
    assert number_sections(["a", "b", "a", "c"]) == {"a": 1, "b": 2, "c": 3}
    assert number_sections([]) == {}


def test_valid_citations_carry_their_number_and_the_span_in_the_cited_section():
    answer = cited(("The advisor chairs it.", "handbook/thesis-committee"),
                   ("passed by the end of the fourth semester", "handbook/qualifying-exam"))
    assert answer.valid and answer.n_valid == 2 and answer.problems == []
    first, second = answer.citations
    assert (first.number, second.number) == (2, 1)
    start, end = first.span
    assert SECTIONS["handbook/thesis-committee"][start:end] == "The advisor chairs it."
    lines = answer.render().splitlines()
    assert lines[0] == "An answer [2][1]"
    assert lines[1] == "[2] handbook/thesis-committee: \u201cThe advisor chairs it.\u201d"
    assert lines[2].startswith("[1] handbook/qualifying-exam: \u201cpassed by")


def test_a_section_cited_twice_gets_one_marker_and_one_line():
    answer = cited(("The advisor chairs it.", "handbook/thesis-committee"),
                   ("at least four members", "handbook/thesis-committee"))
    assert answer.valid and answer.render().splitlines() == [
        "An answer [2]", "[2] handbook/thesis-committee: \u201cThe advisor chairs it.\u201d"]


def test_a_quote_that_is_in_another_section_than_the_one_it_cites_is_not_valid():
    answer = cited(("The advisor chairs it.", "handbook/qualifying-exam"))
    (citation,) = answer.citations
    assert not answer.valid and citation.number == 1 and citation.span is None
    assert citation.problem == "the quote is not in handbook/qualifying-exam (it is in handbook/thesis-committee)"
    assert answer.problems == [f"[1] {citation.problem}"]


def test_a_citation_of_a_section_that_was_not_retrieved_is_not_valid():
    answer = cited(("The advisor chairs it.", "handbook/stipends"), ("The advisor chairs it.", "handbook/thesis-committee"))
    bad, good = answer.citations
    assert not answer.valid and answer.n_valid == 1
    assert bad.number is None and bad.marker == "[?]" and "not among the sections retrieved" in bad.problem
    assert good.valid and answer.render().splitlines()[0] == "An answer [?][2]"


@pytest.mark.parametrize("quote, section, problem", [
    ("The committee has five members", "handbook/thesis-committee", "the quote is not in handbook/thesis-committee"),
    ("The advisor chairs it.", None, "the quote cites no section"),
])
def test_a_quote_that_does_not_verify_or_cites_nothing_is_not_valid(quote, section, problem):
    answer = cited((quote, section))
    assert not answer.valid and answer.citations[0].problem == problem


def test_an_answer_without_citations_is_not_valid():
    answer = cited()
    assert not answer.valid and answer.citations == () and answer.render() == "An answer"


def test_a_citation_is_valid_exactly_when_it_has_no_problem():
    assert Citation(1, "s", "q", (0, 1)).valid
    assert not Citation(None, "s", "q", None, "cites s, which was not among the sections retrieved").valid


def test_a_fallback_reply_starts_with_the_banner():
    assert fallback_reply("Passing this on.") == f"{FALLBACK_BANNER} Passing this on."
