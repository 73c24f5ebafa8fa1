"""Constrained answers: short codes for labels, GBNF grammars and JSON schemas.

Why codes. Asked to name one of BANKING77's 77 intents, a model spends several tokens
per answer, and many names share their first tokens ("card_", "top_up_"), so the
probabilities at the first step mix many labels together. We give each label a code
such as "C-F": group letter C, a dash, intent letter F within group C. With a grammar
that allows exactly the valid codes, the answer is decided in two single-letter steps,
first the group and then the intent in that group, and the log-probabilities at each
step are a clean distribution over a handful of letters (see `lib.logprobs`).

What is here:
- `assign_codes`, `letters`, `parse_code`: labels to codes and back.
- `gbnf_for_codes`, `gbnf_for_options`: GBNF grammars (llama.cpp syntax) allowing
  exactly the given codes or strings, with nothing before or after them.
- `schema_for_model`: JSON schemas for llama.cpp's JSON-schema-to-grammar
  converter (`response_format={"type": "json_object", "schema": ...}`).
- `check_grammar`, `GrammarConstraint`: llama.cpp's own parser and sampler for a GBNF
  grammar (the embedded backend's constrained generation, `lib.backends.embedded`).

The label groups the codes are built from (`LabelGroups`, `load_label_groups`) live with
the datasets, in `lib.datasets`.
"""
from __future__ import annotations

import ctypes
import re
import string
from types import ModuleType
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pydantic

from lib.datasets import repeated_items

__all__ = [
    "MAX_LETTERS", "letters", "assign_codes", "parse_code", "gbnf_for_codes", "gbnf_for_options",
    "gbnf_for_options_or_name", "schema_for_model", "MAX_GRAMMAR_NESTING", "MAX_REPETITION", "MAX_REPEATED_COPIES",
    "check_grammar", "GrammarConstraint",
]

MAX_LETTERS = 26
"""A–Z: the most groups, intents per group or lettered options we can name."""

_CODE_PATTERN = re.compile(r"[A-Z]-[A-Z]")

_GBNF_STRING_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

# Keywords that only annotate a schema. llama-cpp-python's converter ignores them when a
# node also says what it holds ("type", "enum", "$ref", ...), but a node made only of
# them, which pydantic writes for a field typed `Any` ({"title": "Payload"}), fails with
# "Unrecognized schema". Without them such a node is `{}`, which the converter accepts
# (as "any JSON object": a narrower grammar than Any, but one that works).
_ANNOTATION_KEYWORDS = frozenset({"title", "description", "default", "examples"})
# Keywords whose value maps names to schemas: the names are data, not keywords.
_NAMED_SCHEMA_KEYWORDS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
# Keywords whose value is JSON data, copied as it is.
_VALUE_KEYWORDS = frozenset({"enum", "const"})


def letters(n: int) -> list[str]:
    """The first `n` capital letters, to label `n` options: letters(3) == ["A", "B", "C"]."""
    if not 0 <= n <= MAX_LETTERS:
        raise ValueError(f"n must be between 0 and {MAX_LETTERS} (one letter each), got {n}")
    return list(string.ascii_uppercase[:n])


def assign_codes(groups: dict[str, list[str]]) -> dict[str, str]:
    """Give every label a code "<group letter>-<intent letter>"; returns code -> label.

    Groups get letters A, B, C, ... in the order given, and the labels inside each group
    get A, B, C, ... in the order given, so {"cards": ["card_arrival", ...], ...} gives
    {"A-A": "card_arrival", ...}. The order is the caller's choice and is kept, so the
    same groups always give the same codes.
    """
    if not groups:
        raise ValueError("groups is empty; give at least one group of labels")
    if len(groups) > MAX_LETTERS:
        raise ValueError(
            f"groups has {len(groups)} groups; codes have one letter per group, so at most {MAX_LETTERS}"
        )
    codes: dict[str, str] = {}
    for group_letter, (group, labels) in zip(letters(len(groups)), groups.items()):
        if not labels:
            raise ValueError(f"groups[{group!r}] is empty; every group needs at least one label")
        if len(labels) > MAX_LETTERS:
            raise ValueError(
                f"groups[{group!r}] has {len(labels)} labels; at most {MAX_LETTERS} fit one letter each"
            )
        for intent_letter, label in zip(letters(len(labels)), labels):
            codes[f"{group_letter}-{intent_letter}"] = label
    repeated = repeated_items(codes.values())
    if repeated:
        raise ValueError(
            f"groups lists these labels more than once: {repeated}; each label needs exactly one code"
        )
    return codes


def parse_code(text: str, codes: Iterable[str]) -> str | None:
    """The code a reply gives, or None when the reply is not exactly one of `codes`.

    Only surrounding whitespace is forgiven: "C-F\\n" gives "C-F", but "c-f", "C-F." and
    "C-F card_arrival" give None. This is how we check replies generated without a
    grammar, and count how often an unconstrained model leaves the format.
    """
    reply = text.strip()
    return reply if reply in set(codes) else None


def gbnf_for_codes(codes: Iterable[str]) -> str:
    """A GBNF grammar whose only sentences are the given codes ("A-C", "B-A", ...).

    The grammar goes group letter, "-", intent letter, and the intent letters allowed
    depend on the group chosen, so every step is one letter the model picks from a small
    set: first among the groups, then among the intents of that group. Nothing else can
    be generated, not even whitespace or a newline after the code. For codes A-A, A-B,
    B-A the grammar is:

        root ::= group-A | group-B
        group-A ::= "A" "-" [AB]
        group-B ::= "B" "-" [A]
    """
    code_list = list(codes)
    if not code_list:
        raise ValueError("codes is empty; a grammar needs at least one code")
    malformed = [code for code in code_list if not _CODE_PATTERN.fullmatch(code)]
    if malformed:
        raise ValueError(f"codes must look like 'C-F' (capital letter, '-', capital letter); got {malformed}")
    repeated = repeated_items(code_list)
    if repeated:
        raise ValueError(f"codes lists these more than once: {repeated}")
    intent_letters: dict[str, list[str]] = {}
    for code in sorted(code_list):
        group_letter, intent_letter = code.split("-")
        intent_letters.setdefault(group_letter, []).append(intent_letter)
    rules = ["root ::= " + " | ".join(f"group-{group}" for group in intent_letters)]
    rules += [
        f'group-{group} ::= "{group}" "-" [{"".join(allowed)}]' for group, allowed in intent_letters.items()
    ]
    return "\n".join(rules)


def _gbnf_string_literal(text: str) -> str:
    """`text` as a double-quoted GBNF string literal that matches exactly `text`.

    Quotes, backslashes, newlines, carriage returns and tabs get their backslash escapes;
    any other character outside printable ASCII is written as a code point escape
    (\\uXXXX, or \\UXXXXXXXX beyond U+FFFF), so the grammar text itself is plain ASCII.
    """
    escaped = []
    for char in text:
        if char in _GBNF_STRING_ESCAPES:
            escaped.append(_GBNF_STRING_ESCAPES[char])
        elif " " <= char <= "~":
            escaped.append(char)
        elif ord(char) <= 0xFFFF:
            escaped.append(f"\\u{ord(char):04X}")
        else:
            escaped.append(f"\\U{ord(char):08X}")
    return '"' + "".join(escaped) + '"'


def _check_options(options: Sequence[str]) -> None:
    """Raise ValueError unless `options` is a non-empty list of distinct, non-empty strings."""
    if not options:
        raise ValueError("options is empty; give at least one option")
    empty = [index for index, option in enumerate(options) if not option]
    if empty:
        raise ValueError(f"options at positions {empty} are empty strings; every option needs text")
    repeated = repeated_items(options)
    if repeated:
        raise ValueError(f"options lists these more than once: {repeated}")


def gbnf_for_options(options: Sequence[str]) -> str:
    """A GBNF grammar whose only sentences are the given strings, e.g. label names.

    Use it for answers that are whole strings (label names, "yes"/"no"); prefer
    `gbnf_for_codes` for long label lists, where one-letter steps make the
    log-probabilities readable. Any characters are allowed; they are escaped for GBNF.
    """
    _check_options(options)
    return "root ::= " + " | ".join(_gbnf_string_literal(option) for option in options)


def gbnf_for_options_or_name(options: Sequence[str], max_words: int = 4) -> str:
    """A GBNF grammar for one of `options`, or a name of 1 to `max_words` words, e.g. a department.

    For a question whose answers cannot all be listed: "not at the university", or "Chemistry".
    A name starts with a capital letter; its words are letters, hyphens and apostrophes, so the
    answer can carry any name but no sentence, and it ends where the name does.
    """
    _check_options(options)
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1:
        raise ValueError(f"max_words must be a whole number of at least 1, got {max_words!r}")
    more_words = ' (" " word' * (max_words - 1) + ")?" * (max_words - 1)
    return ("root ::= " + " | ".join(_gbnf_string_literal(option) for option in options) + " | name\n"
            + f"name ::= [A-Z] [A-Za-z'-]*{more_words}\n"
            + "word ::= [A-Za-z] [A-Za-z'-]*")


def _without_annotations(schema: object) -> object:
    """A copy of a JSON schema with the annotation keywords removed at every level."""
    if isinstance(schema, list):
        return [_without_annotations(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned = {}
    for keyword, value in schema.items():
        if keyword in _ANNOTATION_KEYWORDS:
            continue
        if keyword in _NAMED_SCHEMA_KEYWORDS:
            cleaned[keyword] = {name: _without_annotations(sub) for name, sub in value.items()}
        elif keyword in _VALUE_KEYWORDS:
            cleaned[keyword] = value
        else:
            cleaned[keyword] = _without_annotations(value)
    return cleaned


def schema_for_model(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The JSON schema of a pydantic model, made safe for llama-cpp-python's converter.

    This matters more than it seems: when the converter fails, llama-cpp-python's
    `response_format={"type": "json_object", "schema": ...}` silently falls back to a
    grammar for any JSON at all, so the schema is not enforced and nothing says so.

    `model.model_json_schema()` mostly works as it is: the converter follows "$ref" into
    "$defs" (nested models), and handles "anyOf" (Optional and union fields), "enum",
    "const" (Literal), arrays with minItems/maxItems, tuples, dicts, strings with
    minLength/maxLength and the formats date, time, date-time and uuid. Two changes
    are needed, both checked in tests/test_grammar.py:

    - Annotation keywords ("title", "description", "default", "examples") are dropped,
      because a field typed `Any` becomes a node holding only a title, which the
      converter rejects ("Unrecognized schema"); without it, the field may hold any
      JSON object.
    - A recursive model's schema is only {"$defs": ..., "$ref": "#/$defs/<Model>"}, and
      the converter does not follow a "$ref" at the root (KeyError); the model's own
      definition is put at the root instead.

    The grammar does not enforce numeric bounds (ge, le, gt, lt), uniqueness of set
    items or URL/e-mail formats, so still validate the reply with
    `model.model_validate_json`. String patterns must be anchored ("^...$"), or the
    converter refuses them. A recursive model's name must use only letters and digits:
    the converter writes the reference back to it with the raw name, and a GBNF rule
    name cannot contain "_" or brackets.
    """
    schema = _without_annotations(model.model_json_schema())
    if "$ref" in schema:
        definitions = schema["$defs"]
        schema = {**definitions[schema["$ref"].removeprefix("#/$defs/")], "$defs": definitions}
    return schema


# --------------------------------------------------------------------------- grammars in llama.cpp


MAX_GRAMMAR_NESTING = 100
"""The deepest nesting of parentheses a grammar may have: llama.cpp's parser recurses once per
level, and about 20,000 levels crash the process."""
MAX_REPETITION = 10_000
"""The largest count in a repetition such as `"a"{2,5}`: llama.cpp copies the repeated item that
many times."""
MAX_REPEATED_COPIES = 100_000
"""The most copies all the repetitions of one grammar may ask for together."""

_GBNF_TOKEN = re.compile(
    r"""(?P<comment>\#[^\r\n]*+)
    | (?P<string>"(?:[^"\\]++|\\.)*+")
    | (?P<char_class>\[(?:[^\]\\]++|\\.)*+\])
    | (?P<definition>[A-Za-z0-9_-]++\s*+::=)
    | (?P<repetition>\{[^}]*+\})
    | (?P<open>\()
    | (?P<close>\))
    | (?P<unterminated>["\[{])
    | (?P<other>[A-Za-z0-9_-]++|[^"\[{()\#A-Za-z0-9_-]++)""",
    re.VERBOSE | re.DOTALL,
)
"""One piece of GBNF text; every character belongs to one. Each run is scanned once (possessive
quantifiers), so reading a grammar is linear in its length."""
_REPETITION = re.compile(r"\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}")


def _check_grammar_structure(grammar: str) -> None:
    """Raise ValueError, naming the rule and line, for what llama.cpp would hang or crash on.

    llama.cpp expands a repetition `{m,n}` by copying, and with m > n (`"a"{2,1}`, a plausible
    typo) it never stops and grows memory; deeply nested parentheses overflow its stack. This
    reads the grammar once, in time linear in its length, before llama.cpp sees it.
    """
    rule, depth, copies = "(before the first rule)", 0, 0

    def fail(position: int, problem: str) -> None:
        line = grammar.count("\n", 0, position) + 1
        raise ValueError(f"grammar rule {rule!r} (line {line}): {problem}")

    for token in _GBNF_TOKEN.finditer(grammar):
        kind, text = token.lastgroup, token.group()
        if kind == "definition":
            rule, depth = text[:-3].strip(), 0
        elif kind == "open":
            depth += 1
            if depth > MAX_GRAMMAR_NESTING:
                fail(token.start(), f"parentheses nested more than {MAX_GRAMMAR_NESTING} deep; "
                                    "give inner groups names of their own (MAX_GRAMMAR_NESTING in lib/grammar.py)")
        elif kind == "close":
            depth = max(0, depth - 1)
        elif kind == "unterminated":
            fail(token.start(), f"{text!r} is never closed")
        elif kind == "repetition":
            bounds = _REPETITION.fullmatch(text)
            if bounds is None:
                fail(token.start(), f"repetition {text} is not {{m}}, {{m,}} or {{m,n}} with whole numbers")
            low, comma, high = bounds.groups()
            minimum, maximum = int(low), (int(high) if high else None) if comma else int(low)
            if maximum is not None and minimum > maximum:
                fail(token.start(), f"repetition {text} asks for at least {minimum} and at most {maximum}; "
                                    f"did you mean {{{maximum},{minimum}}}?")
            largest = minimum if maximum is None else maximum
            if largest > MAX_REPETITION:
                fail(token.start(), f"repetition {text} allows {largest} copies, more than {MAX_REPETITION} "
                                    "(MAX_REPETITION in lib/grammar.py)")
            copies += largest
            if copies > MAX_REPEATED_COPIES:
                fail(token.start(), f"the repetitions up to here ask for {copies} copies, more than "
                                    f"{MAX_REPEATED_COPIES} in all (MAX_REPEATED_COPIES in lib/grammar.py)")


def check_grammar(grammar: str) -> None:
    """Raise ValueError unless llama.cpp's own parser accepts `grammar` (GBNF with a 'root' rule).

    Checked locally, before any request: an empty grammar would be ignored silently, and a
    malformed one can bring a llama.cpp server down. A reversed repetition (`{2,1}`), a count
    over `MAX_REPETITION` and parentheses nested over `MAX_GRAMMAR_NESTING` deep are refused
    before llama.cpp sees them (it would hang or crash), with the rule and line named. The parser needs no model (grammars that
    name tokens, like <|im_end|>, need one and are refused here).
    """
    if not isinstance(grammar, str):
        raise TypeError(f"grammar must be a string of GBNF rules, got {type(grammar).__name__}")
    if not grammar.strip():
        raise ValueError("the grammar is empty; give GBNF rules with a 'root' rule, or grammar=None for free text")
    _check_grammar_structure(grammar)
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(None, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError("llama.cpp could not parse this GBNF grammar (it needs a 'root' rule):\n" + grammar[:500])
    llama_cpp.llama_sampler_free(sampler)


class GrammarConstraint:
    """A llama.cpp GBNF grammar sampler applied to raw logits (-inf where the grammar forbids).

    The embedded backend's constrained generation (`lib.backends.embedded.EmbeddedLLM.chat`): `llama_cpp`
    is the imported module and `vocab` the model's vocabulary, so this module needs neither.
    """

    def __init__(self, llama_cpp: ModuleType, vocab: object, grammar: str) -> None:
        self._llama_cpp = llama_cpp
        _check_grammar_structure(grammar)
        self._sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not self._sampler:
            raise ValueError("llama.cpp could not parse this GBNF grammar (it needs a 'root' rule):\n"
                             + grammar[:500])

    def _apply(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        llama_cpp = self._llama_cpp
        data = (llama_cpp.llama_token_data * len(ids))()
        view = np.ctypeslib.as_array(data)
        view["id"] = ids
        view["logit"] = logits
        view["p"] = 0.0
        array = llama_cpp.llama_token_data_array(data=data, size=len(ids), selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        if array.size != len(ids) or not np.array_equal(view["id"], ids):
            raise RuntimeError("llama.cpp's grammar sampler reordered the candidates; "
                               "this llama-cpp-python version is not supported")
        return view["logit"].copy()

    def mask_subset(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The logits of the candidate tokens `ids`, shape (len(ids),), -inf where the grammar forbids them."""
        return self._apply(ids, logits.astype(np.float32))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """`logits`, shape (n_vocab,), with -inf for every token the grammar forbids at this step."""
        masked = self._apply(np.arange(len(logits), dtype=np.int32), logits.astype(np.float32))
        if not np.isfinite(masked).any():
            raise RuntimeError("the grammar allows no token at this step")
        return masked

    def accept(self, token: int) -> None:
        self._llama_cpp.llama_sampler_accept(self._sampler, token)

    def close(self) -> None:
        self._llama_cpp.llama_sampler_free(self._sampler)
