"""Tests for lib.quotes: quote verification, the answer schema and the verdict reports."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.quotes import (
    GroundedAnswer,
    Quote,
    QuoteCheck,
    normalize_text,
    render_verdicts,
    verdicts_to_html,
    verify_answer,
    verify_quote,
)

RULE_TEXT = (
    "Every PhD student forms a thesis committee after passing the research examination. "
    "The advisor chairs the committee. At least four members of the committee must hold "
    "a faculty appointment at the Institute. Students submit the final thesis within 30 days."
)


def assert_span_matches(check: QuoteCheck, quote: str, source: str) -> None:
    """The reported span, normalised, is the quote, normalised."""
    assert check.ok
    assert normalize_text(source[check.start : check.end]) == normalize_text(quote)


# --- exact and normalised matches ---------------------------------------------------------


def test_exact_substring_reports_offsets_into_source():
    quote = "The advisor chairs the committee."
    check = verify_quote(quote, RULE_TEXT)
    assert check.kind == "exact" and check.ok
    assert RULE_TEXT[check.start : check.end] == quote
    assert check.spans == ((check.start, check.end),)


def test_one_word_quote_matches_exactly_because_it_is_verbatim():
    assert verify_quote("committee", RULE_TEXT).kind == "exact"


def test_case_whitespace_smart_quotes_and_dashes_are_normalised():
    source = "Students submit the \u201cfinal\u201d thesis\u2014on time\u2014within  30\n days."
    quote = 'STUDENTS submit the "final" thesis-on time-within 30 days.'
    check = verify_quote(quote, source)
    assert check.kind == "normalized"
    assert check.start == 0 and check.end == len(source)
    assert_span_matches(check, quote, source)


@pytest.mark.parametrize(
    ("quote", "source"),
    [
        ("\u2018single\u2019 and \u201adouble\u201b \u201equotes\u201f", "'single' and 'double' \"quotes\""),
        ("minus \u2212 5 and \u2010 \u2011 \u2012 \u2013 \u2014 \u2015", "minus - 5 and - - - - - -"),
        ("6\u2032 2\u2033 tall", "6' 2\" tall"),
    ],
)
def test_every_listed_typographic_character_maps_to_ascii(quote, source):
    check = verify_quote(quote, source)
    assert check.kind == "normalized"
    assert_span_matches(check, quote, source)


def test_nfkc_ligature_in_source_maps_back_to_one_character():
    source = "The \ufb01nal thesis is due."  # "ﬁnal" with the fi ligature
    check = verify_quote("the final thesis", source)
    assert check.kind == "normalized"
    assert source[check.start : check.end] == "The \ufb01nal thesis"


def test_match_may_not_split_a_ligature():
    assert not verify_quote("inal thesis is due", "The \ufb01nal thesis is due.").ok


def test_accents_composed_and_decomposed_are_the_same_text():
    decomposed = "Le cafe\u0301 du de\u0301partement ferme a\u0300 18 h."
    check = verify_quote("café du département", decomposed)
    assert check.kind == "normalized"
    assert decomposed[check.start : check.end] == "cafe\u0301 du de\u0301partement"


def test_a_letter_without_its_accent_is_a_different_letter():
    assert not verify_quote("le cafe du", "Le cafe\u0301 du département").ok


def test_emoji_and_fullwidth_characters():
    source = "Deadline \U0001f6a8: ＳＵＢＭＩＴ by Friday \U0001f389 please."
    check = verify_quote("submit by friday \U0001f389", source)
    assert check.kind == "normalized"
    assert_span_matches(check, "submit by friday \U0001f389", source)


def test_cjk_quote_inside_a_sentence_without_spaces():
    source = "所有博士生必须在第六学期结束前组成论文委员会。"
    check = verify_quote("必须在第六学期结束前", source)
    assert check.kind == "exact"
    assert source[check.start : check.end] == "必须在第六学期结束前"


def test_changed_number_fails():
    assert not verify_quote("submit the final thesis within 60 days", RULE_TEXT).ok
    assert not verify_quote("At least five members of the committee", RULE_TEXT).ok


def test_match_must_not_start_or_end_inside_a_word():
    assert not verify_quote("0 days", "within 10 days").ok
    assert not verify_quote("legal to submit", "it is illegal to submit late").ok
    assert verify_quote("illegal to submit", "it is illegal to submit late").ok


def test_paraphrase_fails():
    check = verify_quote("The committee is chaired by the advisor.", RULE_TEXT)
    assert check.kind == "not_found" and check.start is None and check.end is None and check.spans == ()


@pytest.mark.parametrize("quote", ["", "   ", "\n\t "])
def test_empty_quote_is_not_found_without_raising(quote):
    check = verify_quote(quote, RULE_TEXT)
    assert not check.ok and "empty" in check.reason


def test_empty_source_finds_nothing():
    assert not verify_quote("the advisor chairs", "").ok


def test_surrounding_whitespace_of_the_quote_is_ignored():
    assert verify_quote("  the advisor chairs the committee\n", RULE_TEXT).ok


# --- elided quotes --------------------------------------------------------------------------


@pytest.mark.parametrize("ellipsis", ["...", "\u2026", ". . .", "[...]", " [\u2026] "])
def test_elided_quote_in_order_is_found_with_one_span_per_fragment(ellipsis):
    quote = f"Every PhD student forms a thesis committee{ellipsis}the advisor chairs the committee"
    check = verify_quote(quote, RULE_TEXT)
    assert check.kind == "elided"
    assert len(check.spans) == 2
    assert check.start == check.spans[0][0] and check.end == check.spans[-1][1]
    assert RULE_TEXT[slice(*check.spans[0])] == "Every PhD student forms a thesis committee"
    assert RULE_TEXT[slice(*check.spans[1])] == "The advisor chairs the committee"


def test_leading_and_trailing_ellipses_are_dropped():
    check = verify_quote("... the advisor chairs the committee ... at least four members ...", RULE_TEXT)
    assert check.kind == "elided" and len(check.spans) == 2


def test_quote_containing_dots_that_are_in_the_source_is_exact():
    source = "Wait... the portal closes at noon."
    assert verify_quote("Wait... the portal", source).kind == "exact"


def test_only_an_ellipsis_is_not_found():
    for quote in ["...", "\u2026", ". . .", "... ..."]:
        assert not verify_quote(quote, "Wait... what?").ok


def test_fragments_out_of_order_fail():
    quote = "the advisor chairs the committee ... Every PhD student forms a thesis committee"
    assert not verify_quote(quote, RULE_TEXT).ok


def test_fragment_with_fewer_than_three_words_fails():
    check = verify_quote("Every PhD student ... committee", RULE_TEXT)
    assert not check.ok and "fragment 2" in check.reason


def test_fragments_too_far_apart_fail_and_max_gap_controls_it():
    source = "alpha beta gamma. " + "filler words here. " * 40 + "delta epsilon zeta."
    quote = "alpha beta gamma ... delta epsilon zeta"
    assert not verify_quote(quote, source).ok
    check = verify_quote(quote, source, max_gap=len(source))
    assert check.kind == "elided"
    first, second = check.spans
    assert second[0] - first[1] > 400


def test_gap_is_measured_in_original_characters_between_fragments():
    source = "one two three" + " " * 10 + "four five six"
    quote = "one two three ... four five six"
    assert verify_quote(quote, source, max_gap=10).ok
    assert not verify_quote(quote, source, max_gap=9).ok


def test_stitched_sentences_from_different_places_fail():
    source = "The fee is 85 dollars. " + "Unrelated text. " * 50 + "It is waived for bridge students."
    assert not verify_quote("The fee is 85 dollars ... waived for bridge students", source).ok


def test_elided_search_uses_a_later_occurrence_of_the_first_fragment():
    source = "alpha beta gamma. " + "x " * 300 + "alpha beta gamma, then delta epsilon zeta."
    check = verify_quote("alpha beta gamma ... delta epsilon zeta", source, max_gap=20)
    assert check.kind == "elided"
    assert check.spans[0][0] > 500


def test_elided_search_uses_a_later_occurrence_of_a_middle_fragment():
    # greedy "earliest" placement puts fragment 2 at 20 and then cannot reach fragment 3
    source = "aa bb cc" + "." * 12 + "dd ee ff" + "." * 52 + "dd ee ff" + "." * 70 + "gg hh ii"
    check = verify_quote("aa bb cc ... dd ee ff ... gg hh ii", source, max_gap=80)
    assert check.kind == "elided"
    assert [source[a:b] for a, b in check.spans] == ["aa bb cc", "dd ee ff", "gg hh ii"]
    assert check.spans[1][0] == 80


def test_elided_fragments_are_normalised_and_map_back():
    source = "The \u201cadvisor\u201d CHAIRS the committee; later, students submit the final\nthesis."
    check = verify_quote('the "advisor" chairs the committee \u2026 students submit the final thesis', source)
    assert check.kind == "elided"
    assert normalize_text(source[slice(*check.spans[1])]) == "students submit the final thesis"


# --- bad arguments and large inputs -----------------------------------------------------------


@pytest.mark.parametrize(
    ("quote", "source", "argument"), [(None, "x", "quote"), ("x", b"x", "source"), (3, "x", "quote")]
)
def test_non_string_inputs_raise_type_error_naming_the_argument(quote, source, argument):
    with pytest.raises(TypeError, match=argument):
        verify_quote(quote, source)


def test_bad_max_gap():
    with pytest.raises(ValueError, match="max_gap"):
        verify_quote("a b c", "a b c", max_gap=-1)
    with pytest.raises(TypeError, match="max_gap"):
        verify_quote("a b c", "a b c", max_gap=1.5)


def test_megabyte_source():
    filler = "The committee meets twice a year in the Aldren Building. "
    source = filler * (1_000_000 // len(filler)) + "Final theses are due on 1 June \u2014 no exceptions."
    assert len(source) > 990_000
    exact = verify_quote("due on 1 June", source)
    assert exact.kind == "exact" and exact.start > 990_000
    normalized = verify_quote("FINAL THESES are due on 1 June - no exceptions", source)
    assert normalized.kind == "normalized"
    assert_span_matches(normalized, "final theses are due on 1 june - no exceptions", source)
    elided = verify_quote("meets twice a year ... Final theses are due", source)
    assert elided.kind == "elided"
    assert not verify_quote("due on 2 June", source).ok


_PUNCTUATION = st.text(alphabet=st.sampled_from(list("\u201c\u201d\u2014-'\".,(") + ["\U0001f600"]), max_size=2)
_LETTERS = st.text(alphabet=st.sampled_from(list("abcXYZ019\u00e9\u00df\ufb01\u00e7\u4e2d")), min_size=1, max_size=5)
_WORDS = st.builds(lambda before, letters, after: before + letters + after, _PUNCTUATION, _LETTERS, _PUNCTUATION)


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(_WORDS, min_size=1, max_size=25),
    separators=st.lists(st.sampled_from([" ", "  ", "\n", "\t ", "\u00a0"]), min_size=25, max_size=25),
    data=st.data(),
)
def test_any_run_of_words_is_found_and_its_span_normalises_to_the_quote(words, separators, data):
    source = "".join(word + separator for word, separator in zip(words, separators))
    first = data.draw(st.integers(0, len(words) - 1))
    last = data.draw(st.integers(first, len(words) - 1))
    quote = " ".join(words[first : last + 1])
    check = verify_quote(quote, source)
    assert check.kind in ("exact", "normalized")
    assert_span_matches(check, quote, source)


# --- structured answers ---------------------------------------------------------------------

SECTIONS = {
    "handbook/thesis-committee": RULE_TEXT,
    "handbook/fees": "Each application carries a non-refundable fee of 85.",
    "faq/committee": "The advisor chairs the committee.",
}


def test_schema_is_simple_enough_for_a_grammar_converter():
    schema = GroundedAnswer.model_json_schema()
    assert schema["required"] == ["answer", "quotes"]
    quote_schema = schema["$defs"]["Quote"]
    assert quote_schema["required"] == ["text"]
    assert all(prop.get("description") for prop in quote_schema["properties"].values())
    assert all(prop.get("description") for prop in schema["properties"].values())
    text = json.dumps(schema)
    for unsupported in ("pattern", "format", "minLength", "maxLength", "if", "not"):
        assert f'"{unsupported}"' not in text


def test_answer_round_trips_from_llm_json():
    raw = '{"answer": "Four.", "quotes": [{"text": "At least four members", "section_id": null}]}'
    answer = GroundedAnswer.model_validate_json(raw)
    assert answer.quotes == [Quote(text="At least four members")]


def test_quote_in_its_cited_section():
    answer = GroundedAnswer(answer="x", quotes=[Quote(text="fee of 85", section_id="handbook/fees")])
    [verdict] = verify_answer(answer, SECTIONS)
    assert verdict.ok and verdict.cited_ok is True and verdict.found_in == "handbook/fees"


def test_quote_cited_to_the_wrong_section_is_found_elsewhere():
    answer = GroundedAnswer(answer="x", quotes=[Quote(text="fee of 85", section_id="handbook/thesis-committee")])
    [verdict] = verify_answer(answer, SECTIONS)
    assert verdict.ok and verdict.cited_ok is False and verdict.found_in == "handbook/fees"


def test_quote_citing_an_unknown_section_is_searched_everywhere():
    answer = GroundedAnswer(answer="x", quotes=[Quote(text="fee of 85", section_id="no/such-section")])
    [verdict] = verify_answer(answer, SECTIONS)
    assert verdict.found_in == "handbook/fees" and verdict.cited_ok is False


def test_uncited_quote_is_found_in_the_first_section_by_id():
    answer = GroundedAnswer(answer="x", quotes=[Quote(text="The advisor chairs the committee.")])
    [verdict] = verify_answer(answer, SECTIONS)
    assert verdict.found_in == "faq/committee" and verdict.cited_ok is None


def test_quote_found_nowhere():
    answer = GroundedAnswer(
        answer="x",
        quotes=[Quote(text="fee of 95", section_id="handbook/fees"), Quote(text="fee of 95")],
    )
    cited, uncited = verify_answer(answer, SECTIONS)
    assert not cited.ok and cited.found_in is None and cited.cited_ok is False
    assert not uncited.ok and "3 sections" in uncited.check.reason


def test_answer_without_quotes_and_empty_sections():
    assert verify_answer(GroundedAnswer(answer="I don't know.", quotes=[]), SECTIONS) == []
    [verdict] = verify_answer(GroundedAnswer(answer="x", quotes=[Quote(text="fee of 85")]), {})
    assert not verdict.ok


def test_verify_answer_bad_arguments():
    with pytest.raises(TypeError, match="answer"):
        verify_answer({"answer": "x", "quotes": []}, SECTIONS)
    with pytest.raises(TypeError, match="sections"):
        verify_answer(GroundedAnswer(answer="x", quotes=[]), ["text"])
    with pytest.raises(TypeError, match="handbook/fees"):
        verify_answer(GroundedAnswer(answer="x", quotes=[]), {"handbook/fees": 85})
    with pytest.raises(ValueError, match="max_gap"):
        verify_answer(GroundedAnswer(answer="x", quotes=[]), SECTIONS, max_gap=-5)


# --- reports --------------------------------------------------------------------------------


def _mixed_verdicts():
    long_quote = "At least four members of the committee must hold a faculty appointment at the Institute."
    answer = GroundedAnswer(
        answer="x",
        quotes=[
            Quote(text=long_quote, section_id="handbook/thesis-committee"),
            Quote(text="fee of <95> & more", section_id="handbook/fees"),
        ],
    )
    return verify_answer(answer, SECTIONS)


def test_render_verdicts_one_line_per_quote():
    lines = render_verdicts(_mixed_verdicts()).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("\u2713 exact") and "handbook/thesis-committee" in lines[0]
    assert lines[1].startswith("\u2717 not_found") and "no source" in lines[1]
    assert all(len(line) < 160 for line in lines)
    assert "\u2026" in lines[0]  # the long quote was shortened


def test_render_empty_verdicts():
    assert "no quotes" in render_verdicts([])


def test_verdicts_to_html_escapes_quotes_and_colours_marks():
    page = verdicts_to_html(_mixed_verdicts())
    assert "&lt;95&gt; &amp; more" in page and "<95>" not in page
    assert page.count("<tr>") == 3
    assert "#1a7f37" in page and "#cf222e" in page
    assert "no quotes" in verdicts_to_html([])


# --- the labelled quotes of the corpus -------------------------------------------------------

LABELLED = Path(__file__).resolve().parent.parent / "data" / "corpus" / "quotes_labelled.jsonl"
_EXPECTED_KIND = {"verbatim": "exact", "normalized": "normalized", "elided": "elided", "whole_section": "exact",
                  "full_stop_added": "normalized"}


def test_every_labelled_quote_gets_its_expected_verdict():
    from lib.datasets import load_corpus

    sections = {section.id: section.text for section in load_corpus()}
    with open(LABELLED, encoding="utf-8") as lines:
        labelled = [json.loads(line) for line in lines if line.strip()]
    assert labelled
    wrong = []
    for row in labelled:
        check = verify_quote(row["quote"], row.get("source") or sections[row["section_id"]])
        expected_kind = _EXPECTED_KIND.get(row["kind"], "not_found")
        if check.ok != row["expected_ok"] or check.kind != expected_kind:
            wrong.append((row["id"], row["kind"], check.kind, check.reason))
    assert wrong == []
    kinds = {row["kind"] for row in labelled}
    assert {"number_cut", "full_stop_added", "word_changed", "whole_section"} <= kinds  # issue 24 item 4, issue 23
