"""Quote verification: is a quoted passage really in the source, and where?

An answer that cites its sources is only as good as its quotes. A model can paraphrase,
change a number, or stitch two sentences together and still put the result in quotation
marks. `verify_quote` checks a quote against a source text in three steps, strictest first:

1. **exact**: the quote is a verbatim substring of the source;
2. **normalized**: it matches after Unicode NFKC, case folding, collapsing whitespace and
   turning typographic quotes and dashes into ASCII ones (formatting, not wording);
3. **elided**: the quote uses an ellipsis ("...", "…", ". . .", "[...]") and every
   fragment of at least three words is found, in order, close together.

Offsets always point into the *original* source, so a notebook can highlight the passage.
Every match must start and end on word edges: "10 days" is not verified by "110 days",
and "legal" is not verified by "illegal".

The module also defines the structured answer an LLM is asked to produce
(`GroundedAnswer`) and checks all of its quotes against a corpus (`verify_answer`).
"""
from __future__ import annotations

import bisect
import html
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field

from lib.text import TextWithOrigins, normalize_text, normalize_with_origins

QuoteKind = Literal["exact", "normalized", "elided", "not_found"]

MIN_FRAGMENT_WORDS = 3
"""Each fragment of an elided quote needs this many words: shorter ones match anywhere."""

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
    """

    kind: QuoteKind
    start: int | None = None
    end: int | None = None
    spans: tuple[tuple[int, int], ...] = ()
    reason: str = ""

    @property
    def ok(self) -> bool:
        """True when the quote was found in the source, in any of the three ways."""
        return self.kind != "not_found"


_normalized_source = lru_cache(maxsize=16)(normalize_with_origins)
"""`normalize_with_origins` for sources, cached: `verify_answer` checks many quotes against the same sections."""


def _is_word_character(character: str) -> bool:
    """A letter or digit of a script that separates words with spaces."""
    return character.isalnum() and not _UNSPACED_CHAR.match(character)


def _on_word_edges(haystack: str, start: int, end: int) -> bool:
    """Whether haystack[start:end] neither starts nor ends in the middle of a word."""
    starts_mid_word = start > 0 and _is_word_character(haystack[start - 1]) and _is_word_character(haystack[start])
    ends_mid_word = end < len(haystack) and _is_word_character(haystack[end - 1]) and _is_word_character(haystack[end])
    return not (starts_mid_word or ends_mid_word)


_FIND_CALLS_BEFORE_SCAN = 32
"""After this many `str.find` calls for one needle, `_occurrences` finds the rest in one linear scan."""


def _occurrences(haystack: str, needle: str, is_boundary: Callable[[int], bool]) -> Iterator[int]:
    """Start positions of `needle` in `haystack` that lie on word edges and allowed boundaries.

    Overlapping occurrences are included: an elided quote may need a later one.

    Time: each `str.find` is linear (CPython switches to the two-way algorithm for hard
    cases), but a periodic needle ("aaaa...", "abab...") inside a long run has an
    occurrence at nearly every position, and searching again after each rejected one would
    cost O(len(haystack) * len(needle)). So after _FIND_CALLS_BEFORE_SCAN searches the
    remaining occurrences come from one Knuth-Morris-Pratt scan, O(len(haystack) + len(needle)):
    the whole search stays linear.
    """
    position = haystack.find(needle)
    calls = 1
    while position != -1:
        if _valid_occurrence(haystack, needle, position, is_boundary):
            yield position
        if calls == _FIND_CALLS_BEFORE_SCAN:
            for later in _all_occurrences(haystack, needle, position + 1):
                if _valid_occurrence(haystack, needle, later, is_boundary):
                    yield later
            return
        position = haystack.find(needle, position + 1)
        calls += 1


def _valid_occurrence(haystack: str, needle: str, position: int, is_boundary: Callable[[int], bool]) -> bool:
    end = position + len(needle)
    return is_boundary(position) and is_boundary(end) and _on_word_edges(haystack, position, end)


def _all_occurrences(haystack: str, needle: str, start: int) -> Iterator[int]:
    """Every start position >= `start` of a non-empty `needle` in `haystack` (Knuth-Morris-Pratt, linear)."""
    failure = [0] * len(needle)  # failure[k]: longest proper border of needle[:k + 1]
    border = 0
    for k in range(1, len(needle)):
        while border and needle[k] != needle[border]:
            border = failure[border - 1]
        if needle[k] == needle[border]:
            border += 1
        failure[k] = border
    matched = 0
    for index in range(start, len(haystack)):
        while matched and haystack[index] != needle[matched]:
            matched = failure[matched - 1]
        if haystack[index] == needle[matched]:
            matched += 1
        if matched == len(needle):
            yield index - len(needle) + 1
            matched = failure[matched - 1]


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
    those predecessors the one ending last leaves the smallest gap, so a bisect finds it.
    This finds a placement whenever one exists (greedy earliest matches can miss one
    when a later occurrence of an early fragment is the only one close to the next).
    """
    for number, fragment in enumerate(fragments, start=1):
        words = len(_WORD.findall(fragment))
        if words < MIN_FRAGMENT_WORDS:
            return _not_found(
                f"fragment {number} ({fragment!r}) has {words} word(s); "
                f"elided quotes need at least {MIN_FRAGMENT_WORDS} per fragment"
            )
    if sum(len(fragment) for fragment in fragments) > len(source.text):  # they could not fit without overlap
        return _not_found(f"the {len(fragments)} fragments are longer together than the source")
    occurrences = [list(_occurrences(source.text, fragment, source.is_unit_boundary)) for fragment in fragments]
    for number, (fragment, starts) in enumerate(zip(fragments, occurrences), start=1):
        if not starts:
            return _not_found(f"fragment {number} ({fragment!r}) is not in the source")

    # reachable[i]: (normalised start, index of predecessor in reachable[i-1]) pairs
    reachable: list[list[tuple[int, int]]] = [[(start, -1) for start in occurrences[0]]]
    for previous_fragment, starts in zip(fragments, occurrences[1:]):
        previous_ends = [start + len(previous_fragment) for start, _ in reachable[-1]]
        current: list[tuple[int, int]] = []
        for start in starts:
            predecessor = bisect.bisect_right(previous_ends, start) - 1
            if predecessor < 0:
                continue
            gap = source.origin_start[start] - source.origin_end[previous_ends[predecessor] - 1]
            if gap <= max_gap:
                current.append((start, predecessor))
        if not current:
            return _not_found(
                f"the fragments are not all in the source in this order with gaps of at most {max_gap} characters"
            )
        reachable.append(current)

    spans: list[tuple[int, int]] = []
    index = 0  # the earliest placement of the last fragment
    for fragment, placements in zip(reversed(fragments), reversed(reachable)):
        start, index = placements[index]
        spans.append(_span_of(source, start, len(fragment)))
    spans.reverse()
    reason = f"{len(spans)} fragments found in order, gaps of at most {max_gap} characters"
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

    Time is linear in len(quote) + len(source) for exact and normalised matches: the
    regular expressions never rescan a run from each of its positions, normalising is one
    pass, and searching switches to one linear scan when a needle keeps recurring (see
    `_occurrences`). An elided quote adds one search per fragment, O(fragments * len(source)),
    where fragments that could not fit in the source together are refused before searching.
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
