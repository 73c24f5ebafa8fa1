"""Quote verification: is a quoted passage really in the source, and where?

An answer that cites its sources is only as good as its quotes. A model can paraphrase,
change a number, or stitch two sentences together and still put the result in quotation
marks. `verify_quote` checks a quote against a source text in three steps, strictest first:

1. **exact**: the quote is a verbatim substring of the source;
2. **normalized**: it matches after Unicode NFKC, case folding, collapsing whitespace,
   removing invisible format characters and turning typographic quotes and dashes into
   ASCII ones (formatting, not wording);
3. **elided**: the quote uses an ellipsis ("...", "…", ". . .", "[...]") and every
   fragment of at least three words is found, in order, close together (at most
   `MAX_FRAGMENTS` fragments).

Offsets always point into the *original* source, so a notebook can highlight the passage.
Every match must start and end on a word and number boundary of the source: "10 days" is not
verified by "110 days", "legal" not by "illegal", "140 per month" not by "3,140 per month",
"90 per hour" not by "0.90 per hour" and "5 degrees" not by "-5 degrees" (see
`_cuts_word_or_number`; invisible characters such as a zero-width space inside a number do
not separate it).

Punctuation policy: one full stop or comma at the very end of a quote is forgiven when the
quote matches without it. It belongs to the sentence that quotes ("the office is 'in Room
4.112 of the Aldren Building.'"), and a ✓ never certified that a quote ends where the
source's sentence ends: the same words without the stop are a verbatim span. The match is
then reported as "normalized", with the reason saying so. Nothing else is forgiven, and a
stop that would end a number early ("up to 3." for "up to 3.5") still fails.

The module also defines the structured answer an LLM is asked to produce
(`GroundedAnswer`) and checks all of its quotes against a corpus (`verify_answer`).
"""
from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from lib.text import TYPOGRAPHIC_TO_ASCII, TextWithOrigins, normalize_text, normalize_with_origins

__all__ = [
    "QuoteKind", "MIN_FRAGMENT_WORDS", "MAX_FRAGMENTS", "QuoteCheck", "verify_quote", "Quote", "GroundedAnswer",
    "QuoteVerdict", "verify_answer", "render_verdicts", "verdicts_to_html",
]

QuoteKind = Literal["exact", "normalized", "elided", "not_found"]

MIN_FRAGMENT_WORDS = 3
"""Each fragment of an elided quote needs this many words: shorter ones match anywhere."""

MAX_FRAGMENTS = 50
"""An elided quote may have at most this many fragments: a real quotation leaves out a few
passages, not dozens, and the check costs one search of the source per fragment."""


_ELLIPSIS = re.compile(r"(?:\[\s*+)?(?:\u2026|\.(?:\s*+\.){2,})(?:\s*+\])?")
"""An ellipsis: "…", three or more dots (spaces allowed between them), optionally in [].

Every match starts at "[", "…" or "." and its whitespace runs are possessive (`*+`), so a
long run of spaces is scanned once, not once per starting position (linear time). The
spaces around an ellipsis stay in the fragments, which are stripped when normalised."""

_UNSPACED_SCRIPTS = "\u0e00-\u0e7f\u2e80-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
"""Thai, CJK and kana: scripts written without spaces, where every character is a word."""

_WORD = re.compile(rf"(?=\w)[{_UNSPACED_SCRIPTS}]|(?<![^\s{_UNSPACED_SCRIPTS}])[^\s{_UNSPACED_SCRIPTS}]*\w[^\s{_UNSPACED_SCRIPTS}]*")
"""A word: one character of an unspaced script, or a run of other non-space characters holding a
letter or digit. The lookbehind lets a run be tried only from its first character, so a long run
without any letter (40,000 dashes) costs one scan, not one per position (linear, not quadratic)."""
_UNSPACED_CHAR = re.compile(rf"[{_UNSPACED_SCRIPTS}]")


@dataclass(frozen=True)
class QuoteCheck:
    """The result of checking one quote against one source text.

    `kind` says how the quote matched ("not_found" when it did not). `start`/`end` are
    offsets into the original source (None when not found): for an elided quote they run
    from the start of the first fragment to the end of the last, and `spans` holds one
    (start, end) pair per fragment; for exact and normalized matches `spans` holds the
    single span. `reason` explains the verdict in words, for people reading a report.
    `dropped_mark` is the full stop or comma at the end of the quote that the match did without
    ("" when none: see the punctuation policy in the module docstring).
    """

    kind: QuoteKind
    start: int | None = None
    end: int | None = None
    spans: tuple[tuple[int, int], ...] = ()
    reason: str = ""
    dropped_mark: str = ""

    @property
    def ok(self) -> bool:
        """True when the quote was found in the source, in any of the three ways."""
        return self.kind != "not_found"


_normalized_source = lru_cache(maxsize=16)(normalize_with_origins)
"""`normalize_with_origins` for sources, cached: `verify_answer` checks many quotes against the same sections."""


def _is_word_character(character: str) -> bool:
    """A letter or digit of a script that separates words with spaces."""
    return character.isalnum() and not _UNSPACED_CHAR.match(character)


def _visible_index(haystack: str, position: int, step: int) -> int:
    """The first index `position`, `position + step`, ... whose character is not an invisible format
    character (Unicode category Cf: zero-width space, word joiner, soft hyphen, byte-order mark);
    -1 or len(haystack) when there is none. A zero-width space inside "3\u200b140" joins the digits
    on either side of it."""
    while 0 <= position < len(haystack) and unicodedata.category(haystack[position]) == "Cf":
        position += step
    return position


def _character(haystack: str, index: int) -> str:
    return haystack[index] if 0 <= index < len(haystack) else ""


def _is_inside_number(separator: str, digit_beyond: str) -> bool:
    """Whether `separator` is a decimal point or thousands separator, a "." or "," with the digit
    `digit_beyond` on its far side."""
    return separator in ".," and digit_beyond.isdecimal()


def _cuts_word_or_number(haystack: str, position: int) -> bool:
    """Whether a match that starts or ends at `position` cuts a word or a number of `haystack` in two.

    It does when the visible characters on either side are both letters or digits ("legal" in
    "illegal"), when they are a digit and a "." or "," that goes on into digits ("140" in "3,140",
    "90" in "0.90", "Room 4." in "Room 4.112"), or a sign and a digit ("5 degrees" in "-5 degrees").
    Invisible format characters between them are skipped.
    """
    left, right = _visible_index(haystack, position - 1, -1), _visible_index(haystack, position, 1)
    before, after = _character(haystack, left), _character(haystack, right)
    if not before or not after:
        return False
    if _is_word_character(before) and _is_word_character(after):
        return True
    if before.isdecimal() and _is_inside_number(after, _character(haystack, _visible_index(haystack, right + 1, 1))):
        return True
    if after.isdecimal() and _is_inside_number(before, _character(haystack, _visible_index(haystack, left - 1, -1))):
        return True
    return after.isdecimal() and before.translate(TYPOGRAPHIC_TO_ASCII) in ("+", "-")


def _occurrences(haystack: str, needle: str, is_boundary: Callable[[int], bool]) -> Iterator[int]:
    """Start positions of a non-empty `needle` in `haystack` that cut no word or number and lie on allowed boundaries.

    Overlapping occurrences are included: an elided quote may need a later one.

    Time: linear in len(haystack) + len(needle), with the scanning done by `str.find` and
    `str.startswith` in C. Searching again from each position after an occurrence would cost
    O(len(haystack) * len(needle)) for a periodic needle ("abab...") inside a long run, which
    occurs at nearly every position. Instead, with p the needle's smallest period: two
    occurrences are at least p apart, and one that overlaps the previous by more than p
    characters is p further on (Fine and Wilf's theorem). So after an occurrence at i, one
    comparison of p characters says whether the next is at i + p, and otherwise the search
    resumes past the overlap, at i + max(p, len(needle) - p) + 1.
    """
    length = len(needle)
    position = haystack.find(needle)
    period = None
    while position != -1:
        if _valid_occurrence(haystack, length, position, is_boundary):
            yield position
        if period is None:
            period = _smallest_period(needle)
        if haystack.startswith(needle[length - period:], position + length):
            position += period
        else:
            position = haystack.find(needle, position + max(period, length - period) + 1)


def _valid_occurrence(haystack: str, length: int, position: int, is_boundary: Callable[[int], bool]) -> bool:
    end = position + length
    return (is_boundary(position) and is_boundary(end)
            and not _cuts_word_or_number(haystack, position) and not _cuts_word_or_number(haystack, end))


def _smallest_period(text: str) -> int:
    """The smallest p > 0 with text[i] == text[i + p] for every i (len(text) when there is none shorter).

    From the Knuth-Morris-Pratt failure function: len(text) minus its longest proper border.
    """
    border_of = [0] * len(text)  # border_of[k]: longest proper border of text[:k + 1]
    border = 0
    for k in range(1, len(text)):
        while border and text[k] != text[border]:
            border = border_of[border - 1]
        if text[k] == text[border]:
            border += 1
        border_of[k] = border
    return len(text) - border_of[-1]


def _not_found(reason: str) -> QuoteCheck:
    return QuoteCheck(kind="not_found", reason=reason)


def _span_of(source: TextWithOrigins, start: int, length: int) -> tuple[int, int]:
    """Map a normalised span back to offsets in the original text."""
    return source.origin_start[start], source.origin_end[start + length - 1]


def _match_exact(quote: str, source: str) -> QuoteCheck | None:
    def not_inside_combining_sequence(position: int) -> bool:
        return position == len(source) or not unicodedata.combining(source[position])

    start = next(_occurrences(source, quote, not_inside_combining_sequence), None)
    if start is None:
        return None
    span = (start, start + len(quote))
    return QuoteCheck("exact", span[0], span[1], (span,), "verbatim substring of the source")


def _match_normalized(quote: str, source: TextWithOrigins) -> QuoteCheck | None:
    start = next(_occurrences(source.text, quote, source.is_unit_boundary), None)
    if start is None:
        return None
    span = _span_of(source, start, len(quote))
    reason = "matches after normalising case, whitespace, Unicode forms, quotes and dashes"
    return QuoteCheck("normalized", span[0], span[1], (span,), reason)


def _match_elided(fragments: list[str], source: TextWithOrigins, max_gap: int) -> QuoteCheck:
    """Place every fragment in order, without overlap, each gap at most `max_gap` source characters.

    Dynamic programming over occurrences: an occurrence of fragment i+1 is reachable when
    some reachable occurrence of fragment i ends before it starts, close enough. Among
    those predecessors the one ending last leaves the smallest gap, so a sorted search finds
    it (for all occurrences at once, in numpy). Each distinct fragment is searched once.
    This finds a placement whenever one exists (greedy earliest matches can miss one
    when a later occurrence of an early fragment is the only one close to the next).
    """
    if len(fragments) > MAX_FRAGMENTS:
        return _not_found(f"the quote has {len(fragments)} fragments; elided quotes may have at most "
                          f"{MAX_FRAGMENTS} (MAX_FRAGMENTS in lib/quotes.py)")
    for number, fragment in enumerate(fragments, start=1):
        words = len(_WORD.findall(fragment))
        if words < MIN_FRAGMENT_WORDS:
            return _not_found(
                f"fragment {number} ({fragment!r}) has {words} word(s); "
                f"elided quotes need at least {MIN_FRAGMENT_WORDS} per fragment"
            )
    if sum(len(fragment) for fragment in fragments) > len(source.text):  # they could not fit without overlap
        return _not_found(f"the {len(fragments)} fragments are longer together than the source")
    found = {fragment: np.fromiter(_occurrences(source.text, fragment, source.is_unit_boundary), dtype=np.int64)
             for fragment in set(fragments)}
    for number, fragment in enumerate(fragments, start=1):
        if not len(found[fragment]):
            return _not_found(f"fragment {number} ({fragment!r}) is not in the source")

    origin_start, origin_end = np.asarray(source.origin_start), np.asarray(source.origin_end)
    # reachable[i]: the normalised starts of fragment i's reachable occurrences, shape (n_i,), and
    # for each the index of its predecessor in reachable[i - 1], shape (n_i,)
    reachable = [(found[fragments[0]], np.full(len(found[fragments[0]]), -1))]
    for previous_fragment, fragment in zip(fragments, fragments[1:]):
        starts = found[fragment]
        previous_ends = reachable[-1][0] + len(previous_fragment)
        predecessor = np.searchsorted(previous_ends, starts, side="right") - 1
        gap = origin_start[starts] - origin_end[previous_ends[np.maximum(predecessor, 0)] - 1]
        keep = (predecessor >= 0) & (gap <= max_gap)
        if not keep.any():
            return _not_found(
                f"the fragments are not all in the source in this order with gaps of at most {max_gap} characters"
            )
        reachable.append((starts[keep], predecessor[keep]))

    spans: list[tuple[int, int]] = []
    index = 0  # the earliest placement of the last fragment
    for fragment, (starts, predecessors) in zip(reversed(fragments), reversed(reachable)):
        spans.append(_span_of(source, int(starts[index]), len(fragment)))
        index = int(predecessors[index])
    spans.reverse()
    found_in_order = "1 fragment found" if len(spans) == 1 else f"{len(spans)} fragments found in order"
    reason = f"{found_in_order}, gaps of at most {max_gap} characters"
    return QuoteCheck("elided", spans[0][0], spans[-1][1], tuple(spans), reason)


def _check_max_gap(max_gap: int) -> None:
    if not isinstance(max_gap, int) or isinstance(max_gap, bool):
        raise TypeError(f"max_gap must be an int, got {type(max_gap).__name__}")
    if max_gap < 0:
        raise ValueError(f"max_gap must be >= 0 (characters between fragments), got {max_gap}")


def verify_quote(quote: str, source: str, *, max_gap: int = 400) -> QuoteCheck:
    """Check that `quote` is really in `source`: exactly, after normalisation, or with elisions.

    Args:
        quote: the quoted passage, as the model wrote it.
        source: the text it claims to quote.
        max_gap: for elided quotes, the most source characters allowed between the end of
            one fragment and the start of the next (stops "stitching" distant sentences).

    Returns:
        A `QuoteCheck`; `.ok` is True when the quote was found. An empty quote, or one
        without any words (such as "..." alone), is simply not found. A quote of one or
        two words can match exactly (it *is* verbatim); deciding on a minimum quote
        length is the caller's job.

    Raises:
        TypeError: if `quote` or `source` is not a str, or `max_gap` is not an int.
        ValueError: if `max_gap` is negative.

    Time is linear in len(quote) + len(source): the regular expressions never rescan a run
    from each of its positions, normalising is one pass, and searching stays linear when a
    needle keeps recurring (see `_occurrences`). An elided quote adds one search per distinct
    fragment, and has at most `MAX_FRAGMENTS` of them (more are not found, with the limit in
    the reason), so it too is linear in the source.
    """
    if not isinstance(quote, str):
        raise TypeError(f"quote must be a str, got {type(quote).__name__}")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    _check_max_gap(max_gap)

    quote = quote.strip()
    if not quote:
        return _not_found("the quote is empty")
    if not _WORD.search(quote):  # e.g. only "...": it would match any ellipsis in the source
        return _not_found("the quote contains no words")
    check = _match_as_written(quote, source, max_gap)
    shorter = quote[:-1].rstrip()
    if check.ok or quote[-1] not in ".," or shorter.endswith((".", "\u2026")):  # an ellipsis stays
        return check
    trimmed = _match_as_written(shorter, source, max_gap)
    if not trimmed.ok:
        return check
    reason = (f"{trimmed.reason}, without the final {quote[-1]!r}: the punctuation of the sentence "
              "that quotes it, not of the source")
    return replace(trimmed, kind="normalized" if trimmed.kind == "exact" else trimmed.kind, reason=reason,
                   dropped_mark=quote[-1])


def _match_as_written(quote: str, source: str, max_gap: int) -> QuoteCheck:
    """`verify_quote` for a stripped quote that holds a word, before forgiving a final full stop or comma."""
    exact = _match_exact(quote, source)
    if exact is not None:
        return exact
    normalized_source = _normalized_source(source)
    normalized_quote = normalize_text(quote)
    normalized = _match_normalized(normalized_quote, normalized_source) if normalized_quote else None
    if normalized is not None:
        return normalized
    pieces = _ELLIPSIS.split(quote)
    if len(pieces) == 1:
        return _not_found("not in the source, even after normalisation")
    fragments = [normalize_text(piece) for piece in pieces]
    return _match_elided([fragment for fragment in fragments if fragment], normalized_source, max_gap)


class Quote(BaseModel):
    """One verbatim quotation supporting an answer."""

    text: str = Field(
        description="A passage copied word for word from one section of the sources. "
        "Use '...' only to leave out words between two parts of the same passage."
    )
    section_id: str | None = Field(
        default=None,
        description="The id of the section the passage is copied from, e.g. 'handbook/thesis-committee'.",
    )


class GroundedAnswer(BaseModel):
    """An answer together with the quotations that support it."""

    answer: str = Field(
        description="The answer to the question, using only what the quotes support. "
        "If the sources do not answer the question, say so."
    )
    quotes: list[Quote] = Field(
        description="Verbatim quotations from the sources that support the answer; "
        "empty if the sources do not contain the answer."
    )


@dataclass(frozen=True)
class QuoteVerdict:
    """The verdict on one quote of a `GroundedAnswer`.

    `found_in` is the id of the section the quote was found in (None if in none).
    `cited_ok` is True when the cited section contains the quote, False when it does not
    (or does not exist), and None when the quote cited no section.
    """

    quote: Quote
    check: QuoteCheck
    found_in: str | None
    cited_ok: bool | None

    @property
    def ok(self) -> bool:
        """True when the quote was found somewhere in the sections."""
        return self.check.ok


def _verify_one(quote: Quote, sections: Mapping[str, str], max_gap: int) -> QuoteVerdict:
    cited = quote.section_id
    cited_check = None
    if cited is not None and cited in sections:
        cited_check = verify_quote(quote.text, sections[cited], max_gap=max_gap)
        if cited_check.ok:
            return QuoteVerdict(quote, cited_check, found_in=cited, cited_ok=True)
    cited_ok = None if cited is None else False
    for section_id in sorted(sections):
        if section_id == cited:
            continue
        check = verify_quote(quote.text, sections[section_id], max_gap=max_gap)
        if check.ok:
            return QuoteVerdict(quote, check, found_in=section_id, cited_ok=cited_ok)
    check = cited_check or _not_found(f"not found in any of the {len(sections)} sections")
    return QuoteVerdict(quote, check, found_in=None, cited_ok=cited_ok)


def verify_answer(answer: GroundedAnswer, sections: Mapping[str, str], *, max_gap: int = 400) -> list[QuoteVerdict]:
    """Verify every quote of `answer` against `sections` (section id -> section text).

    A quote is checked against its cited section first (when it names one that exists);
    otherwise, or if it is not there, every section is searched in id order, so the
    result is deterministic. One `QuoteVerdict` per quote, in the answer's order.

    Raises:
        TypeError: if `answer` is not a GroundedAnswer or `sections` is not a mapping of str to str.
        ValueError: if `max_gap` is negative.
    """
    if not isinstance(answer, GroundedAnswer):
        raise TypeError(f"answer must be a GroundedAnswer, got {type(answer).__name__}")
    if not isinstance(sections, Mapping):
        raise TypeError(f"sections must be a mapping of section id to text, got {type(sections).__name__}")
    for section_id, text in sections.items():
        if not isinstance(text, str):
            raise TypeError(f"sections[{section_id!r}] must be a str, got {type(text).__name__}")
    _check_max_gap(max_gap)
    return [_verify_one(quote, sections, max_gap) for quote in answer.quotes]


def _shorten(text: str, width: int = 80) -> str:
    """Collapse whitespace and cut `text` to at most `width` characters, ending in "…" if cut."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1].rstrip() + "\u2026"


def _verdict_cells(verdict: QuoteVerdict) -> tuple[str, str, str, str]:
    """Mark, kind, where it was found (with a wrong citation noted) and the shortened quote."""
    mark = "\u2713" if verdict.ok else "\u2717"
    where = verdict.found_in or "no source"
    if verdict.cited_ok is False:
        where += f" (cited {verdict.quote.section_id})"
    return mark, verdict.check.kind, where, _shorten(verdict.quote.text)


def render_verdicts(verdicts: Sequence[QuoteVerdict]) -> str:
    """Plain text, one line per quote: ✓/✗, how it matched, where, and the quote (≤ 80 chars)."""
    if not verdicts:
        return "(no quotes to verify)"
    lines = []
    for verdict in verdicts:
        mark, kind, where, text = _verdict_cells(verdict)
        lines.append(f'{mark} {kind:<10} {where}  "{text}"')
    return "\n".join(lines)


def verdicts_to_html(verdicts: Sequence[QuoteVerdict]) -> str:
    """The same report as `render_verdicts`, as an HTML table with green ✓ and red ✗ marks."""
    if not verdicts:
        return "<p><em>(no quotes to verify)</em></p>"
    rows = []
    for verdict in verdicts:
        mark, kind, where, text = _verdict_cells(verdict)
        colour = "#1a7f37" if verdict.ok else "#cf222e"
        rows.append(
            f'<tr><td style="color:{colour};font-weight:bold">{mark}</td>'
            f"<td>{html.escape(kind)}</td><td><code>{html.escape(where)}</code></td>"
            f"<td>&ldquo;{html.escape(text)}&rdquo;</td></tr>"
        )
    header = "<tr><th></th><th>match</th><th>section</th><th>quote</th></tr>"
    return f"<table>{header}{''.join(rows)}</table>"
