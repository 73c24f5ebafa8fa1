"""Tests for lib.grammar: codes, GBNF grammars, JSON schemas and label groups.

Grammars are checked two ways, without loading any model:
- llama.cpp's own GBNF parser accepts them (llama_sampler_init_grammar with no vocab
  parses the grammar and returns NULL on error; in llama-cpp-python 0.3.x
  `LlamaGrammar.from_string` only stores the text, so it would check nothing);
- `_grammar_regex`, a small translator written here for the GBNF subset we emit
  (literals, character classes, rule references, "|", parentheses), turns a grammar
  into a Python regex, and we check that it accepts exactly the intended strings.
"""
from __future__ import annotations

import json
import re
import string
from typing import Any

import pydantic
import pytest

import lib.datasets
from lib.datasets import OUT_OF_SCOPE as OUT_OF_SCOPE_LABEL
from lib.datasets import OUT_OF_SCOPE_GROUP, load_label_groups
from lib.grammar import (
    assign_codes,
    check_grammar,
    gbnf_for_codes,
    gbnf_for_options,
    gbnf_for_options_or_name,
    letters,
    parse_code,
    schema_for_model,
)
from conftest import require_installed

# --- an independent reading of the GBNF we emit -------------------------------------

_GBNF_TOKEN = re.compile(
    r'\s*(?:(?P<literal>"(?:[^"\\]|\\.)*")|(?P<charclass>\[(?:[^\]\\]|\\.)*\])'
    r"|(?P<rule>[A-Za-z0-9-]+)|(?P<operator>[|()*?]))"
)
_GBNF_ESCAPE = re.compile(r"\\(?:x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))")
_NAMED_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def _unescape(text: str) -> str:
    """Decode GBNF escapes as llama.cpp's parser does (\\xHH, \\uXXXX, \\UXXXXXXXX are code points)."""

    def decode(match: re.Match[str]) -> str:
        hex_digits = match[1] or match[2] or match[3]
        return chr(int(hex_digits, 16)) if hex_digits else _NAMED_ESCAPES.get(match[4], match[4])

    return _GBNF_ESCAPE.sub(decode, text)


def _grammar_regex(gbnf: str) -> re.Pattern[str]:
    """A regex accepting what the (non-recursive) GBNF grammar accepts; a `-` inside a character
    class is a range unless it comes first or last, as in llama.cpp."""
    rules = dict(line.split(" ::= ", 1) for line in gbnf.splitlines() if line.strip())

    def translate(body: str) -> str:
        parts, position = [], 0
        while body[position:].strip():
            token = _GBNF_TOKEN.match(body, position)
            assert token, f"unexpected GBNF at {body[position:]!r}"
            position = token.end()
            if token["literal"]:
                parts.append(re.escape(_unescape(token["literal"][1:-1])))
            elif token["charclass"]:
                members = _unescape(token["charclass"][1:-1])
                parts.append("[" + "".join("-" if c == "-" and 0 < i < len(members) - 1 else re.escape(c)
                                           for i, c in enumerate(members)) + "]")
            elif token["rule"]:
                parts.append("(?:" + translate(rules[token["rule"]]) + ")")
            else:
                parts.append({"(": "(?:", ")": ")", "|": "|", "*": "*", "?": "?"}[token["operator"]])
        return "".join(parts)

    return re.compile(translate(rules["root"]), flags=re.DOTALL)


def _accepts(gbnf: str, text: str) -> bool:
    return _grammar_regex(gbnf).fullmatch(text) is not None


def _llama_cpp_parses(gbnf: str) -> bool:
    """Whether llama.cpp's GBNF parser accepts the grammar with a "root" rule."""
    llama_cpp = require_installed("llama_cpp")
    sampler = llama_cpp.llama_sampler_init_grammar(None, gbnf.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


def _json_schema_grammar(schema: dict[str, Any]) -> str:
    """llama-cpp-python's conversion of a JSON schema to GBNF (what response_format uses)."""
    llama_grammar = require_installed("llama_cpp.llama_grammar")
    return llama_grammar.json_schema_to_gbnf(json.dumps(schema))


# --- letters, codes, parse_code ------------------------------------------------------


def test_letters_counts_from_a():
    assert letters(0) == []
    assert letters(3) == ["A", "B", "C"]
    assert letters(26) == list(string.ascii_uppercase)


@pytest.mark.parametrize("n", [-1, 27])
def test_letters_rejects_counts_outside_the_alphabet(n):
    with pytest.raises(ValueError, match="n must be"):
        letters(n)


def test_assign_codes_letters_groups_then_intents_in_order():
    codes = assign_codes({"cards": ["card_arrival", "card_linking"], "cash": ["atm_support"]})
    assert codes == {"A-A": "card_arrival", "A-B": "card_linking", "B-A": "atm_support"}


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({}, "groups is empty"),
        ({f"g{i}": [f"l{i}"] for i in range(27)}, "at most 26"),
        ({"big": [f"l{i}" for i in range(27)]}, r"groups\['big'\] has 27 labels"),
        ({"a": ["x"], "empty": []}, r"groups\['empty'\] is empty"),
        ({"a": ["x", "y"], "b": ["y"]}, r"more than once: \['y'\]"),
    ],
)
def test_assign_codes_rejects_bad_groups(groups, message):
    with pytest.raises(ValueError, match=message):
        assign_codes(groups)


def test_parse_code_accepts_only_an_exact_code_up_to_whitespace():
    codes = {"A-A": "x", "C-F": "y"}
    assert parse_code("  C-F\n", codes) == "C-F"
    for reply in ["c-f", "C-F.", "C-F card_arrival", "A-Z", "CF", ""]:
        assert parse_code(reply, codes) is None, reply


# --- gbnf_for_codes ------------------------------------------------------------------

SMALL_CODES = ["A-A", "A-B", "A-C", "B-A", "C-A", "C-B"]


def test_code_grammar_has_one_rule_per_group():
    assert gbnf_for_codes(["A-A", "A-B", "B-A"]) == (
        'root ::= group-A | group-B\ngroup-A ::= "A" "-" [AB]\ngroup-B ::= "B" "-" [A]'
    )


@pytest.mark.parametrize(
    "codes",
    [SMALL_CODES, list(assign_codes(load_label_groups("banking77").groups))],
    ids=["small", "banking77"],
)
def test_code_grammar_accepts_exactly_the_codes(codes):
    gbnf = gbnf_for_codes(codes)
    every_letter_pair = {f"{g}-{i}" for g in string.ascii_uppercase for i in string.ascii_uppercase}
    accepted = {text for text in every_letter_pair if _accepts(gbnf, text)}
    assert accepted == set(codes)


@pytest.mark.parametrize(
    "near_miss", ["A", "A-", "AA", "A-Z", "Z-A", "a-a", "A-a", "A-A ", "A-A\n", " A-A", "A-AA", "A_A", ""]
)
def test_code_grammar_rejects_near_misses(near_miss):
    assert not _accepts(gbnf_for_codes(SMALL_CODES), near_miss)


@pytest.mark.parametrize(
    ("codes", "message"),
    [
        ([], "codes is empty"),
        (["A-A", "AB"], "must look like"),
        (["a-b"], "must look like"),
        (["A-A", "A-A"], "more than once"),
    ],
)
def test_code_grammar_rejects_bad_codes(codes, message):
    with pytest.raises(ValueError, match=message):
        gbnf_for_codes(codes)


def test_llama_cpp_parser_check_rejects_a_broken_grammar():
    """Guards the helper below: if it accepted anything, the parse tests would prove nothing."""
    assert not _llama_cpp_parses('root ::= "A')
    assert not _llama_cpp_parses('answer ::= "A"')


@pytest.mark.parametrize("dataset", ["banking77", "clinc150"])
def test_llama_cpp_parses_code_grammars(dataset):
    assert _llama_cpp_parses(gbnf_for_codes(assign_codes(load_label_groups(dataset).groups)))


# --- gbnf_for_options ----------------------------------------------------------------

AWKWARD_OPTIONS = [
    "yes",
    "yes!",
    'say "hi"',
    "back\\slash",
    "line\nbreak",
    "tab\there",
    "[brackets] -dash",
    "£5 café",
    "emoji 😀",
    "reverted_card_payment?",
]


def test_option_grammar_is_ascii_and_parsed_by_llama_cpp():
    gbnf = gbnf_for_options(AWKWARD_OPTIONS)
    assert gbnf.isascii()
    assert _llama_cpp_parses(gbnf)


def test_option_grammar_accepts_exactly_the_options():
    gbnf = gbnf_for_options(AWKWARD_OPTIONS)
    for option in AWKWARD_OPTIONS:
        assert _accepts(gbnf, option), option
    near_misses = ["Yes", "yes ", "yes!!", "say hi", 'say \\"hi\\"', "back\\\\slash", "line break", "£5 cafe", ""]
    for near_miss in near_misses:
        assert not _accepts(gbnf, near_miss), near_miss


@pytest.mark.parametrize(
    ("options", "message"),
    [([], "options is empty"), (["a", ""], r"positions \[1\] are empty"), (["a", "a"], "more than once")],
)
def test_option_grammar_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        gbnf_for_options(options)


def test_options_or_name_grammar_accepts_an_option_or_a_short_name():
    gbnf = gbnf_for_options_or_name(["not at the university"], max_words=3)
    assert _llama_cpp_parses(gbnf)
    for reply in ["not at the university", "Chemistry", "Chemical and Biomolecular", "O'Neill-Studies", "Physics"]:
        assert _accepts(gbnf, reply), reply
    for reply in ["chemistry", "", "Chemistry.", "A b c d", "42", "Chemistry "]:
        assert not _accepts(gbnf, reply), reply


@pytest.mark.parametrize("max_words", [0, -1, True, 1.5])
def test_options_or_name_grammar_rejects_bad_word_counts(max_words):
    with pytest.raises(ValueError):
        gbnf_for_options_or_name(["none"], max_words=max_words)


# --- JSON schemas --------------------------------------------------------------------


class Node(pydantic.BaseModel):
    """A recursive model: its schema's root is a $ref.

    Named without "_": the converter writes recursive references with the raw model name,
    and llama.cpp rule names allow only letters, digits and "-".
    """

    name: str
    children: list[Node] = []


class Anything(pydantic.BaseModel):
    payload: Any = pydantic.Field(description="free-form JSON")


class Evidence(pydantic.BaseModel):
    quote: str
    source: str | None = None


class Reply(pydantic.BaseModel):
    """Nested models, Optional, Any, list bounds and a property named like an annotation keyword."""

    verdict: str = pydantic.Field(description="the decision")
    title: str
    evidence: list[Evidence] = pydantic.Field(min_length=1, max_length=3)
    mode: Any = None


@pytest.mark.parametrize("model", [Node, Anything])
def test_raw_pydantic_schemas_that_the_converter_rejects(model):
    """Why schema_for_model exists: these fail on model_json_schema() as it is."""
    with pytest.raises((AssertionError, KeyError)):
        _json_schema_grammar(model.model_json_schema())


@pytest.mark.parametrize("model", [Node, Anything, Reply])
def test_schema_for_model_converts_and_parses(model):
    assert _llama_cpp_parses(_json_schema_grammar(schema_for_model(model)))


def test_schema_for_model_drops_annotations_but_keeps_properties_with_those_names():
    schema = schema_for_model(Reply)
    assert set(schema["properties"]) == {"verdict", "title", "evidence", "mode"}
    assert "title" not in schema and "description" not in schema["properties"]["verdict"]
    assert schema["properties"]["evidence"]["maxItems"] == 3


def test_schema_for_model_puts_a_recursive_model_at_the_root():
    schema = schema_for_model(Node)
    assert "$ref" not in schema
    assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}


# --- label groups --------------------------------------------------------------------


def test_banking77_groups_cover_every_label_exactly_once():
    labels = json.loads((lib.datasets.DATA_DIR / "banking77" / "categories.json").read_text(encoding="utf-8"))
    groups = load_label_groups("banking77")
    grouped = [label for members in groups.groups.values() for label in members]
    assert sorted(grouped) == sorted(labels) and len(grouped) == 77
    assert len(groups.groups) == 8


def test_clinc150_groups_are_the_domains_plus_out_of_scope_last():
    domains = json.loads((lib.datasets.DATA_DIR / "clinc150" / "domains.json").read_text(encoding="utf-8"))
    groups = load_label_groups("clinc150")
    expected = {domain: sorted(intents) for domain, intents in domains.items()}
    expected[OUT_OF_SCOPE_GROUP] = [OUT_OF_SCOPE_LABEL]
    assert {name: sorted(members) for name, members in groups.groups.items()} == expected
    assert list(groups.groups)[-1] == OUT_OF_SCOPE_GROUP
    codes = assign_codes(groups.groups)
    assert codes["K-A"] == OUT_OF_SCOPE_LABEL and len(codes) == 151


@pytest.mark.parametrize("dataset", ["banking77", "clinc150"])
def test_every_group_and_label_has_a_one_line_description(dataset):
    groups = load_label_groups(dataset)
    labels = [label for members in groups.groups.values() for label in members]
    assert set(groups.descriptions) == set(labels)
    assert set(groups.group_descriptions) == set(groups.groups)
    for text in [*groups.descriptions.values(), *groups.group_descriptions.values()]:
        assert text.strip() and "\n" not in text


def test_load_label_groups_rejects_unknown_datasets():
    with pytest.raises(ValueError, match="name must be one of"):
        load_label_groups("snips")


def test_load_label_groups_rejects_a_file_that_misses_or_repeats_labels(tmp_path, monkeypatch):
    (tmp_path / "banking77").mkdir()
    (tmp_path / "banking77" / "categories.json").write_text('["a", "b", "c"]', encoding="utf-8")
    intents = [{"label": label, "description": "d"} for label in ["a", "a", "x"]]
    groups_file = {"groups": [{"name": "g", "description": "d", "intents": intents}]}
    (tmp_path / "banking77_groups.json").write_text(json.dumps(groups_file), encoding="utf-8")
    monkeypatch.setattr(lib.datasets, "DATA_DIR", tmp_path)
    problems = r"more than one group.*\['a'\].*missing.*\['b', 'c'\].*not in the dataset.*\['x'\]"
    with pytest.raises(ValueError, match=problems):
        load_label_groups("banking77")


# --- grammars llama.cpp would hang or crash on (issue 24, item 10) -------------------------------

REFUSED = {
    "reversed repetition": ('root ::= "a"{2,1}', r"grammar rule 'root' \(line 1\): repetition \{2,1\}.*\{1,2\}"),
    "20,000-deep parentheses": ("root ::= " + "(" * 20_000 + '"a"' + ")" * 20_000,
                                r"grammar rule 'root' \(line 1\): parentheses nested more than 100 deep"),
    "reversed repetition in a later rule": ('root ::= item\nitem ::= "a"{5,3}', r"rule 'item' \(line 2\): repetition \{5,3\}"),
    "count too large": ('root ::= "a"{0,99999}', r"allows 99999 copies, more than 10000 \(MAX_REPETITION"),
    "too many copies in all": ("root ::= " + " ".join(['"a"{0,9000}'] * 12), r"more than 100000 in all \(MAX_REPEATED_COPIES"),
    "count missing": ('root ::= "a"{,3}', r"repetition \{,3\} is not \{m\}, \{m,\} or \{m,n\}"),
    "class never closed": ('root ::= "a" | [bc', r"'\[' is never closed"),
    "101-deep parentheses": ("root ::= " + "(" * 101 + '"a"' + ")" * 101, r"nested more than 100 deep.*MAX_GRAMMAR_NESTING"),
}


@pytest.fixture(scope="module")
def refusals() -> dict[str, str]:
    """What `check_grammar` says about each grammar of REFUSED, asked in a child process: before
    these checks, llama.cpp never returned on a reversed repetition and crashed on deep nesting."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = """
import json, sys
from lib.grammar import check_grammar
said = {}
for name, grammar in json.load(sys.stdin).items():
    try:
        check_grammar(grammar)
        said[name] = "accepted"
    except ValueError as error:
        said[name] = str(error)
print(json.dumps(said))
"""
    grammars = {name: grammar for name, (grammar, _) in REFUSED.items()}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    try:
        done = subprocess.run([sys.executable, "-c", code], input=json.dumps(grammars), capture_output=True,
                              text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("check_grammar did not return within 120 s on the grammars of REFUSED")
    assert done.returncode == 0, f"the child process ended with {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_grammar_llama_cpp_would_hang_or_crash_on_is_refused_naming_the_rule(name, refusals):
    assert re.search(REFUSED[name][1], refusals[name]), refusals[name]


@pytest.mark.parametrize("grammar", [
    'root ::= "a"{1,2} "b"{3} "c"{2,} "d"{ 0 , 4 }',
    "root ::= " + "(" * 100 + '"a"' + ")" * 100,
    'root ::= "{5,1}" [{(] | "x" # a comment with {5,1} and (((\n',  # braces in strings, classes, comments
])
def test_grammars_within_the_limits_still_parse(grammar):
    check_grammar(grammar)
    assert _llama_cpp_parses(grammar)


def test_checking_a_large_grammar_takes_time_linear_in_its_length():
    """A 2 MB grammar whose last rule is too deep: the whole text is read, quickly, before llama.cpp."""
    import time

    timings = []
    for alternatives in (20_000, 80_000):
        grammar = ("root ::= " + " | ".join(['("x" [a-z]{0,1} ( "y" ) )'] * alternatives)
                   + "\nlast ::= " + "(" * 101 + '"a"' + ")" * 101)
        start = time.perf_counter()
        with pytest.raises(ValueError, match=r"rule 'last' \(line 2\)"):
            check_grammar(grammar)
        timings.append(time.perf_counter() - start)
    assert timings[1] < 5 and timings[1] < 8 * timings[0] + 0.5
