"""Semantic entropy: is the model unsure of *what* to say, not just of how to say it?

Token probabilities mix two kinds of doubt: doubt about the meaning of an answer and
doubt about its wording ("48 credits" vs "forty-eight credits"). Kuhn, Gal and Farquhar
(2023, "Semantic Uncertainty", ICLR) separate them: sample several answers to the same
question at temperature > 0, group the answers that mean the same thing, and take the
entropy of the groups. Many samples in one group: the model knows what it thinks. Samples
scattered over many groups: it is guessing, and its greedy answer is more often wrong.

What is here:
- `cluster_by_meaning`: the greedy clustering of Kuhn et al., with a pluggable test
  "do these two answers mean the same?"; each new answer is compared with one
  representative (the first member) of each existing cluster, which saves calls.
- `bidirectional`: turns an `entails(a, b)` test into "a entails b and b entails a".
- `LLMEntailment`: an `entails` test asked of a language model (yes/no next-token
  probabilities), counting its calls and seconds so its cost can be reported.
- `cluster_by_embedding`: the same clustering with cosine similarity >= a threshold.
- `discrete_semantic_entropy`: entropy (in nats) of the cluster frequencies.
- `rand_agreement`: how often two clusterings agree on "same cluster or not" for a pair.
- `short_answer_questions`, `short_answer_items`, `short_answer_messages`, `sample_answers`: the
  short-answer task of notebooks 07, 09 and 10 (60 handbook questions with short gold answers,
  each with its retrieved section; the prompt; one greedy answer with token probabilities, then
  seeded samples).
- `auroc_difference`: the paired bootstrap of the difference between two signals' AUROC.
- `cascade_confidence`: cheap calibrated confidence first; only the answers below a
  threshold pay for semantic entropy, which then joins in their score.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import TypeVar

import numpy as np
import pandas as pd

from lib.backends.protocol import LLM, Completion
from lib.checks import check_unit_interval
from lib.datasets import load_corpus, load_questions
from lib.indexes import DenseIndex, Embed, chunk_by_heading
from lib.selective import auroc
from lib.text import normalize_answer

__all__ = [
    "SameMeaning", "cluster_by_meaning", "bidirectional", "LLMEntailment", "cluster_by_embedding",
    "discrete_semantic_entropy", "rand_agreement", "max_entropy", "SHORT_ANSWER_SYSTEM", "SHORT_ANSWER_MAX_TOKENS",
    "SAMPLE_TEMPERATURE", "N_SAMPLES", "GREEDY_TOP_LOGPROBS", "N_HANDBOOK_QUESTIONS", "HANDBOOK_SEED",
    "MAX_GOLD_CHARS", "short_answer_questions", "short_answer_items", "short_answer_messages", "greedy_answer", "sample_answers",
    "auroc_difference", "cascade_confidence",
]

SameMeaning = Callable[[str, str], bool]
"""A test on two answer texts: True when they mean the same thing."""


def cluster_by_meaning(answers: Sequence[str], same_meaning: SameMeaning) -> list[int]:
    """Cluster ids (0, 1, 2, ... in order of first appearance), one per answer.

    Each answer is compared with the first member (the representative) of each cluster
    so far, in cluster order, and joins the first cluster whose representative means the
    same; otherwise it starts a new cluster. Answers whose normalised text is identical
    join without a call to `same_meaning`: no model is needed to see that "48 credits"
    and "48 credits." agree. With n answers in c clusters this makes at most n * c calls.
    """
    return _cluster_against_representatives(
        list(answers),
        lambda representative, answer: (normalize_answer(answer) == normalize_answer(representative)
                                        or same_meaning(representative, answer)))


_Item = TypeVar("_Item")


def _cluster_against_representatives(items: Sequence[_Item], same: Callable[[_Item, _Item], bool]) -> list[int]:
    """Each item joins the first cluster whose first member is `same` as it, else starts a new one."""
    representatives: list = []
    cluster_ids: list[int] = []
    for item in items:
        for cluster, representative in enumerate(representatives):
            if same(representative, item):
                cluster_ids.append(cluster)
                break
        else:
            cluster_ids.append(len(representatives))
            representatives.append(item)
    return cluster_ids


def bidirectional(entails: SameMeaning) -> SameMeaning:
    """"Same meaning" as entailment both ways: entails(a, b) and entails(b, a).

    One-way entailment is not enough: "in 2019" entails "in the 2010s" but not the
    reverse, and they are different answers. The second call is skipped when the first
    says no.
    """
    def same_meaning(first: str, second: str) -> bool:
        return entails(first, second) and entails(second, first)

    return same_meaning


class LLMEntailment:
    """`entails(a, b)` for answers to one question, decided by a language model.

    Asks: given the question, does answer A imply answer B? and compares the model's
    next-token probabilities of "yes" and "no" (one forward pass, no generation).
    `calls` and `seconds` add up every call made, so the cost of clustering can be
    reported next to the cost of sampling.

    llm: anything with `next_token_logprobs(messages, score_tokens=...)` (see `lib.backends.protocol.LLM`).
    question: the question both answers reply to; it decides what "the same" means.
    """

    SYSTEM = ("You compare two short answers to the same question. Reply yes if answer A "
              "states or implies everything that answer B says, otherwise no. "
              "Reply with one word: yes or no.")

    def __init__(self, llm: LLM, question: str) -> None:
        self.llm = llm
        self.question = question
        self.calls = 0
        self.seconds = 0.0

    def messages(self, first: str, second: str) -> list[dict[str, str]]:
        """The chat sent to the model for the pair (first, second)."""
        prompt = f"Question: {self.question}\nAnswer A: {first}\nAnswer B: {second}\nDoes answer A imply answer B?"
        return [{"role": "system", "content": self.SYSTEM}, {"role": "user", "content": prompt}]

    def __call__(self, first: str, second: str) -> bool:
        result = self.llm.next_token_logprobs(self.messages(first, second), top_k=0,
                                              score_tokens=("yes", "no"))
        self.calls += 1
        self.seconds += result.seconds
        yes, no = result.scores.get("yes"), result.scores.get("no")
        if yes is None and no is None:
            raise ValueError("neither 'yes' nor 'no' is among the top candidates the backend "
                             "reported for the entailment question, so it cannot be answered; use the embedded "
                             "backend, which scores every token")
        # A server reports only its top candidates: a word missing from them is below all of them.
        return (yes if yes is not None else -math.inf) > (no if no is not None else -math.inf)


def cluster_by_embedding(vectors: np.ndarray, threshold: float) -> list[int]:
    """`cluster_by_meaning` with "same meaning" = cosine similarity >= `threshold`.

    vectors: shape (n, dim), one embedding per answer (rows need not be unit length).
    Each answer is compared with each cluster's first member, as in `cluster_by_meaning`;
    identical vectors always agree. No exact-text shortcut is needed here: identical texts
    have identical embeddings.
    """
    array = np.asarray(vectors, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"vectors must have shape (n, dim), got {array.shape}")
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold is a cosine similarity, so it lies in [-1, 1]; got {threshold}")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError("vectors contains an all-zero row, whose cosine similarity is undefined")
    unit = array / norms
    return _cluster_against_representatives(
        list(range(len(unit))), lambda representative, row: float(unit[row] @ unit[representative]) >= threshold)


def discrete_semantic_entropy(cluster_ids: Sequence[int]) -> float:
    """Entropy in nats of the cluster frequencies: -sum p_c log p_c with p_c = n_c / n.

    This is the "discrete" variant of Kuhn et al. (2023), which needs no token
    probabilities: p_c is the share of sampled answers in cluster c. All answers in one
    cluster give 0; n answers in n different clusters give log(n), the most possible.
    """
    if len(cluster_ids) == 0:
        raise ValueError("cluster_ids is empty; need at least one sampled answer")
    counts = np.array(list(Counter(cluster_ids).values()), dtype=np.float64)
    shares = counts / counts.sum()
    return float(-(shares * np.log(shares)).sum()) + 0.0


def rand_agreement(first: Sequence[int], second: Sequence[int]) -> float:
    """Share of answer pairs on which two clusterings agree (the Rand index).

    For every pair of answers, each clustering says "same cluster" or "different
    clusters"; this is the share of pairs where both say the same. Cluster ids need not
    match between the two (they are only compared within one clustering). With fewer than
    two answers there is no pair, and the result is 1.0.
    """
    if len(first) != len(second):
        raise ValueError(f"the clusterings cover {len(first)} and {len(second)} answers; they must cover the same answers")
    pairs = list(combinations(range(len(first)), 2))
    if not pairs:
        return 1.0
    agree = sum((first[i] == first[j]) == (second[i] == second[j]) for i, j in pairs)
    return agree / len(pairs)


def max_entropy(n: int) -> float:
    """log(n): the entropy when n answers fall in n different clusters."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return math.log(n)


SHORT_ANSWER_SYSTEM = ("Answer the question from the handbook section below. Reply with the answer only, "
                       "in a few words, not a sentence.\n\n{context}")
"""The instructions for the short answers of notebooks 07 and 10; `{context}` is the retrieved section."""
SHORT_ANSWER_MAX_TOKENS = 12
SAMPLE_TEMPERATURE = 0.7
N_SAMPLES = 4
GREEDY_TOP_LOGPROBS = 5
"""Candidates kept per token of the greedy answer (notebook 07 reads them)."""


N_HANDBOOK_QUESTIONS, HANDBOOK_SEED, MAX_GOLD_CHARS = 60, 7, 20
"""The short-answer questions: 60 of the answerable handbook questions whose gold answer has at most 20 characters."""


def short_answer_questions(n: int = N_HANDBOOK_QUESTIONS, seed: int = HANDBOOK_SEED) -> pd.DataFrame:
    """Answerable handbook questions whose gold answer has at most 20 characters: a seeded sample of n, by id."""
    questions = load_questions()
    short = questions[(questions["type"] == "answerable") & (questions["answer"].str.len() <= MAX_GOLD_CHARS)]
    return short.sample(n, random_state=seed).sort_values("id").reset_index(drop=True)


def short_answer_items(embed: Embed) -> list[dict[str, object]]:
    """The questions of `short_answer_questions`, each with the handbook section retrieved for it.

    Each item: id, question, gold, section (the best section's id, by `embed`), retrieval_hit
    (whether it is a gold section) and context (its text): what the saved run `handbook-short-answers`
    answers and the drift measurement asks again.
    """
    questions = short_answer_questions()
    index = DenseIndex(chunk_by_heading(load_corpus()), embed)
    hits = [found[0] for found in index.search_many(questions["question"].tolist(), k=1)]
    return [{"id": q.id, "question": q.question, "gold": q.answer, "section": hit.chunk.section_id,
             "retrieval_hit": hit.chunk.section_id in q.section_ids, "context": hit.chunk.text}
            for q, hit in zip(questions.itertuples(), hits)]



def short_answer_messages(question: str, context: str) -> list[dict[str, str]]:
    """The chat for one short answer: the section in the system message (read once, then cached), the question."""
    return [{"role": "system", "content": SHORT_ANSWER_SYSTEM.format(context=context)},
            {"role": "user", "content": question}]


def greedy_answer(llm: LLM, question: str, context: str, *, max_tokens: int = SHORT_ANSWER_MAX_TOKENS,
                  top_logprobs: int = GREEDY_TOP_LOGPROBS) -> Completion:
    """The short answer at temperature 0 (a `Completion`), with `top_logprobs` candidates per token:
    the answer whose token probabilities notebook 07 reads."""
    return llm.chat(short_answer_messages(question, context), max_tokens=max_tokens, temperature=0.0,
                    top_logprobs=top_logprobs)


def sample_answers(llm: LLM, question: str, context: str, *, n_samples: int = N_SAMPLES,
                   temperature: float = SAMPLE_TEMPERATURE, max_tokens: int = SHORT_ANSWER_MAX_TOKENS,
                   top_logprobs: int = GREEDY_TOP_LOGPROBS) -> tuple[Completion, list[Completion]]:
    """The greedy answer (temperature 0, with `top_logprobs` candidates per token) and `n_samples`
    answers drawn at `temperature` with seeds 0, 1, ..., so a rerun draws the same answers.

    Returns (greedy `Completion`, list of sampled `Completion`s). At temperature 0 every
    sample would be the greedy answer, so `temperature` must be above 0.
    """
    if temperature <= 0:
        raise ValueError(f"samples need a temperature above 0 (at 0 they all equal the greedy answer), got {temperature}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be at least 1, got {n_samples}")
    messages = short_answer_messages(question, context)
    greedy = greedy_answer(llm, question, context, max_tokens=max_tokens, top_logprobs=top_logprobs)
    samples = [llm.chat(messages, max_tokens=max_tokens, temperature=temperature, seed=seed)
               for seed in range(n_samples)]
    return greedy, samples


def auroc_difference(first: Sequence[float] | np.ndarray, second: Sequence[float] | np.ndarray,
                     correct: Sequence[bool] | np.ndarray, *, n: int = 2000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float, float]:
    """AUROC(first) - AUROC(second) on the same answers, with a paired percentile bootstrap interval.

    first, second: two confidences for the same n answers, shape (n,); correct: shape (n,).
    Each resample draws answers (rows) with replacement and scores *both* signals on that
    same resample, so what the two share (the same easy and hard questions) cancels out.
    Two separate intervals cannot show that: they may overlap while the difference is
    clearly away from 0. Resamples holding only right or only wrong answers are drawn again.
    Returns (difference, low, high).
    """
    a, b, y = np.asarray(first, dtype=float), np.asarray(second, dtype=float), np.asarray(correct, dtype=bool)
    if not len(a) == len(b) == len(y):
        raise ValueError(f"first, second and correct must have the same length, got {len(a)}, {len(b)}, {len(y)}")
    if y.all() or not y.any():
        raise ValueError("correct holds only one class; AUROC needs right and wrong answers")
    if n < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"need n >= 1 and 0 < level < 1, got n={n}, level={level}")
    rng = np.random.default_rng(seed)
    differences = np.empty(n)
    for k in range(n):
        rows = rng.integers(0, len(y), size=len(y))
        while y[rows].all() or not y[rows].any():
            rows = rng.integers(0, len(y), size=len(y))
        differences[k] = auroc(a[rows], y[rows]) - auroc(b[rows], y[rows])
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(differences, [tail, 100.0 - tail])
    return float(auroc(a, y) - auroc(b, y)), float(low), float(high)


def cascade_confidence(calibrated: Sequence[float] | np.ndarray, semantic: Sequence[float] | np.ndarray,
                       threshold: float) -> np.ndarray:
    """One confidence per answer from a cascade: the cheap signal first, the expensive one only when unsure.

    calibrated: the calibrated token confidence of each answer, P(right) in [0, 1], shape (n,).
    semantic: the semantic-entropy confidence, 1 - entropy / max entropy, in [0, 1], shape (n,);
    only the entries where calibrated < threshold are read, so the others may be NaN (never
    computed: those answers never paid for the samples).
    threshold: in (0, 1]; an answer with calibrated >= threshold keeps its calibrated value.

    An answer below the threshold gets threshold * (calibrated / threshold + semantic) / 2:
    the mean of its cheap and its expensive signal, each on [0, 1], scaled into [0, threshold).
    So every escalated answer still ranks below every answer the cheap signal trusted, and
    among the escalated ones the samples' agreement counts as much as the tokens'.
    Returns the combined confidence, shape (n,).
    """
    cheap = np.asarray(calibrated, dtype=float)
    expensive = np.asarray(semantic, dtype=float)
    if cheap.shape != expensive.shape or cheap.ndim != 1:
        raise ValueError(f"calibrated and semantic must be 1-D with the same length, got {cheap.shape} and {expensive.shape}")
    check_unit_interval(threshold, "threshold", include_zero=False)
    escalated = cheap < threshold
    if np.isnan(cheap).any() or ((cheap < 0) | (cheap > 1)).any():
        raise ValueError("calibrated confidences must lie in [0, 1]")
    needed = expensive[escalated]
    if np.isnan(needed).any() or ((needed < 0) | (needed > 1)).any():
        raise ValueError("semantic confidences of the answers below the threshold must lie in [0, 1]")
    combined = cheap.copy()
    combined[escalated] = threshold * (cheap[escalated] / threshold + needed) / 2.0
    return combined
