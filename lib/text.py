"""When two texts are the same: the one text normaliser of the workbook, and the answer check built on it.

- `normalize_text`: the form quotes and sources are compared in (`lib.quotes`), and the
  first step of every other comparison: Unicode NFKC, case folding, typographic quotes and
  dashes as ASCII ones, every run of whitespace as one space.
- `normalize_with_origins`: the same, remembering which original characters produced each
  normalised one, so a match in normalised text maps back to exact offsets.
- `normalize_answer`, `matches_gold`: the rule that says whether a short answer is right
  (notebooks 07, 10 and the assistant of 18): `normalize_text`, then numbers written one
  way ("1,200", "three" -> "1200", "3") and punctuation as spaces.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "TYPOGRAPHIC_TO_ASCII", "TextWithOrigins", "fold", "normalize_with_origins", "normalize_text",
    "normalize_answer", "matches_gold",
]

TYPOGRAPHIC_TO_ASCII = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),  # ‘ ’ ‚ ‛ ′
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"'),  # “ ” „ ‟ ″
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),  # ‐ ‑ ‒ – — ― −
    }
)
"""Typographic quotes, primes and dashes -> their ASCII forms."""


@dataclass(frozen=True)
class TextWithOrigins:
    """Normalised text plus, per character, the original span it came from.

    `origin_start[k]`/`origin_end[k]` bound the original characters that produced
    normalised character k. One original character can produce several ("ﬁ" -> "fi"),
    and a run of whitespace produces a single space.
    """

    text: str
    origin_start: list[int]
    origin_end: list[int]

    def is_unit_boundary(self, position: int) -> bool:
        """Whether a match may begin or end at `position` without splitting an original character."""
        return (
            position in (0, len(self.text))
            or self.origin_start[position] != self.origin_start[position - 1]
        )


def fold(cluster: str) -> str:
    """Normalise one character (with its combining marks): typographic -> ASCII, NFKC, casefold.

    Characters of Unicode category No (superscript and subscript digits, circled numbers,
    fractions) keep their compatibility form: NFKC would turn "10³" into "103", a different
    number. Decimal digits of other widths (fullwidth "１４") are the same digits and fold.
    """
    ascii_punctuation = cluster.translate(TYPOGRAPHIC_TO_ASCII)
    form = "NFC" if unicodedata.category(cluster[0]) == "No" else "NFKC"
    folded = unicodedata.normalize(form, ascii_punctuation).casefold()
    return folded.translate(TYPOGRAPHIC_TO_ASCII)


def normalize_with_origins(text: str) -> TextWithOrigins:
    """Normalise `text` (see `normalize_text`, without the final strip) and remember where each
    output character came from.

    Works one character at a time (a base character together with the combining marks
    that follow it), so every normalised character maps back to an exact original span.
    """
    characters: list[str] = []
    origin_start: list[int] = []
    origin_end: list[int] = []
    position = 0
    while position < len(text):
        cluster_end = position + 1
        while cluster_end < len(text) and unicodedata.combining(text[cluster_end]):
            cluster_end += 1
        for character in fold(text[position:cluster_end]):
            if unicodedata.category(character) == "Cf":  # invisible: zero-width space, soft hyphen, BOM, ...
                continue
            if not character.isspace():
                characters.append(character)
            elif characters and characters[-1] == " ":
                origin_end[-1] = cluster_end  # extend the current whitespace run
                continue
            else:
                characters.append(" ")
            origin_start.append(position)
            origin_end.append(cluster_end)
        position = cluster_end
    return TextWithOrigins("".join(characters), origin_start, origin_end)


def normalize_text(text: str) -> str:
    """The form texts are compared in: NFKC, case-folded, ASCII quotes and dashes, every run
    of whitespace as one space, no leading or trailing space.

    Useful to show why a quote matched, and to check that the span a `lib.quotes.QuoteCheck`
    points at normalises to the same text as the quote.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return normalize_with_origins(text).text.strip()


_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "thirteen": "13", "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17",
    "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40",
    "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90",
}
_THOUSANDS_SEPARATOR = re.compile(r"(?<=\d),(?=\d{3}\b)")
_NOT_WORD = re.compile(r"[^a-z0-9.+]+")


def normalize_answer(text: str) -> str:
    """A short answer reduced to what should decide whether it matches another.

    `normalize_text` first (so full-width digits and ligatures become plain, and case is
    folded), then thousands separators dropped ("1,200" -> "1200"), number words up to
    ninety-nine written as digits ("three" -> "3", "thirty-six" -> "36"), every run of other
    characters (punctuation, hyphens, spaces) a single space. Dots and "+" are kept because
    they carry meaning in "3.0", "Room 4.112" and "B+"; a dot that ends the answer is dropped.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    text = _THOUSANDS_SEPARATOR.sub("", normalize_text(text))
    words: list[str] = []
    previous_was_tens = False
    for word in _NOT_WORD.sub(" ", text).split():
        word = word.strip(".")
        if not word:
            continue
        number = _NUMBER_WORDS.get(word)
        if previous_was_tens and number is not None and len(number) == 1:
            words[-1] = words[-1][0] + number  # "thirty six" -> "36"
            previous_was_tens = False
            continue
        previous_was_tens = number is not None and len(number) == 2 and number.endswith("0") and number != "10"
        words.append(number or word)
    return " ".join(words)


def matches_gold(answer: str, gold: str) -> bool:
    """True when the normalised gold answer occurs in the normalised answer, as whole words.

    The rule behind "the greedy answer is right": "48 credits in total" matches gold
    "48 credits"; "1200" matches "1,200"; "3 weeks" matches "three weeks"; "148 credits"
    does not match "48 credits" (whole words only). It is strict in one way that matters:
    an answer that says the same in other words ("at least four" vs "four or more") counts
    as wrong. An empty gold answer raises ValueError.
    """
    gold_words = normalize_answer(gold)
    if not gold_words:
        raise ValueError(f"gold answer {gold!r} is empty after normalisation")
    return f" {gold_words} " in f" {normalize_answer(answer)} "
