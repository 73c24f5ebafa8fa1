"""Dataset loaders: sizes, clean text, and calibration splits disjoint from everything else."""
from __future__ import annotations

import pytest

from lib.datasets import (QUESTION_TYPES, banking77_calibration_split, banking77_labels, banking77_pool,
                          clinc150_calibration_split, clinc150_domains, clinc150_pool, clinc150_test_split,
                          load_banking77, load_clinc150, load_corpus, load_questions, load_scope_examples,
                          parse_markdown_sections)


def test_banking77_sizes_and_clean_text() -> None:
    train, test = load_banking77("train"), load_banking77("test")
    assert (len(train), len(test)) == (10_003, 3_080)
    assert set(train["label"]) == set(test["label"]) == set(banking77_labels())
    for frame in (train, test):
        assert (frame["text"] == frame["text"].str.strip()).all()
        assert (frame["text"].str.len() > 0).all()
    with pytest.raises(ValueError, match="split"):
        load_banking77("validation")


def test_banking77_calibration_split_is_fixed_and_disjoint() -> None:
    calibration = banking77_calibration_split()
    assert len(calibration) == 770
    assert calibration["label"].value_counts().eq(10).all()
    assert calibration.equals(banking77_calibration_split())
    pool = banking77_pool()
    assert len(pool) + len(calibration) == 10_003
    assert not set(calibration["text"]) & set(pool["text"])
    # Upstream has six texts in both train and test (see data/README.md); a few may land here.
    assert len(set(calibration["text"]) & set(load_banking77("test")["text"])) <= 6


def test_clinc150_splits() -> None:
    test = load_clinc150("test")
    assert len(test) == 4_500 + 1_000 and test["out_of_scope"].sum() == 1_000
    assert sum(len(v) for v in clinc150_domains().values()) == 150
    calibration, held_out = clinc150_calibration_split(), clinc150_test_split()
    assert len(calibration) == 850 and calibration["out_of_scope"].sum() == 100
    assert len(held_out) == 1_000 and held_out["out_of_scope"].sum() == 250
    assert not set(calibration["text"]) & set(clinc150_pool()["text"])


def test_corpus_and_questions() -> None:
    sections = load_corpus()
    ids = {s.id for s in sections}
    assert len(ids) == len(sections) >= 40
    questions = load_questions()
    assert set(questions["type"]) == set(QUESTION_TYPES)
    assert set(questions["split"]) == {"dev", "test"}
    for cited in questions["section_ids"]:
        assert set(cited) <= ids
    assert len(load_questions("dev")) + len(load_questions("test")) == len(questions)
    assert load_scope_examples()


def test_markdown_sections_parse_headings_and_non_ascii() -> None:
    sections = parse_markdown_sections("# Guide\nintro\n## Café hours\nOpen 9–5.\n## Fees (2026)\n€10\n", "guide")
    assert [(s.id, s.text) for s in sections] == [("guide/caf-hours", "Open 9–5."), ("guide/fees-2026", "€10")]
    assert sections[0].title == "Guide"
