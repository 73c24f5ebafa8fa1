"""Inline citations: an answer that cites the sections it was shown as [1], [2], and the check that each citation holds.

The grounded answer's quotes each name the section they were copied from
(`lib.quotes.Quote.section_id`), and `lib.quotes.verify_answer` has already checked every quote
against the sections the model was shown. A citation turns that into what a reader sees: the
answer followed by [n] markers, where n is the position of the cited section among the sections
shown to the model (in the order they were shown, from 1), and one line per citation with the
quote. The model's prompt does not change: the numbers are rendered from the quotes afterwards
(`lib.model_citations` has the model write a number after each claim instead, checked the same way).

A citation is valid when both hold:

- it points to a section that was retrieved and shown (not one the model made up or remembered);
- its quote verifies against *that* section (`QuoteVerdict.cited_ok`), not merely somewhere else.

One invalid citation makes the whole answer's citations invalid (`CitedAnswer.valid`), and the
assistant then hands the question over rather than show a source that does not say what it is
cited for. A reply that is not an answer from the documents (ASK, OUT_OF_SCOPE, HAND_OVER)
carries `FALLBACK_BANNER` and no citations (`fallback_reply`); a general answer given when the
handbook is silent (`lib.fallback_answers`) carries `GENERAL_ANSWER_BANNER`.

Markers, source lines and banners are written by code only. A model's text may hold look-alikes
(copied from a section that contains "[2]", or written to look like a checked answer), and a
reader cannot tell them from the real ones; `strip_markers` removes them from model text before
it is rendered next to the real ones.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lib.quotes import QuoteVerdict

__all__ = ["FALLBACK_BANNER", "GENERAL_ANSWER_BANNER", "Citation", "CitedAnswer", "strip_markers", "source_lines",
           "number_sections", "cite", "fallback_reply"]

FALLBACK_BANNER = "[Not an answer from the documents]"
"""The first words of every reply that is not a cited answer, so no one mistakes it for one."""

GENERAL_ANSWER_BANNER = "[Not from the handbook: a general answer, check with the office concerned]"
"""The first words of a fallback answer from general knowledge (`lib.fallback_answers`): the
handbook has no section on the question, and the reader must know it is not Quillmere's policy."""


_MARKER = r"\[\s*(?:\d+(?:\s*[,;\u2013-]\s*\d+)*|\?)\s*\]"
_SOURCE_LINE = re.compile(rf"^[ \t]*(?:{_MARKER}[ \t]*)+\S+:[ \t]*\u201c.*$\n?", re.MULTILINE)
_MARKERS = re.compile(rf"[ \t]*{_MARKER}")
_BANNER = re.compile(r"\s*\[\s*not (?:an answer from the documents|from the handbook)[^\]\n]*\]\s*", re.IGNORECASE)


def strip_markers(text: str) -> str:
    """Model-written `text` without what only code writes: lines shaped like a source line
    ("[2] handbook/x: \u201c...\u201d"), citation markers ("[1]", "[1, 2]", "[?]") and look-alikes of the two
    banners; surrounding whitespace is stripped. Text without them is returned stripped, otherwise unchanged.
    """
    text = _SOURCE_LINE.sub("", text)
    text = _BANNER.sub(" ", text)
    return _MARKERS.sub("", text).strip()


@dataclass(frozen=True)
class Citation:
    """One quote of an answer as a numbered citation.

    `number` is the cited section's position among the sections shown (from 1), None when
    the quote cites no section or one that was not shown. `span` is the quote's (start, end)
    offsets in the cited section when it verifies there, else None. `problem` says in words
    why the citation is not valid ("" when it is).
    """

    number: int | None
    section_id: str | None
    quote: str
    span: tuple[int, int] | None
    problem: str = ""

    @property
    def valid(self) -> bool:
        """True when the cited section was shown and the quote verifies against it."""
        return not self.problem

    @property
    def marker(self) -> str:
        """"[n]", or "[?]" when the cited section was not shown."""
        return f"[{self.number}]" if self.number is not None else "[?]"


@dataclass(frozen=True)
class CitedAnswer:
    """An answer with its citations, in the order of its quotes."""

    answer: str
    citations: tuple[Citation, ...]

    @property
    def valid(self) -> bool:
        """True when the answer cites at least one section and every citation is valid."""
        return bool(self.citations) and all(c.valid for c in self.citations)

    @property
    def n_valid(self) -> int:
        """How many citations are valid."""
        return sum(c.valid for c in self.citations)

    @property
    def problems(self) -> list[str]:
        """One line per invalid citation: its marker and why."""
        return [f"{c.marker} {c.problem}" for c in self.citations if not c.valid]

    def render(self, width: int = 80) -> str:
        """The answer followed by its markers, then one line per cited section with its first quote.

        Markers appear once each, in the order first cited; quotes are cut to `width` characters.
        Markers and banners the model wrote into the answer are removed first (`strip_markers`).
        """
        markers = list(dict.fromkeys(c.marker for c in self.citations))
        lines = [f"{strip_markers(self.answer)} {''.join(markers)}".rstrip()]
        return "\n".join(lines + source_lines(self.citations, width))


def source_lines(citations: Sequence[Citation], width: int = 80) -> list[str]:
    """One line per cited section, in the order first cited: its marker, its id and its first quote.

    Quotes are cut to `width` characters; a marker cited again adds no line.
    """
    lines, seen = [], set()
    for c in citations:
        if c.marker in seen:
            continue
        seen.add(c.marker)
        quote = " ".join(c.quote.split())
        quote = quote if len(quote) <= width else quote[: width - 1].rstrip() + "\u2026"
        lines.append(f"{c.marker} {c.section_id or '(no section)'}: \u201c{quote}\u201d")
    return lines


def number_sections(shown: Sequence[str]) -> dict[str, int]:
    """Section id -> its citation number: its position among the sections shown, from 1 (repeats keep the first)."""
    numbers: dict[str, int] = {}
    for section_id in shown:
        numbers.setdefault(section_id, len(numbers) + 1)
    return numbers


def cite(answer: str, verdicts: Sequence[QuoteVerdict], shown: Sequence[str]) -> CitedAnswer:
    """Number the quotes of a grounded answer by the sections shown, and check each citation.

    Args:
        answer: the answer's text.
        verdicts: `lib.quotes.verify_answer`'s verdicts on its quotes, checked against the
            sections shown, in the answer's order.
        shown: the ids of the sections shown to the model, in the order they were shown.
    """
    numbers = number_sections(shown)
    citations = []
    for verdict in verdicts:
        section_id = verdict.quote.section_id
        number = numbers.get(section_id) if section_id is not None else None
        if section_id is None:
            problem = "the quote cites no section"
        elif number is None:
            problem = f"cites {section_id}, which was not among the sections retrieved"
        elif verdict.cited_ok is not True:
            problem = (f"the quote is not in {section_id}" + (f" (it is in {verdict.found_in})" if verdict.found_in
                                                                else ""))
        else:
            problem = ""
        span = (verdict.check.start, verdict.check.end) if not problem else None
        citations.append(Citation(number, section_id, verdict.quote.text, span, problem))
    return CitedAnswer(answer, tuple(citations))


def fallback_reply(text: str) -> str:
    """A reply that is not a cited answer, behind `FALLBACK_BANNER`."""
    return f"{FALLBACK_BANNER} {text}"
