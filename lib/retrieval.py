"""Retrieval over the fictional corpus, and the two gates that run before any generation.

The pieces, in the order notebook 02 introduces them:

1. **Chunking** turns corpus sections (`lib.datasets.Section`) into `Chunk`s, the units an
   index stores: one per section (`chunk_by_heading`), fixed word windows
   (`chunk_fixed`) or one per document (`chunk_whole_document`).
2. **Indexes** rank chunks for a query. `DenseIndex` (embeddings, dot product of unit
   vectors = cosine), `BM25Index` (lexical) and `HybridIndex` (reciprocal rank fusion of
   both) share one interface, `SearchIndex`: `search(query, k)` and
   `search_many(queries, k)` return `Hit`s, best first.
3. **Evaluation**: `evaluate` gives recall@k and MRR on answerable questions.
4. **Gates**: a *boundary* score (best cosine to in-scope example questions,
   `boundary_scores`) and *retrieval confidence* (top score and its margin to the
   runner-up, `retrieval_features`). Thresholds are fitted on dev data
   (`Gate`, with the workbook's one fitter `lib.selective.fit_threshold`, and
   `RetrievalGate`), never chosen by eye.
5. **Routing**: `route_question` sends a question down one of three paths, named with the
   course's one action vocabulary `lib.routing.Action`: ACT (answer from the retrieved
   sections, citing them; the original design's GROUNDED), ASK (in scope, but retrieval is
   not convincing; LOW_CONFIDENCE) or OUT_OF_SCOPE (the boundary fails; FALLBACK), with the
   numbers that decided it.

Embeddings are not computed here: every function that needs them takes an `embed`
callable, `embed(texts) -> np.ndarray` of shape [len(texts), dim], so any embedder works
(the course's `get_llm().embed`, or a small fake in tests). Vectors are re-normalised to
unit length on the way in, so a dot product is always a cosine similarity.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np
import pandas as pd

from lib.calibration import bootstrap_interval
from lib.checks import require_fitted
from lib.datasets import Section
from lib.routing import Action
from lib.selective import UnreachableTargetWarning, fit_threshold, threshold_curve

Embed = Callable[[Sequence[str]], np.ndarray]
"""An embedder: a list of n texts in, an array of shape [n, dim] out."""

__all__ = [
    "Chunk",
    "chunk_by_heading",
    "chunk_fixed",
    "chunk_whole_document",
    "Hit",
    "SearchIndex",
    "DenseIndex",
    "BM25Index",
    "HybridIndex",
    "tokenize",
    "rrf_scores",
    "gold_ranks",
    "evaluate",
    "boundary_scores",
    "retrieval_features",
    "Gate",
    "RetrievalGate",
    "roc_points",
    "bootstrap_precision_recall",
    "GATE_ROUTES",
    "ROUTE_MESSAGES",
    "RoutingVerdict",
    "route_question",
    "route_many",
]


# --------------------------------------------------------------------------- chunking


@dataclass(frozen=True)
class Chunk:
    """One retrievable unit of text.

    Attributes:
        id: unique within one chunking, e.g. "handbook/thesis-committee" (a section),
            "handbook#w120" (a word window starting at word 120) or "handbook" (a document).
        section_id: the section the chunk starts in (its primary section).
        doc: the document the chunk comes from, e.g. "helpdesk/vpn".
        text: what the index sees: the body with its title context prepended.
        title: the document's title (its `#` heading).
        heading: the `##` heading of `section_id`.
        section_ids: every section the chunk's words come from, in document order.
            Evaluation counts a chunk as a hit when any of these is a gold section.
    """

    id: str
    section_id: str
    doc: str
    text: str
    title: str
    heading: str
    section_ids: tuple[str, ...]

    @property
    def n_words(self) -> int:
        """Number of whitespace-separated words in `text` (a proxy for context cost)."""
        return len(self.text.split())


def chunk_by_heading(sections: Iterable[Section]) -> list[Chunk]:
    """One chunk per `##` section, its text prefixed with "<document title>: <heading>".

    Why the prefix: a section body often never repeats what it is about ("At least two
    members must come from..."); its heading does ("Thesis committee"). Prepending the
    document title and heading lets both the embedder and BM25 match a question on
    the words a reader would use to find the section.
    """
    return [
        Chunk(
            id=s.id,
            section_id=s.id,
            doc=s.doc,
            text=f"{s.title}: {s.heading}\n\n{s.text}".rstrip(),
            title=s.title,
            heading=s.heading,
            section_ids=(s.id,),
        )
        for s in sections
    ]


def _group_by_doc(sections: Iterable[Section]) -> dict[str, list[Section]]:
    """Sections grouped by document, documents and sections in their original order."""
    groups: dict[str, list[Section]] = {}
    for s in sections:
        groups.setdefault(s.doc, []).append(s)
    return groups


def chunk_fixed(
    sections: Iterable[Section], size_words: int = 60, overlap_words: int = 20
) -> list[Chunk]:
    """Windows of `size_words` words sliding over each document, `overlap_words` shared.

    This is the naive splitter that knows nothing about structure: each document is read
    as one stream of words (each section's heading line, then its body), and windows of
    `size_words` words start every `size_words - overlap_words` words. A window never
    crosses a document boundary; the last window of a document may be shorter, and no
    window is emitted that lies entirely inside the previous one. Whitespace (and so
    Markdown layout: lists, tables) is collapsed to single spaces.

    Each chunk's text is prefixed with the document title only (a window has no single
    heading). `section_id` is the section the window starts in; `section_ids` lists every
    section it overlaps, so evaluation credits a window for each section it touches
    (lenient to this chunker: a window that only grazes the gold section still counts).

    Raises:
        ValueError: if `size_words < 1`, `overlap_words < 0` or `overlap_words >= size_words`.
    """
    if not isinstance(size_words, int) or size_words < 1:
        raise ValueError(f"size_words must be an integer >= 1, got {size_words!r}")
    if not isinstance(overlap_words, int) or overlap_words < 0:
        raise ValueError(f"overlap_words must be an integer >= 0, got {overlap_words!r}")
    if overlap_words >= size_words:
        raise ValueError(
            f"overlap_words ({overlap_words}) must be smaller than size_words ({size_words}),"
            " otherwise the window never advances"
        )
    step = size_words - overlap_words
    chunks: list[Chunk] = []
    for doc, doc_sections in _group_by_doc(sections).items():
        words: list[str] = []
        owner: list[int] = []  # index into doc_sections for each word
        for i, s in enumerate(doc_sections):
            section_words = s.heading.split() + s.text.split()
            words.extend(section_words)
            owner.extend([i] * len(section_words))
        if not words:
            continue
        title = doc_sections[0].title
        start = 0
        while True:
            end = min(start + size_words, len(words))
            covered = list(dict.fromkeys(owner[start:end]))  # unique, in order
            first = doc_sections[covered[0]]
            chunks.append(
                Chunk(
                    id=f"{doc}#w{start}",
                    section_id=first.id,
                    doc=doc,
                    text=f"{title}\n\n" + " ".join(words[start:end]),
                    title=title,
                    heading=first.heading,
                    section_ids=tuple(doc_sections[i].id for i in covered),
                )
            )
            if end >= len(words):
                break
            start += step
    return chunks


def chunk_whole_document(sections: Iterable[Section]) -> list[Chunk]:
    """One chunk per document: its title, then every section's heading and body.

    `section_id` is the document's first section and `section_ids` all of them, so
    evaluation counts a hit whenever the document contains a gold section. That makes
    recall easy and the chunk useless as a precise source (and expensive as context):
    the trade-off notebook 02 measures.
    """
    chunks = []
    for doc, doc_sections in _group_by_doc(sections).items():
        title = doc_sections[0].title
        body = "\n\n".join(f"{s.heading}\n{s.text}".rstrip() for s in doc_sections)
        chunks.append(
            Chunk(
                id=doc,
                section_id=doc_sections[0].id,
                doc=doc,
                text=f"{title}\n\n{body}",
                title=title,
                heading=doc_sections[0].heading,
                section_ids=tuple(s.id for s in doc_sections),
            )
        )
    return chunks


# --------------------------------------------------------------------------- indexes


@dataclass(frozen=True)
class Hit:
    """One search result: a chunk, its score under the index that found it, its rank (1 = best)."""

    chunk: Chunk
    score: float
    rank: int


@runtime_checkable
class SearchIndex(Protocol):
    """What every index offers: its chunks, and ranked search for one or many queries."""

    chunks: list[Chunk]

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The best `k` chunks for `query` (fewer if the index has fewer), best first."""
        ...

    def search_many(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        """`search` for each query, in order."""
        ...


def _check_chunks(chunks: Sequence[Chunk]) -> list[Chunk]:
    chunks = list(chunks)
    if not chunks:
        raise ValueError("chunks is empty: an index needs at least one chunk")
    ids = [c.id for c in chunks]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"chunk ids must be unique; duplicated: {dupes[:5]}")
    return chunks


def _check_k(k: int) -> None:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


def _unit_rows(vectors: np.ndarray, n_expected: int, who: str) -> np.ndarray:
    """Validate an embedder's output and scale each row to unit length (zero rows stay zero)."""
    v = np.asarray(vectors, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] != n_expected:
        raise ValueError(
            f"{who}: embed must return an array of shape [{n_expected}, dim], got {v.shape}"
        )
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


def _hits_from_scores(chunks: list[Chunk], scores: np.ndarray, k: int) -> list[Hit]:
    """Top-k hits by descending score; ties keep chunk order (stable sort)."""
    order = np.argsort(-scores, kind="stable")[:k]
    return [Hit(chunks[i], float(scores[i]), r) for r, i in enumerate(order, start=1)]


class DenseIndex:
    """Embedding search: chunk texts embedded once, ranked by dot product with the query.

    Both sides are scaled to unit length, so a score is a cosine similarity in [-1, 1].

    Args:
        chunks: the chunks to index (non-empty, unique ids).
        embed: `embed(texts) -> array [len(texts), dim]`.
    """

    def __init__(self, chunks: Sequence[Chunk], embed: Embed):
        self.chunks = _check_chunks(chunks)
        self.embed = embed
        self.vectors = _unit_rows(embed([c.text for c in self.chunks]), len(self.chunks), "DenseIndex")

    def __len__(self) -> int:
        return len(self.chunks)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """Cosine similarity of each query to each chunk, shape [len(queries), len(chunks)]."""
        q = _unit_rows(self.embed(list(queries)), len(queries), "DenseIndex.scores")
        return q @ self.vectors.T

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        _check_k(k)
        queries = list(queries)
        if not queries:
            return []
        s = self.scores(queries)  # one embed call for the whole batch
        return [_hits_from_scores(self.chunks, row, k) for row in s]


_WORD = re.compile(r"[^\W_]+")


def _english_stopwords() -> frozenset[str]:
    try:  # bm25s ships the usual English list
        from bm25s.stopwords import STOPWORDS_EN

        return frozenset(STOPWORDS_EN)
    except ImportError:  # pragma: no cover - bm25s is a dependency
        return frozenset(
            "a an and are as at be but by for if in into is it no not of on or such that the"
            " their then there these they this to was will with".split()
        )


STOPWORDS_EN: frozenset[str] = _english_stopwords()


def tokenize(text: str, stopwords: frozenset[str] = STOPWORDS_EN) -> list[str]:
    """BM25's tokeniser: lower-case, split into runs of letters/digits (any script), drop stopwords.

    No stemming: "deadline" and "deadlines" are different words. Kept simple on purpose,
    so that a learner can predict what BM25 will and will not match.
    """
    return [w for w in _WORD.findall(text.lower()) if w not in stopwords]


class BM25Index:
    """Lexical search with BM25 (the `bm25s` library, Lucene variant, k1=1.5, b=0.75).

    Texts go through `tokenize` (lower-case, letter/digit runs, English stopwords
    removed, no stemming). A chunk that shares no word with the query scores 0 and is
    not returned: `search` can give fewer than `k` hits, and none for a query made only
    of stopwords or unknown words.
    """

    def __init__(self, chunks: Sequence[Chunk], k1: float = 1.5, b: float = 0.75):
        import bm25s

        self.chunks = _check_chunks(chunks)
        corpus_tokens = [tokenize(c.text) for c in self.chunks]
        self.vocab: dict[str, int] = {}
        for tokens in corpus_tokens:
            for t in tokens:
                self.vocab.setdefault(t, len(self.vocab))
        ids = [[self.vocab[t] for t in tokens] for tokens in corpus_tokens]
        self._bm25 = bm25s.BM25(k1=k1, b=b)
        self._bm25.index(bm25s.tokenization.Tokenized(ids=ids, vocab=dict(self.vocab)), show_progress=False)

    def __len__(self) -> int:
        return len(self.chunks)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of `query` against every chunk, shape [len(chunks)]."""
        ids = [self.vocab[t] for t in tokenize(query) if t in self.vocab]
        if not ids:
            return np.zeros(len(self.chunks))
        return np.asarray(self._bm25.get_scores(ids), dtype=np.float64)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        _check_k(k)
        s = self.scores(query)
        hits = _hits_from_scores(self.chunks, s, k)
        return [h for h in hits if h.score > 0]

    def search_many(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]


def rrf_scores(rankings: Sequence[Sequence[str]], k_rrf: float = 60) -> dict[str, float]:
    """Reciprocal rank fusion: each item scores sum over rankings of 1 / (k_rrf + rank).

    `rankings` are lists of ids, best first (rank 1). An item absent from a ranking gets
    nothing from it. Cormack, Clarke & Buettcher (2009) use k_rrf = 60.
    """
    if k_rrf <= 0:
        raise ValueError(f"k_rrf must be > 0, got {k_rrf!r}")
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k_rrf + rank)
    return fused


class HybridIndex:
    """Several indexes over the same chunks, fused by reciprocal rank fusion (`rrf_scores`).

    Each index is searched `depth` deep (default: all chunks); a chunk's fused score is
    the sum of 1 / (k_rrf + rank) over the indexes that returned it. Only ranks matter,
    so BM25 scores (unbounded) and cosines (at most 1) need no common scale. The fused
    score is not a similarity: use a `DenseIndex` for the retrieval-confidence gate.
    """

    def __init__(self, indexes: Sequence[SearchIndex], k_rrf: float = 60, depth: int | None = None):
        if not indexes:
            raise ValueError("indexes is empty: HybridIndex needs at least one index")
        if k_rrf <= 0:
            raise ValueError(f"k_rrf must be > 0, got {k_rrf!r}")
        ids0 = {c.id for c in indexes[0].chunks}
        for i, index in enumerate(indexes[1:], start=1):
            if {c.id for c in index.chunks} != ids0:
                raise ValueError(f"indexes[{i}] holds different chunks than indexes[0]; fuse indexes built on one chunking")
        self.indexes = list(indexes)
        self.k_rrf = k_rrf
        self.chunks = list(indexes[0].chunks)
        self.depth = depth
        self._by_id = {c.id: c for c in self.chunks}

    def __len__(self) -> int:
        return len(self.chunks)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        _check_k(k)
        queries = list(queries)
        depth = self.depth or len(self.chunks)
        per_index = [index.search_many(queries, depth) for index in self.indexes]
        results = []
        for qi in range(len(queries)):
            fused = rrf_scores([[h.chunk.id for h in hits[qi]] for hits in per_index], self.k_rrf)
            order = sorted(fused.items(), key=lambda item: -item[1])[:k]  # stable: ties keep first-seen order
            results.append([Hit(self._by_id[cid], s, r) for r, (cid, s) in enumerate(order, start=1)])
        return results


# --------------------------------------------------------------------------- evaluation


def _as_id_list(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return list(value)


def _answerable(questions: pd.DataFrame) -> pd.DataFrame:
    """Rows to evaluate retrieval on: type == "answerable" if there is a type column, else rows with gold ids."""
    if "type" in questions.columns:
        questions = questions[questions["type"] == "answerable"]
    return questions[questions["section_ids"].map(lambda v: len(_as_id_list(v)) > 0)]


def _distinct_units(hits: Sequence[Hit]) -> list[Hit]:
    """Hits with duplicates removed: a chunk counts only if it brings a section not seen above it.

    With heading chunks nothing is removed; with word windows, the second and later
    windows of one section are; with whole documents each document counts once.
    """
    seen: set[str] = set()
    kept = []
    for h in hits:
        new = set(h.chunk.section_ids) - seen
        if new:
            kept.append(h)
            seen.update(h.chunk.section_ids)
    return kept


def gold_ranks(index: SearchIndex, questions: pd.DataFrame) -> pd.DataFrame:
    """For each answerable question, where its first gold section appears in the ranking.

    Ranks count distinct units (see `evaluate`). Returns the answerable rows with added
    columns `gold_rank` (1 = first; NaN if never retrieved), `top_chunk_id` and
    `context_words` (list: cumulative words of the first 1, 2, ... distinct units).
    """
    rows = _answerable(questions)
    all_hits = index.search_many(rows["question"].tolist(), k=len(index.chunks))
    ranks, tops, words = [], [], []
    for gold, hits in zip(rows["section_ids"], all_hits):
        gold_set = set(_as_id_list(gold))
        units = _distinct_units(hits)
        rank = next((r for r, h in enumerate(units, start=1) if gold_set & set(h.chunk.section_ids)), np.nan)
        ranks.append(rank)
        tops.append(hits[0].chunk.id if hits else None)
        words.append(list(np.cumsum([h.chunk.n_words for h in units])))
    out = rows.copy()
    out["gold_rank"] = ranks
    out["top_chunk_id"] = tops
    out["context_words"] = words
    return out


def evaluate(index: SearchIndex, questions: pd.DataFrame, ks: Sequence[int] = (1, 3, 5)) -> dict[str, float]:
    """Recall@k and MRR of `index` on the answerable rows of `questions`.

    `questions` needs columns `question` and `section_ids` (a list of gold section ids);
    if it has a `type` column only rows with type "answerable" count.

    The ranking is de-duplicated before counting: walking down the hits, a chunk counts
    (takes the next rank) only if it adds a section not already covered above it. So
    three windows of one section count once, and recall@k means "a gold section is
    among the first k distinct pieces of context", comparable across chunkings. A
    chunk is a hit when any of its `section_ids` is gold (for a whole document: when
    the document contains a gold section).

    Returns:
        {"n": number of questions, "recall@k" for each k (fraction in [0, 1]),
         "mrr": mean of 1/gold_rank (0 when never retrieved),
         "context_words@k" for each k: mean words in the first k distinct chunks}.
    """
    for k in ks:
        _check_k(k)
    ranks = gold_ranks(index, questions)
    if ranks.empty:
        raise ValueError("no answerable questions with gold section_ids to evaluate on")
    r = ranks["gold_rank"].to_numpy(dtype=float)
    result: dict[str, float] = {"n": int(len(r))}
    for k in ks:
        result[f"recall@{k}"] = float(np.mean(np.nan_to_num(r, nan=np.inf) <= k))
    result["mrr"] = float(np.mean(np.where(np.isnan(r), 0.0, 1.0 / np.nan_to_num(r, nan=1.0))))
    for k in ks:
        result[f"context_words@{k}"] = float(np.mean([w[min(k, len(w)) - 1] if w else 0 for w in ranks["context_words"]]))
    return result


# --------------------------------------------------------------------------- gate features


def boundary_scores(
    questions: Sequence[str], example_questions: Sequence[str] | np.ndarray, embed: Embed
) -> np.ndarray:
    """Best cosine similarity of each question to any in-scope example question.

    Args:
        questions: n questions.
        example_questions: m in-scope examples, as texts, or as their embeddings
            (an [m, dim] array, to embed them once and reuse).
        embed: the embedder (the same one for both sides).

    Returns:
        array [n] of values in [-1, 1]. An example identical to a question scores 1:
        keep evaluation questions out of the examples.
    """
    questions = list(questions)
    if len(example_questions) == 0:
        raise ValueError("example_questions is empty: the boundary needs in-scope examples")
    if not questions:
        return np.zeros(0)
    if isinstance(example_questions, np.ndarray):
        e = _unit_rows(example_questions, example_questions.shape[0], "boundary_scores")
    else:
        e = _unit_rows(embed(list(example_questions)), len(example_questions), "boundary_scores")
    q = _unit_rows(embed(questions), len(questions), "boundary_scores")
    return (q @ e.T).max(axis=1)


def _questions_list(questions: pd.DataFrame | Sequence[str]) -> list[str]:
    if isinstance(questions, pd.DataFrame):
        return questions["question"].tolist()
    if isinstance(questions, str):
        raise TypeError("questions must be a list of strings or a DataFrame, not one string")
    return list(questions)


def _features_from_hits(hits: Sequence[Hit]) -> dict:
    """Top score, and the runner-up: the best hit sharing no section with the top hit."""
    if not hits:
        return dict(top_score=np.nan, runner_up_score=np.nan, margin=np.nan,
                    top_chunk_id=None, top_section_id=None, runner_up_section_id=None)
    top = hits[0]
    top_sections = set(top.chunk.section_ids)
    runner = next((h for h in hits[1:] if not top_sections & set(h.chunk.section_ids)), None)
    return dict(
        top_score=top.score,
        runner_up_score=runner.score if runner else np.nan,
        margin=top.score - runner.score if runner else np.inf,
        top_chunk_id=top.chunk.id,
        top_section_id=top.chunk.section_id,
        runner_up_section_id=runner.chunk.section_id if runner else None,
    )


def retrieval_features(index: SearchIndex, questions: pd.DataFrame | Sequence[str]) -> pd.DataFrame:
    """The retrieval-confidence numbers for each question.

    Columns: question, top_score, runner_up_score, margin (= top - runner-up),
    top_chunk_id, top_section_id, runner_up_section_id.

    The runner-up is the best chunk that shares no section with the top chunk, not
    simply the second hit. Two chunks of the same section agree with each other: a
    small gap between them says nothing about doubt. The margin should measure
    whether a *different* part of the corpus is about as good an answer, which is what
    an ambiguous or unanswerable question looks like.

    Edge cases: no hits (BM25, no shared word) gives NaN scores; no competitor at all
    gives runner_up_score NaN and margin +inf (nothing competes with the top chunk).
    Row order (and index, for a DataFrame) follows `questions`.
    """
    texts = _questions_list(questions)
    all_hits = index.search_many(texts, k=len(index.chunks)) if texts else []
    frame = pd.DataFrame([dict(question=q, **_features_from_hits(h)) for q, h in zip(texts, all_hits)],
                         columns=["question", "top_score", "runner_up_score", "margin",
                                  "top_chunk_id", "top_section_id", "runner_up_section_id"])
    if isinstance(questions, pd.DataFrame):
        frame.index = questions.index
    return frame


# --------------------------------------------------------------------------- thresholds


def _as_bool(positive, n: int, who: str) -> np.ndarray:
    p = np.asarray(positive)
    if p.shape != (n,):
        raise ValueError(f"{who}: positive must have shape ({n},) like scores, got {p.shape}")
    return p.astype(bool)


@dataclass
class Gate:
    """One threshold on one score: a row passes when score >= `threshold_`.

    Used for the boundary check (score = `boundary_scores`). Fit on dev, predict on test:

        gate = Gate(target_precision=0.95).fit(dev_scores, dev_in_scope)
        passes = gate.predict(test_scores)

    Attributes after `fit`: `threshold_` and `reached_` (False when no threshold reaches
    `target_precision`; `threshold_` is then `inf` and the gate accepts nothing).
    """

    target_precision: float = 0.95

    @classmethod
    def with_threshold(cls, threshold: float) -> "Gate":
        """A gate with a chosen `threshold_` instead of a fitted one (it has no `reached_`)."""
        gate = cls()
        gate.threshold_ = float(threshold)
        return gate

    def fit(self, scores, positive) -> "Gate":
        """Set `threshold_` with `lib.selective.fit_threshold` (a gate's precision is the accuracy of what it accepts).

        If no threshold reaches `target_precision`, warns `UnreachableTargetWarning` and sets
        `reached_` False.
        """
        self.threshold_ = fit_threshold(scores, positive, self.target_precision)
        self.reached_ = math.isfinite(self.threshold_)
        return self

    def predict(self, scores) -> np.ndarray:
        """Bool array: True where score >= `threshold_` (NaN never passes)."""
        require_fitted(self, "threshold_", "predict")
        with np.errstate(invalid="ignore"):
            return np.asarray(scores, dtype=np.float64) >= self.threshold_


@dataclass
class RetrievalGate:
    """Retrieval confidence: pass when top_score >= `score_threshold_` AND margin >= `margin_threshold_`.

    The fitting rule (`fit`): try every pair (score threshold, margin threshold) with
    values taken from the dev data, plus "no margin requirement" (-inf); keep the pairs
    whose precision on dev reaches `target_precision`; choose the one with the highest
    recall, then the highest precision, then the smallest margin threshold, then the
    smallest score threshold. This maximises recall subject to the precision target,
    and the margin is only used when it buys something on dev. With two thresholds and
    a small dev set this can overfit: report precision and recall on test.

    Attributes after `fit`: `score_threshold_`, `margin_threshold_`, `reached_` (False when
    no pair reaches the target: the score threshold is then `inf` and the gate accepts
    nothing) and the dev scores of the chosen pair, `dev_precision_` and `dev_recall_`.
    """

    target_precision: float = 0.95

    @classmethod
    def with_thresholds(cls, score_threshold: float, margin_threshold: float) -> "RetrievalGate":
        """A gate with chosen thresholds instead of fitted ones (it has no `reached_` or dev scores)."""
        gate = cls()
        gate.score_threshold_, gate.margin_threshold_ = float(score_threshold), float(margin_threshold)
        return gate

    def fit(self, features: pd.DataFrame, positive) -> "RetrievalGate":
        """Fit both thresholds on dev features (`retrieval_features` output) and labels.

        Args:
            features: DataFrame with columns top_score and margin.
            positive: array [n] of bools: True where the corpus supports an answer
                (e.g. type == "answerable"; or stricter: answerable and the top chunk
                is a gold section).
        """
        top = features["top_score"].to_numpy(dtype=np.float64)
        margin = features["margin"].to_numpy(dtype=np.float64)
        pos = _as_bool(positive, len(top), "RetrievalGate.fit")
        if not np.isfinite(top).any():
            raise ValueError("RetrievalGate.fit: top_score has no finite value")
        if not 0 < self.target_precision <= 1:
            raise ValueError(f"target_precision must be in (0, 1], got {self.target_precision!r}")
        score_grid = np.unique(top[np.isfinite(top)])
        margin_grid = np.r_[-np.inf, np.unique(margin[np.isfinite(margin)])]
        with np.errstate(invalid="ignore"):
            pass_score = top[None, :] >= score_grid[:, None]        # [S, n]
            pass_margin = margin[None, :] >= margin_grid[:, None]    # [M, n] (+inf margin passes)
        accepted = pass_score.astype(np.int64) @ pass_margin.T.astype(np.int64)  # [S, M]
        true_pos = (pass_score & pos).astype(np.int64) @ pass_margin.T.astype(np.int64)
        n_pos = max(int(pos.sum()), 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(accepted > 0, true_pos / np.maximum(accepted, 1), 0.0)
        recall = true_pos / n_pos
        ok = (accepted > 0) & (precision >= self.target_precision - 1e-12)
        if not ok.any():
            self.score_threshold_, self.margin_threshold_ = math.inf, -math.inf
            self.reached_, self.dev_precision_, self.dev_recall_ = False, math.nan, 0.0
            warnings.warn(f"RetrievalGate: precision {self.target_precision} unreachable on the "
                          "fitting data; the gate accepts nothing", UnreachableTargetWarning, stacklevel=2)
            return self
        si, mi = np.nonzero(ok)
        # Sort keys: recall desc, precision desc, margin threshold asc, score threshold asc.
        best = np.lexsort((score_grid[si], margin_grid[mi], -precision[si, mi], -recall[si, mi]))[0]
        s, m = si[best], mi[best]
        self.score_threshold_, self.margin_threshold_ = float(score_grid[s]), float(margin_grid[m])
        self.reached_ = True
        self.dev_precision_, self.dev_recall_ = float(precision[s, m]), float(recall[s, m])
        return self

    def predict(self, features: pd.DataFrame) -> np.ndarray:
        """Bool array: True where top_score >= `score_threshold_` and margin >= `margin_threshold_`."""
        require_fitted(self, "score_threshold_", "predict")
        top = features["top_score"].to_numpy(dtype=np.float64)
        margin = features["margin"].to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            return (top >= self.score_threshold_) & (margin >= self.margin_threshold_)

    def failed_check(self, top_score: float, margin: float) -> str | None:
        """Which check a single row fails first: "retrieval_score", "retrieval_margin" or None."""
        require_fitted(self, "score_threshold_", "failed_check")
        if not top_score >= self.score_threshold_:  # also catches NaN
            return "retrieval_score"
        if not margin >= self.margin_threshold_:
            return "retrieval_margin"
        return None


def roc_points(scores, positive) -> pd.DataFrame:
    """Every operating point of the decision "score >= threshold", for ROC and precision plots.

    Returns a DataFrame with one row per threshold: first +inf (accept nothing), then the
    rows of `lib.selective.threshold_curve`, down to the lowest score (accept everything);
    columns threshold, tpr (recall), fpr, precision (NaN when nothing is accepted),
    accepted (count). NaN scores are never accepted. Needs at least one positive and one
    negative.
    """
    s = np.asarray(scores, dtype=np.float64)
    p = _as_bool(positive, len(s), "roc_points")
    n_pos, n_neg = int(p.sum()), int((~p).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"roc_points needs both classes; got {n_pos} positive, {n_neg} negative")
    curve = threshold_curve(s, p)
    accepted = np.r_[0, curve["count"].to_numpy()]
    tp = np.rint(np.r_[0.0, (curve["accuracy"] * curve["count"]).to_numpy()])
    fp = accepted - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(accepted > 0, tp / np.maximum(accepted, 1), np.nan)
    return pd.DataFrame({"threshold": np.r_[np.inf, curve["threshold"].to_numpy()], "tpr": tp / n_pos,
                         "fpr": fp / n_neg, "precision": precision, "accepted": accepted})


def bootstrap_precision_recall(pred, positive, n: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Precision and recall of a bool decision, with 95% percentile bootstrap intervals.

    Each interval resamples the rows its metric is a proportion of: the accepted rows
    for precision (share of them that were right), the positive rows for recall (share
    of them that were accepted), via `lib.calibration.bootstrap_interval`. Resampling
    within those rows keeps the metric defined on every resample (a joint resample of
    all rows can accept nothing when few rows are accepted) at the cost of treating the
    number of accepted (or positive) rows as fixed.

    Args:
        pred: array [m] of bools, True = the gate accepted.
        positive: array [m] of bools, True = accepting was right.
        n: bootstrap resamples; seed: for the resampling generator.

    Returns:
        DataFrame indexed by metric ("precision", "recall") with columns value, low,
        high, and support (accepted rows for precision, positive rows for recall).
        All NaN for a metric whose support is 0.
    """
    pr = np.asarray(pred).astype(bool)
    ps = _as_bool(positive, len(pr), "bootstrap_precision_recall")
    rows = {}
    for name, outcomes in (("precision", ps[pr]), ("recall", pr[ps])):
        if len(outcomes) == 0:
            value = low = high = math.nan
        else:
            value, low, high = bootstrap_interval(np.mean, outcomes.astype(float), n=n, seed=seed)
        rows[name] = dict(value=value, low=low, high=high, support=len(outcomes))
    return pd.DataFrame.from_dict(rows, orient="index")


# --------------------------------------------------------------------------- routing


GATE_ROUTES: tuple[Action, ...] = (Action.ACT, Action.ASK, Action.OUT_OF_SCOPE)
"""The three paths the gates can send a question down, in table order."""

ROUTE_MESSAGES = {
    Action.ACT: "Answer from the corpus, citing the sources listed.",
    Action.ASK: "The corpus does not clearly support an answer to this question.",
    Action.OUT_OF_SCOPE: "Outside what the corpus covers: any answer is NOT from the corpus and has no citations.",
}
"""What the user is told on each of the three paths a question can take before any generation."""


@dataclass(frozen=True)
class RoutingVerdict:
    """The route for one question and every number that decided it.

    failed_gate is the first check that failed, in pipeline order: "boundary",
    "retrieval_score", "retrieval_margin", or None (ACT). `sources` are section ids,
    non-empty only for ACT. Retrieval numbers are computed even when the boundary
    fails, so a trace always shows all of them. `ranked_sections` holds (section id,
    heading) of every section in retrieval order, best first, each once: what a
    clarifying question can offer, without searching again.
    """

    question: str
    route: Action
    boundary_score: float
    boundary_threshold: float
    top_score: float
    runner_up_score: float
    margin: float
    score_threshold: float
    margin_threshold: float
    failed_gate: str | None
    top_section_id: str | None
    runner_up_section_id: str | None
    sources: tuple[str, ...] = field(default=())
    ranked_sections: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def message(self) -> str:
        """What the assistant tells the user about this route."""
        return ROUTE_MESSAGES[self.route]

    def explain(self) -> str:
        """One line: the route, and the numbers against their thresholds."""
        return (
            f"{self.route.value}: boundary {self.boundary_score:.3f} (>= {self.boundary_threshold:.3f}?), "
            f"top {self.top_score:.3f} (>= {self.score_threshold:.3f}?), runner-up {self.runner_up_score:.3f}, "
            f"margin {self.margin:.3f} (>= {self.margin_threshold:.3f}?)"
            + (f"; failed: {self.failed_gate}" if self.failed_gate else f"; sources: {', '.join(self.sources)}")
        )


def route_many(
    questions: Sequence[str],
    boundary_gate: Gate,
    retrieval_gate: RetrievalGate,
    *,
    index: SearchIndex,
    example_questions: Sequence[str] | np.ndarray,
    embed: Embed,
    n_sources: int = 3,
) -> list[RoutingVerdict]:
    """`route_question` for many questions, embedding them in batches."""
    require_fitted(boundary_gate, "threshold_", "route_many")
    require_fitted(retrieval_gate, "score_threshold_", "route_many")
    questions = _questions_list(questions)
    b_scores = boundary_scores(questions, example_questions, embed) if questions else np.zeros(0)
    all_hits = index.search_many(questions, k=len(index.chunks)) if questions else []
    verdicts = []
    for q, b, hits in zip(questions, b_scores, all_hits):
        f = _features_from_hits(hits)
        if not b >= boundary_gate.threshold_:
            failed = "boundary"
        else:
            failed = retrieval_gate.failed_check(f["top_score"], f["margin"])
        route = (Action.OUT_OF_SCOPE if failed == "boundary" else
                 Action.ASK if failed else Action.ACT)
        sources: tuple[str, ...] = ()
        if route is Action.ACT:
            sources = tuple(dict.fromkeys(h.chunk.section_id for h in _distinct_units(hits)))[:n_sources]
        verdicts.append(RoutingVerdict(
            question=q, route=route,
            boundary_score=float(b), boundary_threshold=boundary_gate.threshold_,
            top_score=f["top_score"], runner_up_score=f["runner_up_score"], margin=f["margin"],
            score_threshold=retrieval_gate.score_threshold_, margin_threshold=retrieval_gate.margin_threshold_,
            failed_gate=failed, top_section_id=f["top_section_id"],
            runner_up_section_id=f["runner_up_section_id"], sources=sources,
            ranked_sections=_ranked_sections(hits),
        ))
    return verdicts


QUESTION_TYPES = ("answerable", "unanswerable", "out_of_scope")


def gate_tradeoff(question_types: Sequence[str], boundary_passed, features: pd.DataFrame,
                  score_threshold: float, margin_threshold: float) -> tuple[pd.Series, pd.DataFrame]:
    """What the two gates decide on labelled questions when the retrieval thresholds are moved.

    The computation behind the threshold sliders of notebook 02: the boundary's verdicts
    stay fixed, the retrieval gate is `RetrievalGate` with the given thresholds.

    Args:
        question_types: [n] each "answerable", "unanswerable" or "out_of_scope".
        boundary_passed: [n] bools, the boundary gate's verdicts.
        features: `retrieval_features` of the questions that passed the boundary, in
            their order ([sum(boundary_passed)] rows, columns top_score and margin).
        score_threshold, margin_threshold: the retrieval gate's two thresholds.

    Returns:
        (summary, routes). summary: grounded (count), precision (the answerable share of
        ACT, NaN when nothing is grounded) and recall (the ACT share of the
        answerable questions past the boundary), as for the fitted gates. routes: counts
        of question type (rows, QUESTION_TYPES order) by route (columns act, ask, out_of_scope).
    """
    types = np.asarray(list(question_types), dtype=object)
    passed = _as_bool(boundary_passed, len(types), "gate_tradeoff")
    if len(features) != int(passed.sum()):
        raise ValueError(f"gate_tradeoff: {len(features)} feature rows for {int(passed.sum())} questions "
                         "past the boundary")
    unknown = set(types) - set(QUESTION_TYPES)
    if unknown:
        raise ValueError(f"gate_tradeoff: unknown question types {sorted(unknown)}; use {QUESTION_TYPES}")
    grounded = RetrievalGate.with_thresholds(score_threshold, margin_threshold).predict(features)
    answerable = types[passed] == "answerable"
    routes = np.full(len(types), Action.OUT_OF_SCOPE.value, dtype=object)
    routes[passed] = np.where(grounded, Action.ACT.value, Action.ASK.value)
    summary = pd.Series({
        "grounded": int(grounded.sum()),
        "precision": float(answerable[grounded].mean()) if grounded.any() else math.nan,
        "recall": float(grounded[answerable].mean()) if answerable.any() else math.nan,
    })
    table = pd.crosstab(pd.Series(types, name="type"), pd.Series(routes, name="route")).reindex(
        index=list(QUESTION_TYPES), columns=[a.value for a in GATE_ROUTES], fill_value=0)
    return summary, table


def _ranked_sections(hits: Sequence[Hit]) -> tuple[tuple[str, str], ...]:
    """(section id, heading) of each section among `hits`, in hit order, first occurrence only."""
    ranked: dict[str, str] = {}
    for hit in hits:
        ranked.setdefault(hit.chunk.section_id, hit.chunk.heading)
    return tuple(ranked.items())


def route_question(
    question: str,
    boundary_gate: Gate,
    retrieval_gate: RetrievalGate,
    *,
    index: SearchIndex,
    example_questions: Sequence[str] | np.ndarray,
    embed: Embed,
    n_sources: int = 3,
) -> RoutingVerdict:
    """Decide the path for one question, before any generation.

    1. Boundary: best cosine to the in-scope examples below `boundary_gate.threshold_`
       -> OUT_OF_SCOPE (answer, if at all, clearly labelled as not from the corpus).
    2. Retrieval confidence: top score below `retrieval_gate.score_threshold_`, or margin
       to the runner-up (best chunk of another section) below its threshold
       -> ASK (say the corpus does not support an answer).
    3. Otherwise ACT, with the first `n_sources` distinct sections as sources.

    `index` should be a `DenseIndex` (its scores are the cosines the gate was fitted
    on). `example_questions` may be texts or their precomputed embeddings.
    """
    return route_many([question], boundary_gate, retrieval_gate, index=index,
                      example_questions=example_questions, embed=embed, n_sources=n_sources)[0]
