"""Token log-probabilities: from the numbers a model returns to confidences we can use.

A model's output at each step is a vector of logits, one per vocabulary token;
`log_softmax` turns it into log-probabilities and `top_k` lists the most likely tokens.
llama.cpp returns the same information as (token string, log-probability) pairs for the
top candidates at each step. From those:

- `renormalize` answers "of the labels we allow, how likely is each?" and "how much
  probability went to tokens that are no label at all?" (the off-label mass, a warning
  sign that the model wanted to say something else).
- `perplexity` and `sequence_confidence` summarise a whole generated answer in one number.

Everything works in log space until the end, so that tiny probabilities (logprob -80)
neither underflow to 0 nor lose precision.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import numpy as np

__all__ = [
    "log_softmax", "top_k", "renormalize", "perplexity", "sequence_confidence", "at_temperature",
]

_POSITIVE_TOLERANCE = 1e-6
"""Log-probabilities a hair above 0 are rounding error (returned as 0); larger ones are a mistake."""

_CONFIDENCE_METHODS: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda logprobs: float(np.exp(logprobs).mean()),
    "geometric": lambda logprobs: float(np.exp(logprobs.mean())),
    "min": lambda logprobs: float(np.exp(logprobs.min())),
}


def _checked_logprobs(values: Iterable[float], argument: str) -> np.ndarray:
    """`values` as a float64 array of log-probabilities, or ValueError naming `argument`.

    Rejects empty input, NaN and values above 0 (beyond rounding; passing logits instead
    of log-probabilities is the usual cause). -inf is allowed: probability 0.
    """
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError(f"{argument} is empty; need at least one log-probability")
    if np.isnan(array).any():
        raise ValueError(f"{argument} contains NaN")
    if (array > _POSITIVE_TOLERANCE).any():
        raise ValueError(
            f"{argument} contains positive values (largest {array.max():.4g}); log-probabilities "
            "are <= 0. Are these logits? Apply log_softmax first."
        )
    return np.minimum(array, 0.0)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities from logits along the last axis, computed without overflow.

    log_softmax(x) = x - log(sum(exp(x))). Computed literally, exp(1000) is inf, so we
    first subtract each row's maximum, which leaves the result unchanged (softmax does
    not change when the same number is added to every logit) and makes the largest
    exponent exp(0) = 1. Logits of -inf (masked tokens) get log-probability -inf.
    Returns float64 with the shape of `logits`; each row's exp() sums to 1.
    """
    values = np.asarray(logits, dtype=np.float64)
    if values.size == 0:
        raise ValueError("logits is empty")
    if np.isnan(values).any():
        raise ValueError("logits contains NaN")
    row_max = values.max(axis=-1, keepdims=True)
    if not np.isfinite(row_max).all():
        raise ValueError("logits needs a finite largest value in every row (no +inf, not all -inf)")
    shifted = values - row_max
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def top_k(
    logprobs: np.ndarray,
    token_strings: Sequence[str] | Callable[[int], str],
    k: int,
) -> list[tuple[str, float]]:
    """The `k` most likely tokens as (token string, log-probability), most likely first.

    logprobs: shape (vocab_size,), e.g. log_softmax of one step's logits.
    token_strings: the vocabulary as a list indexed by token id, or a function from token
    id to string (e.g. one that detokenizes with the model). Only the k chosen ids are
    looked up, so a slow function is fine. Ties keep token-id order. If k exceeds the
    vocabulary size, every token is returned.
    """
    values = _checked_logprobs(logprobs, "logprobs")
    if values.ndim != 1:
        raise ValueError(f"logprobs must be one-dimensional (one step), got shape {values.shape}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if callable(token_strings):
        token_string = token_strings
    elif len(token_strings) == len(values):
        token_string = token_strings.__getitem__
    else:
        raise ValueError(f"token_strings has {len(token_strings)} entries but logprobs has {len(values)}")
    best_first = np.argsort(-values, kind="stable")[:k]
    return [(token_string(int(token_id)), float(values[token_id])) for token_id in best_first]


def renormalize(
    candidates: list[tuple[str, float]],
    allowed: Iterable[str],
) -> tuple[dict[str, float], float]:
    """Probabilities over the allowed answers among one step's candidates, and the off-label mass.

    candidates: (token string, log-probability) pairs for one generation step, e.g. the
    top-k logprobs llama.cpp returns. allowed: the answers we accept at this step, e.g.
    the group letters "A".."H".

    The workbook's one rule for spellings: tokens are matched on `token.strip()`, so " A"
    and "A\\n" count as "A", and candidates that spell the same answer (" A" and "A", or an
    exact duplicate) have their probabilities summed. Tokenizers have a separate token for a
    letter with a leading space; a grammar that allows only "A" masks " A" before sampling,
    but the model's probability for " A" is still its belief in the answer A, only spelled
    differently, so it is read as A and not as off-label mass. Every reader in `lib` follows
    this rule (`lib.code_steps.read_code`, the deciders in `lib.decisions`, the yes/no probe
    in `lib.assistant`). In this workbook's recorded replies a leading-space letter carries at
    most about 0.001 at a group step (notebook 06 measures it), so the rule moves a
    renormalised probability by at most about that much.

    Returns (probabilities, off_label_mass):
    - probabilities: answer -> probability, only for allowed answers that appear among
      the candidates (with probability > 0), summing to 1, most likely first;
    - off_label_mass: 1 - (total probability of the allowed answers among the
      candidates), clipped to [0, 1]: probability the model gave to everything else.
    If no allowed answer appears, returns ({}, 1.0): the candidates say nothing about
    the allowed answers, and no numbers are invented for them.
    """
    allowed_answers = set(allowed)
    if not allowed_answers:
        raise ValueError("allowed is empty; give the answers to keep")
    unmatchable = sorted(answer for answer in allowed_answers if not answer or answer != answer.strip())
    if unmatchable:
        raise ValueError(
            f"allowed answers {unmatchable!r} are empty or have surrounding whitespace; tokens "
            "are matched on token.strip(), so these could never match"
        )
    if not candidates:
        return {}, 1.0
    tokens = [token for token, _ in candidates]
    logprobs = _checked_logprobs([logprob for _, logprob in candidates], "candidates")
    log_mass: dict[str, float] = {}
    for token, logprob in zip(tokens, logprobs):
        answer = token.strip()
        if answer in allowed_answers and logprob > -np.inf:
            log_mass[answer] = float(np.logaddexp(log_mass.get(answer, -np.inf), logprob))
    if not log_mass:
        return {}, 1.0
    total_log_mass = float(np.logaddexp.reduce(list(log_mass.values())))
    probabilities = {
        answer: float(np.exp(mass - total_log_mass))
        for answer, mass in sorted(log_mass.items(), key=lambda item: -item[1])
    }
    off_label_mass = float(np.clip(-np.expm1(total_log_mass), 0.0, 1.0))
    return probabilities, off_label_mass


def perplexity(token_logprobs: Sequence[float]) -> float:
    """exp(-mean log-probability) of a generated sequence's tokens: 1 when every token was certain.

    Read it as "the model was as unsure as if choosing uniformly among this many tokens
    at each step". It is 1 / sequence_confidence(token_logprobs, "geometric").
    """
    return float(np.exp(-_checked_logprobs(token_logprobs, "token_logprobs").mean()))


def sequence_confidence(
    token_logprobs: Sequence[float],
    method: Literal["mean", "geometric", "min"] = "geometric",
) -> float:
    """One confidence in [0, 1] for a generated sequence, from its tokens' log-probabilities.

    method:
    - "mean": the average token probability. Forgiving: one near-certain token can hide
      a doubtful one.
    - "geometric": exp(mean log-probability), the geometric mean of the token
      probabilities (1 / perplexity). Falls quickly when any token is unlikely.
    - "min": the least likely token's probability. The weakest step decides, which suits
      answers that are wrong if any one token is wrong (a code, a number).
    """
    if method not in _CONFIDENCE_METHODS:
        raise ValueError(f"method must be one of {sorted(_CONFIDENCE_METHODS)}, got {method!r}")
    return _CONFIDENCE_METHODS[method](_checked_logprobs(token_logprobs, "token_logprobs"))


def at_temperature(candidates: Sequence[tuple[str, float]], temperature: float) -> dict[str, float]:
    """The candidates' probabilities after temperature scaling, renormalised over the candidates.

    This is what a server reports as *post-sampling* probabilities (llama-server's
    `post_sampling_probs`): the distribution the sampler drew from, not the model's own.
    candidates: (token string, log-probability) pairs for one step, e.g. `TokenLogprob.top`.
    temperature: > 0 divides every log-probability by it before the softmax; 0 is greedy
    decoding, where the sampler's distribution is all on the most likely candidate (ties:
    the first listed), so a greedy reply's post-sampling probability is always 1.0 and
    says nothing about the model's doubt. Duplicate tokens are summed; result most likely first.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not candidates:
        raise ValueError("candidates is empty; need at least one (token, log-probability) pair")
    logprobs = _checked_logprobs([logprob for _, logprob in candidates], "candidates")
    tokens = [token for token, _ in candidates]
    if temperature == 0:
        scaled = np.full(len(tokens), -np.inf)
        scaled[int(np.argmax(logprobs))] = 0.0
    else:
        with np.errstate(invalid="ignore"):
            scaled = np.where(np.isfinite(logprobs), logprobs / temperature, -np.inf)
        if not np.isfinite(scaled).any():
            raise ValueError("every candidate has log-probability -inf")
        scaled = scaled - np.logaddexp.reduce(scaled[np.isfinite(scaled)])
    probabilities: dict[str, float] = {}
    for token, value in zip(tokens, np.exp(scaled)):
        probabilities[token] = probabilities.get(token, 0.0) + float(value)
    return dict(sorted(probabilities.items(), key=lambda item: -item[1]))
