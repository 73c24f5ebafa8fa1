"""Chunking, the indexes that rank chunks for a query, and the index over labelled intent examples.

The pieces, in the order notebook 02 introduces them:

1. **Chunking** turns corpus sections (`lib.datasets.Section`) into `Chunk`s, the units an
   index stores: one per section (`chunk_by_heading`), fixed word windows
   (`chunk_fixed`) or one per document (`chunk_whole_document`).
2. **Indexes** rank chunks for a query. `DenseIndex` (embeddings, dot product of unit
   vectors = cosine), `BM25Index` (lexical) and `HybridIndex` (reciprocal rank fusion of
   both) share one interface, `SearchIndex`: `search(query, k)` and
   `search_many(queries, k)` return `Hit`s, best first.
3. **Evaluation**: `evaluate` gives recall@k and MRR on answerable questions.

The gates that decide what to do with a ranking live in `lib.retrieval`.

Part II searches labelled messages instead of sections: `IntentRetriever` finds the intents
of the nearest training messages (the shortlist of `lib.decisions.ShortlistDecider`, the
`NearestNeighbourDecider` baseline), on MiniLM vectors cached by `pool_embeddings`.

Chunk indexes compute no embeddings themselves: every function that needs them takes an
`embed` callable, `embed(texts) -> np.ndarray` of `shape (len(texts), dim)`, so any
embedder works (the course's `get_llm().embed`, or a small fake in tests). Vectors are
re-normalised to unit length on the way in (`unit_rows`), so a dot product is always a
cosine similarity.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np
import pandas as pd

from lib.datasets import Section, gold_section_ids
from lib.embeddings import embed as minilm
from lib.hashing import fingerprint

Embed = Callable[[Sequence[str]], np.ndarray]
"""An embedder: a list of n texts in, an array of `shape (n, dim)` out."""

__all__ = [
    "Embed",
    "Chunk",
    "chunk_by_heading",
    "chunk_fixed",
    "chunk_whole_document",
    "Hit",
    "SearchIndex",
    "unit_rows",
    "DenseIndex",
    "BM25Index",
    "HybridIndex",
    "tokenize",
    "rrf_scores",
    "distinct_units",
    "gold_ranks",
    "evaluate",
    "pool_embeddings",
    "IntentRetriever",
    "STOPWORDS_EN",
    "EMBEDDING_CACHE",
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


def unit_rows(vectors: np.ndarray, n_expected: int, who: str) -> np.ndarray:
    """An embedder's output, checked to be `shape (n_expected, dim)`, with each row scaled to unit length.

    Zero rows stay zero. `who` names the caller in the error message.
    """
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
        embed: `embed(texts) -> np.ndarray` of `shape (len(texts), dim)`; kept as `embed`.
    """

    def __init__(self, chunks: Sequence[Chunk], embed: Embed):
        self.chunks = _check_chunks(chunks)
        self.embed = embed
        self.vectors = unit_rows(embed([c.text for c in self.chunks]), len(self.chunks), "DenseIndex")

    def __len__(self) -> int:
        return len(self.chunks)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """Cosine similarity of each query to each chunk, `shape (len(queries), len(chunks))`."""
        q = unit_rows(self.embed(list(queries)), len(queries), "DenseIndex.scores")
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
        """BM25 score of `query` against every chunk, `shape (len(chunks),)`."""
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


def _answerable(questions: pd.DataFrame) -> pd.DataFrame:
    """Rows to evaluate retrieval on: type == "answerable" if there is a type column, else rows with gold ids."""
    if "type" in questions.columns:
        questions = questions[questions["type"] == "answerable"]
    return questions[questions["section_ids"].map(lambda v: len(gold_section_ids(v)) > 0)]


def distinct_units(hits: Sequence[Hit]) -> list[Hit]:
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
        gold_set = set(gold_section_ids(gold))
        units = distinct_units(hits)
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



# --------------------------------------------------------------------------- intent examples


EMBEDDING_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "embeddings"


def pool_embeddings(texts: Sequence[str], embed: Embed | None = None) -> np.ndarray:
    """Vectors of a training pool, `shape (len(texts), dim)`; MiniLM's are cached on disk by a hash of the texts.

    Embedding BANKING77's or CLINC150's pool takes about 20 s on two cores, and every run of
    every method needs it; the vectors are deterministic, so they are computed once (in
    .cache/embeddings/; `make setup` makes both pools' with setup/embed_pools.py). A file is
    written beside its place and moved there, so a process never reads another's half-written
    file. A custom `embed` function (tests) is never cached.
    """
    if embed is not None:
        return embed(list(texts))
    path = EMBEDDING_CACHE / f"{fingerprint(list(texts))}.npy"
    if path.is_file():
        return np.load(path)
    vectors = minilm(list(texts))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # another process may be writing the same file
    with partial.open("wb") as handle:
        np.save(handle, vectors)
    os.replace(partial, path)  # whole or absent: a reader never sees half a file
    return vectors


class IntentRetriever:
    """MiniLM nearest neighbours over a pool of labelled training messages.

    Args:
        pool: the training messages, columns `text` and `label`.
        embed: the embedder for the pool and the queries (default MiniLM, the pool's
            vectors cached by `pool_embeddings`); kept as `embed`.
    """

    def __init__(self, pool: pd.DataFrame, embed: Embed | None = None) -> None:
        self.embed = embed or minilm
        self.texts = pool["text"].tolist()
        self.labels = np.asarray(pool["label"].tolist())
        self.vectors = pool_embeddings(self.texts, embed)
        self.pool_fingerprint = fingerprint([self.texts, self.labels.tolist()])

    def nearest_intents(self, text: str, k: int) -> list[tuple[str, float]]:
        """The k distinct intents of the nearest pool messages, each with its best cosine similarity."""
        return self.nearest_to_vector(self.embed([text])[0], k)

    def nearest_to_vector(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """`nearest_intents` for a message already embedded (`vector`: `shape (dim,)`)."""
        similarities = self.vectors @ vector
        order = np.argsort(-similarities, kind="stable")
        found: dict[str, float] = {}
        for index in order:
            label = str(self.labels[index])
            if label not in found:
                found[label] = float(similarities[index])
                if len(found) == k:
                    break
        return list(found.items())
