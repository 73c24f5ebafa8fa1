"""Asking the model how sure it is: verbalised confidence and P(True), next to token probability.

The workbook reads confidence from the model's token probabilities. The obvious alternative
is to ask. Three ways of asking, for an answer the model has already given:

- **a number**: the question and the model's answer ("Your answer: ...") are shown again, and
  the user asks `NUMBER_QUESTION` (`asking_messages`); the reply is constrained by `NUMBER_GRAMMAR` to a whole number from 0
  to 100, so every reply parses (`read_number`), and the confidence is the number / 100;
- **a category**: the same, with `CATEGORY_QUESTION` and a grammar allowing only the words
  of `CATEGORIES`; the words mean nothing by themselves, so `CategoryCalibrator` maps each
  to the share of right answers that said it on calibration data;
- **P(True)** (Kadavath et al., 2022): a fresh chat shows the same task, the question and the
  proposed answer, and asks `TRUE_QUESTION`; the confidence is P(Yes) read from the next
  token's probabilities and renormalised over Yes and No (`p_true`).

Every prompt keeps the task's own system message first and puts everything else in one last
user turn, so the backend's prompt cache reuses the system message and each way costs only its
own few dozen tokens. The saved runs behind notebook 09, which ask about every BANKING77
calibration decision, a stratified sample of test and the 60 handbook answers of notebooks 07 and
10, are `lib.saved_runs.asking`'s.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lib.checks import check_binary, require_fitted
from lib.grammar import gbnf_for_options
from lib.backends.protocol import LLM, Completion, Message, validate_messages
from lib.settings import DEFAULT_SERVER_TOP_LOGPROBS
from lib.logprobs import renormalize

__all__ = [
    "NUMBER_QUESTION",
    "NUMBER_GRAMMAR",
    "CATEGORIES",
    "CATEGORY_QUESTION",
    "CATEGORY_GRAMMAR",
    "TRUE_QUESTION",
    "YES_NO_TOKENS",
    "NUMBER_TOP_LOGPROBS",
    "asking_messages",
    "true_messages",
    "read_number",
    "read_category",
    "TrueProbability",
    "p_true",
    "CategoryCalibrator",
    "AskedConfidence",
    "ask_number",
    "ask_category",
    "ask_true",
    "ask_all",
    "paired_metrics",
]

NUMBER_QUESTION = "How sure are you that your answer is right? Reply with a number from 0 to 100."
NUMBER_GRAMMAR = 'root ::= "100" | [1-9] [0-9] | [0-9]'
"""Whole numbers from 0 to 100 without leading zeros: nothing else can be generated."""
CATEGORIES = ("certain", "likely", "unsure", "guessing")
"""The closed list of words a categorical reply may use, surest first."""
CATEGORY_QUESTION = ("How sure are you that your answer is right? Reply with one word: "
                     + ", ".join(CATEGORIES[:-1]) + f" or {CATEGORIES[-1]}.")
CATEGORY_GRAMMAR = gbnf_for_options(CATEGORIES)
TRUE_QUESTION = "Is the proposed answer correct? Answer Yes or No."
YES_NO_TOKENS = ("Yes", "No", "yes", "no")
"""The tokens P(True) reads: both spellings of each answer, summed by `lib.logprobs.renormalize`."""
NUMBER_TOP_LOGPROBS = 5
"""Candidates kept per token of a numeric reply (the saved runs keep them)."""

_NUMBER = re.compile(r"100|[1-9][0-9]|[0-9]")


# --------------------------------------------------------------------------- prompts


def asking_messages(messages: Sequence[Message], answer: str, question: str, *, shown_as: str = "Question",
                    answer_as: str = "Your answer") -> list[Message]:
    """The chat that asks about `answer`: the task's system message, then one user turn holding the
    question (the last user turn of `messages`, labelled `shown_as`), the answer (labelled
    `answer_as`) and `question`.

    Everything that changes from one answer to the next sits in the last turn. A backend keeps
    the turns before the last in its prompt cache, so the long system message (77 intents, or a
    handbook section) is read once and every way of asking costs only its own few dozen tokens;
    an answer kept as an assistant turn would put a new turn before the question every time, and
    the system message would be read again for each answer (on the embedded backend, about a
    minute each on two cores).
    """
    messages = validate_messages(messages)
    if not messages or messages[-1]["role"] != "user":
        raise ValueError("messages must end with the user's question (the turn the answer replies to)")
    shown = f"{shown_as}: {messages[-1]['content']}\n{answer_as}: {answer}\n\n{question}"
    return validate_messages([*messages[:-1], {"role": "user", "content": shown}])


def true_messages(messages: Sequence[Message], answer: str, *, shown_as: str = "Question") -> list[Message]:
    """P(True)'s chat: the question, the *proposed* answer and `TRUE_QUESTION` (`asking_messages`).

    The answer is shown as a proposal, not as the model's own: the model judges it, which is
    what Kadavath et al. (2022) ask.
    """
    return asking_messages(messages, answer, TRUE_QUESTION, shown_as=shown_as, answer_as="Proposed answer")


# --------------------------------------------------------------------------- readers


def read_number(reply: str) -> int:
    """The whole number from 0 to 100 a numeric reply gives.

    Only surrounding whitespace is forgiven. Under `NUMBER_GRAMMAR` every reply parses; a
    reply that does not ("95%", "ninety", "" from a server that ignored the grammar) raises
    ValueError naming it, since reading a number out of free text would be a guess.
    """
    text = reply.strip()
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"the reply {reply[:40]!r} is not a whole number from 0 to 100; it was generated "
                         "without NUMBER_GRAMMAR (lib/asking.py): use a backend that applies GBNF grammars "
                         "(the embedded model, llama_cpp.server)")
    return int(text)


def read_category(reply: str) -> str:
    """The word of `CATEGORIES` a categorical reply gives; ValueError, naming the reply, for anything else."""
    text = reply.strip()
    if text not in CATEGORIES:
        raise ValueError(f"the reply {reply[:40]!r} is none of {list(CATEGORIES)}; it was generated without "
                         "CATEGORY_GRAMMAR (lib/asking.py): use a backend that applies GBNF grammars")
    return text


@dataclass(frozen=True)
class TrueProbability:
    """P(True) for one proposed answer.

    probability: P(Yes) among Yes and No, in [0, 1]; NaN when neither was visible. off_label_mass:
    the probability the model put on any other first token. bounded: one of the two answers was
    missing from a server's candidates, so `probability` is the lowest value they allow (see
    `p_true`). scores: the log-probabilities read, by token.
    """

    probability: float
    off_label_mass: float
    bounded: bool
    scores: dict[str, float]


def p_true(scores: Mapping[str, float], lowest_candidate: float | None = None) -> TrueProbability:
    """P(Yes) renormalised over Yes and No, from the next token's log-probabilities.

    scores: log-probabilities of `YES_NO_TOKENS` (any subset; "Yes" and "yes" are one answer,
    summed). The pitfalls of reading decision probabilities are handled here:

    - the raw P(Yes) is a share of *every* token; renormalising over the two answers is the
      probability of Yes among them, and what went elsewhere is reported as `off_label_mass`;
    - a server reports only its top candidates. An answer missing from them has at most the
      probability of the lowest candidate (`lowest_candidate`, a log-probability). Renormalising
      without it would inflate the other to 1.0, so a missing No is counted at that bound and a
      missing Yes as 0: P(Yes) is then the lowest value the candidates allow, never an inflated
      one, and `bounded` says so. Without `lowest_candidate` a missing No gives NaN;
    - neither answer visible: NaN, never a guess.
    The embedded backend scores the whole vocabulary, so its P(True) is never bounded.
    """
    read = [(token.strip().lower(), float(logprob)) for token, logprob in scores.items()]
    probabilities, off = renormalize(read, ("yes", "no"))
    clean = {token: float(logprob) for token, logprob in scores.items()}
    if set(probabilities) == {"yes", "no"}:
        return TrueProbability(probabilities["yes"], off, False, clean)
    if set(probabilities) == {"no"}:
        return TrueProbability(0.0, off, True, clean)
    if set(probabilities) == {"yes"} and lowest_candidate is not None:
        bounded, _ = renormalize([*read, ("no", float(lowest_candidate))], ("yes", "no"))
        return TrueProbability(bounded["yes"], off, True, clean)
    return TrueProbability(math.nan, off, bool(probabilities), clean)


# --------------------------------------------------------------------------- the category map


class CategoryCalibrator:
    """Maps each verbal category to the share of right answers that gave it, fitted on calibration data.

    The words ("certain", "likely", ...) carry no number of their own; picking 0.9 for
    "certain" by hand would be a claim about the model, not a measurement. `fit` counts, per
    category, how many answers gave it and how many of those were right; `predict` returns
    that share. A category no calibration answer gave gets the overall share of right
    answers (`fallback_`): nothing is known about it beyond that.

    Fitted attributes: `probabilities_` (category -> probability), `counts_` (category ->
    (answers, right)), `fallback_`.
    """

    def __init__(self, categories: Sequence[str] = CATEGORIES) -> None:
        self.categories = tuple(categories)

    def _checked(self, values: Sequence[str] | np.ndarray) -> list[str]:
        values = [str(v) for v in values]
        unknown = sorted(set(values) - set(self.categories))
        if unknown:
            raise ValueError(f"categories {unknown} are none of {list(self.categories)}")
        return values

    def fit(self, categories: Sequence[str] | np.ndarray, correct: Sequence[bool] | np.ndarray) -> CategoryCalibrator:
        """Count answers and right answers per category; `categories` and `correct` have shape (n,)."""
        values = self._checked(categories)
        right = check_binary(correct)
        if len(values) != len(right):
            raise ValueError(f"categories and correct must have one length, got {len(values)} and {len(right)}")
        self.fallback_ = float(right.mean())
        self.counts_ = {c: (sum(v == c for v in values), int(sum(r for v, r in zip(values, right) if v == c)))
                        for c in self.categories}
        self.probabilities_ = {c: (k / n if n else self.fallback_) for c, (n, k) in self.counts_.items()}
        return self

    def predict(self, categories: Sequence[str] | np.ndarray) -> np.ndarray:
        """The fitted probability of each category, shape (n,)."""
        require_fitted(self, "probabilities_", "predict")
        return np.array([self.probabilities_[c] for c in self._checked(categories)], dtype=float)


# --------------------------------------------------------------------------- asking


@dataclass(frozen=True)
class AskedConfidence:
    """The three asked confidences for one answer, with the model seconds each took."""

    number: int
    number_seconds: float
    number_tokens: list[list[Any]]
    category: str
    category_seconds: float
    p_true: TrueProbability
    p_true_seconds: float

    def as_row(self) -> dict[str, Any]:
        """The fields a saved run keeps."""
        return {"number": self.number, "number_seconds": self.number_seconds, "number_tokens": self.number_tokens,
                "category": self.category, "category_seconds": self.category_seconds,
                "p_true": self.p_true.probability, "p_true_off_label": self.p_true.off_label_mass,
                "p_true_bounded": self.p_true.bounded, "p_true_scores": self.p_true.scores,
                "p_true_seconds": self.p_true_seconds}


def ask_number(llm: LLM, messages: Sequence[Message], answer: str, *, shown_as: str = "Question"
               ) -> tuple[int, Completion]:
    """The number from 0 to 100 the model gives its `answer`, and the `Completion` (greedy, under the grammar)."""
    reply = llm.chat(asking_messages(messages, answer, NUMBER_QUESTION, shown_as=shown_as), max_tokens=4,
                     grammar=NUMBER_GRAMMAR, top_logprobs=NUMBER_TOP_LOGPROBS)
    return read_number(reply.text), reply


def ask_category(llm: LLM, messages: Sequence[Message], answer: str, *, shown_as: str = "Question"
                 ) -> tuple[str, Completion]:
    """The word of `CATEGORIES` the model gives its `answer`, and the `Completion`."""
    reply = llm.chat(asking_messages(messages, answer, CATEGORY_QUESTION, shown_as=shown_as), max_tokens=6,
                     grammar=CATEGORY_GRAMMAR)
    return read_category(reply.text), reply


def ask_true(llm: LLM, messages: Sequence[Message], answer: str, *, shown_as: str = "Question"
             ) -> tuple[TrueProbability, float]:
    """P(True) of `answer` (one forward pass, no generation) and the seconds it took."""
    result = llm.next_token_logprobs(true_messages(messages, answer, shown_as=shown_as),
                                     top_k=DEFAULT_SERVER_TOP_LOGPROBS, score_tokens=YES_NO_TOKENS)
    lowest = min((lp for _, lp in result.top), default=None)
    return p_true(result.scores, lowest), result.seconds


def ask_all(llm: LLM, messages: Sequence[Message], answer: str, *, shown_as: str = "Question") -> AskedConfidence:
    """The three asked confidences of `answer` to the task `messages`, in the order the runs ask them."""
    number, number_reply = ask_number(llm, messages, answer, shown_as=shown_as)
    category, category_reply = ask_category(llm, messages, answer, shown_as=shown_as)
    truth, seconds = ask_true(llm, messages, answer, shown_as=shown_as)
    tokens = [[t.token, t.logprob, [[c, lp] for c, lp in t.top]] for t in number_reply.tokens]
    return AskedConfidence(number, number_reply.seconds, tokens, category, category_reply.seconds, truth, seconds)


# --------------------------------------------------------------------------- measuring


def paired_metrics(confidences: Mapping[str, np.ndarray], correct: Sequence[bool] | np.ndarray,
                   metrics: Mapping[str, Callable[[np.ndarray, np.ndarray], float]], reference: str, *,
                   n: int = 2000, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Every metric of every confidence, and its difference from `reference`, with intervals from the same resamples.

    confidences: name -> shape (n_answers,), all for the same answers; correct: shape (n_answers,).
    Each resample draws answers with replacement (again when it holds only right or only wrong
    answers) and scores every confidence on it, so a difference's interval is paired: what the
    confidences share (the same easy and hard answers) cancels out. Returns one row per
    (confidence, metric): value, low, high, difference (value minus the reference's), diff_low, diff_high.
    """
    y = np.asarray(correct, dtype=bool)
    arrays = {name: np.asarray(values, dtype=float) for name, values in confidences.items()}
    if reference not in arrays:
        raise ValueError(f"reference {reference!r} is none of the confidences {list(arrays)}")
    if any(len(a) != len(y) for a in arrays.values()):
        raise ValueError(f"every confidence needs {len(y)} values, one per answer; got "
                         f"{ {name: len(a) for name, a in arrays.items()} }")
    if y.all() or not y.any():
        raise ValueError("correct holds only one class; AUROC and AURC need right and wrong answers")
    names, scorers = list(arrays), list(metrics.values())
    rng = np.random.default_rng(seed)
    draws = np.empty((n, len(names), len(scorers)))  # resample, confidence, metric
    for b in range(n):
        rows = rng.integers(0, len(y), size=len(y))
        while y[rows].all() or not y[rows].any():
            rows = rng.integers(0, len(y), size=len(y))
        for i, name in enumerate(names):
            draws[b, i] = [scorer(arrays[name][rows], y[rows]) for scorer in scorers]
    tail = (1.0 - level) / 2.0
    ref = names.index(reference)
    out = []
    for j, (metric_name, scorer) in enumerate(metrics.items()):
        reference_value = float(scorer(arrays[reference], y))
        for i, name in enumerate(names):
            value = float(scorer(arrays[name], y))
            low, high = np.quantile(draws[:, i, j], [tail, 1 - tail])
            diff_low, diff_high = np.quantile(draws[:, i, j] - draws[:, ref, j], [tail, 1 - tail])
            out.append({"confidence": name, "metric": metric_name, "value": value, "low": float(low),
                        "high": float(high), "difference": value - reference_value, "diff_low": float(diff_low),
                        "diff_high": float(diff_high)})
    return pd.DataFrame(out)
