"""Intent decisions with a confidence: the same question answered four ways.

Every decider maps one customer message to an `IntentDecision`: a label that is always one of the
task's labels (whatever the message says), a confidence in [0, 1], the probabilities
behind it, and the time it took. Notebooks 08, 09 and 11-17 compare these on saved results
(`lib.saved_runs.decisions`).

- `FullListDecider`: the model sees every intent, as a code such as "C-F" with a one-line
  description, in a system prompt that stays in the KV cache. It answers in two steps,
  group letter then intent letter; confidence = P(group) x P(intent | group), each step
  renormalised over the letters allowed there (`lib.logprobs.renormalize`).
- `ShortlistDecider` ("retrieve, then choose"): MiniLM nearest neighbours over the
  training pool (`lib.indexes.IntentRetriever`) propose k distinct intents, the model
  picks a letter. Small models favour some letters whatever the options say (position
  bias), so the decider can average over several orderings of the options and divide out
  the model's prior over letters measured on a content-free message (contextual
  calibration, Zhao et al., 2021). Every ordering's probabilities are kept, so each
  correction can be judged on its own.
- `NearestNeighbourDecider` and `LogRegDecider`: baselines without an LLM, on the same
  MiniLM embeddings of the same training pool.

On the embedded backend the full-list decision reads exact probabilities from the whole
vocabulary and evaluates the message once: the group step, then one decoding step per
token of the code. The model spells "C-F" as two tokens, "C" then "-F"; it can also spell
it in three, "C", "-", "F". The second spelling is read too ("the retry": one more step
with the dash in place), and the intent probability adds both spellings, so no
probability is lost to the way a code happens to be tokenised. On a server backend the
decision is a grammar-constrained generation whose top candidates are renormalised per
step; there a letter missing from the candidates gets probability 0. A server that gives no
usable probabilities (no logprobs, a reply that ignored the grammar, a shortlist answer
without any option letter among its candidates) raises
`lib.backends.openai_compatible.ServerError` naming it: no confidence is ever made up.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, Sequence

import numpy as np
import pandas as pd

from lib.datasets import OUT_OF_SCOPE, LabelGroups
from lib.embeddings import embed as minilm_embed
from lib.grammar import assign_codes, gbnf_for_codes, letters
from lib.hashing import fingerprint
from lib.indexes import Embed, IntentRetriever, pool_embeddings
from lib.backends.embedded import EmbeddedLLM
from lib.backends.protocol import LLM, CapabilityError, Layered, Message, validate_messages
from lib.logprobs import renormalize
from lib.backends.openai_compatible import ServerError

__all__ = [
    "DEFAULT_TOP_LOGPROBS", "MAX_MESSAGE_CHARS", "CONTENT_FREE_MESSAGE", "NONE_OF_THESE", "significant",
    "DecisionStep", "IntentDecision", "Decider", "embedded_backend", "runs_in_process", "full_list_prompt",
    "FullListDecider", "NearestNeighbourDecider", "LogRegDecider", "Debias", "cyclic_orders",
    "contextual_calibration", "shortlist_probabilities", "SHORTLIST_INSTRUCTION", "SHORTLIST_NAMES_INSTRUCTION",
    "NONE_INSTRUCTION", "ShortlistDecider",
]

DEFAULT_TOP_LOGPROBS = 20
"""Top candidates asked of a server per step (its usual maximum)."""
MAX_MESSAGE_CHARS = 2000
"""A decision reads at most this many characters of a customer message (after stripping it): a
longer one is decided on its start, and the decision says how much it did not read
(`IntentDecision.unread_chars`). A prompt that still does not fit the embedded model's context
raises ValueError (set WORKBOOK_N_CTX); nothing is cut without saying so."""
CONTENT_FREE_MESSAGE = "N/A"
"""The content-free message whose answer measures the model's prior over letters."""
NONE_OF_THESE = "None of these intents fits the message."


def significant(value: float, digits: int = 6) -> float:
    """`value` rounded to `digits` significant digits: compact in JSON, and never 0 for a tiny probability."""
    return float(f"{value:.{digits}g}")


@dataclass(frozen=True)
class DecisionStep:
    """One choice the model made: the options offered, their renormalised probabilities, the off-label mass."""

    name: str
    options: tuple[str, ...]
    probs: tuple[float, ...]
    off_label_mass: float


@dataclass(frozen=True)
class IntentDecision:
    """One message's decision.

    label: always one of the task's labels. code: what the model answered ("C-F", a letter,
    or "" for the baselines). confidence: in [0, 1]. steps: each step's options and
    probabilities. off_label_mass: the probability that went to tokens that are no allowed
    answer, over all steps (1 - product of each step's kept mass). candidates: the labels
    offered; candidate_probs: their probabilities (or, for nearest neighbours, their
    similarities). details: method-specific numbers (see each decider).
    """

    label: str
    code: str
    confidence: float
    steps: tuple[DecisionStep, ...]
    off_label_mass: float
    candidates: tuple[str, ...]
    candidate_probs: tuple[float, ...]
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def unread_chars(self) -> int:
        """How many characters at the end of the message the decision never read (0: it read all of
        it): a message longer than `MAX_MESSAGE_CHARS` is decided on its start. Saved in `details`
        only when above 0."""
        return int(self.details.get("unread_chars", 0))


class Decider(Protocol):
    """What `lib.saved_runs.decisions.run_split` needs: a name, a fingerprint of the prompt and settings, and `decide`."""

    method: str
    fingerprint: str
    thread_safe: bool

    def decide(self, text: str) -> IntentDecision: ...


def embedded_backend(llm: LLM) -> EmbeddedLLM | None:
    """The in-process model behind `llm` when we may drive it directly (live mode), else None."""
    if isinstance(llm, EmbeddedLLM):
        return llm
    if isinstance(llm, Layered) and llm.backend_name == "embedded":
        backend = llm.live_backend()
        return backend if isinstance(backend, EmbeddedLLM) else None
    return None


def runs_in_process(llm: LLM) -> bool:
    """Whether `llm` is the embedded model, which serves one request at a time."""
    return getattr(llm, "backend_name", None) == "embedded"


def _who_answered(llm: LLM) -> str:
    """Who answered `llm`'s requests, for an error message: "the server at URL" when `llm` is a server
    client, the recording layer over one (its `config`), or a wrapper holding either as `llm` (such as
    `lib.saved_runs.items.CallTimer`); else "the model IDENTITY"."""
    while True:
        url = getattr(llm, "base_url", None) or getattr(getattr(llm, "config", None), "base_url", None)
        if url:
            return f"the server at {url}"
        if getattr(llm, "llm", None) is None:
            return f"the model {getattr(llm, 'identity', type(llm).__name__)}"
        llm = llm.llm


def _clean_message(text: str) -> str:
    """The customer message as the prompt will hold it: a string, stripped, at most MAX_MESSAGE_CHARS."""
    if not isinstance(text, str):
        raise TypeError(f"the message must be a string, got {type(text).__name__}")
    return text.strip()[:MAX_MESSAGE_CHARS]


def _unread_note(text: str) -> dict[str, int]:
    """{"unread_chars": n} for a message whose last n characters `_clean_message` cut, else {}."""
    unread = len(text.strip()) - MAX_MESSAGE_CHARS
    return {"unread_chars": unread} if unread > 0 else {}


def _off_label_total(steps: Sequence[DecisionStep]) -> float:
    kept = np.prod([1.0 - s.off_label_mass for s in steps]) if steps else 1.0
    return float(np.clip(1.0 - kept, 0.0, 1.0))


def _aligned(probs: dict[str, float], options: Sequence[str]) -> np.ndarray:
    return np.array([probs.get(option, 0.0) for option in options], dtype=np.float64)


# --------------------------------------------------------------------------- full list


def full_list_prompt(label_groups: LabelGroups) -> tuple[str, dict[str, str]]:
    """The cached system prompt listing every group and intent with its code, and code -> label."""
    codes = assign_codes(label_groups.groups)
    lines = ["You route customer messages to the right intent. Every intent has a code: the letter "
             "of its group, a dash, and the letter of the intent within the group.", ""]
    for group_letter, (group, labels) in zip(letters(len(label_groups.groups)), label_groups.groups.items()):
        lines.append(f"Group {group_letter} ({group.replace('_', ' ')}): {label_groups.group_descriptions[group]}")
        for intent_letter, label in zip(letters(len(labels)), labels):
            lines.append(f"{group_letter}-{intent_letter}: {label_groups.descriptions[label]}")
        lines.append("")
    lines.append("Reply with the code of the intent that fits the customer's message best, and nothing else.")
    return "\n".join(lines), codes


class FullListDecider:
    """Two steps over all intents: group letter, then intent letter (see the module docstring).

    details: p_group and p_intent (the two factors of the confidence) and, on the exact
    path, three_token_share: the part of the intent step's mass that came from spelling
    the code in three tokens.
    """

    method = "full"

    def __init__(self, llm: LLM, label_groups: LabelGroups, *, exact: bool | None = None,
                 top_logprobs: int = DEFAULT_TOP_LOGPROBS) -> None:
        self.llm = llm
        self.system_prompt, self.codes = full_list_prompt(label_groups)
        self.group_letters = letters(len(label_groups.groups))
        self.intent_letters = {g: letters(len(labels)) for g, labels in zip(self.group_letters,
                                                                          label_groups.groups.values())}
        self.grammar = gbnf_for_codes(self.codes)
        self.top_logprobs = top_logprobs
        self._backend = embedded_backend(llm) if exact in (None, True) else None
        if exact and self._backend is None:
            raise CapabilityError("exact full-list decisions need the embedded backend in live mode")
        self.thread_safe = not runs_in_process(llm)
        self.fingerprint = fingerprint({"method": self.method, "system": self.system_prompt,
                                        "exact": self._backend is not None})

    def messages(self, text: str) -> list[Message]:
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": _clean_message(text)}]

    def decide(self, text: str) -> IntentDecision:
        start = time.perf_counter()
        messages = self.messages(text)
        if self._backend is not None:
            group_step, intent_step, code, details = self._exact(messages)
        else:
            group_step, intent_step, code, details = self._generated(messages)
        group, intent = code.split("-")
        p_group = group_step.probs[group_step.options.index(group)]
        p_intent = intent_step.probs[intent_step.options.index(intent)]
        steps = (group_step, intent_step)
        return IntentDecision(
            label=self.codes[code], code=code, confidence=significant(p_group * p_intent), steps=steps,
            off_label_mass=significant(_off_label_total(steps)),
            candidates=tuple(self.codes[f"{group}-{letter}"] for letter in intent_step.options),
            candidate_probs=tuple(significant(p_group * p) for p in intent_step.probs),
            seconds=time.perf_counter() - start,
            details={"p_group": significant(p_group), "p_intent": significant(p_intent), **details,
                     **_unread_note(text)})

    @staticmethod
    def _step(name: str, probs: dict[str, float], off: float, options: Sequence[str]) -> DecisionStep:
        """A step over `options`; those missing from the candidates get probability 0."""
        return DecisionStep(name, tuple(options), tuple(significant(p) for p in _aligned(probs, options)),
                    significant(off))

    def _exact(self, messages: list[Message]) -> tuple[DecisionStep, DecisionStep, str, dict[str, Any]]:
        backend = self._backend
        steps = backend.continuation(messages, reserve=4)
        group_candidates = _letter_candidates(backend, steps.first, self.group_letters)
        group_probs, group_off = renormalize(group_candidates, self.group_letters)
        group = max(self.group_letters, key=lambda letter: group_probs.get(letter, 0.0))
        intents = self.intent_letters[group]
        group_id = backend.single_token_id(group)
        dash_id = backend.single_token_id("-")
        after_group = steps.after([group_id])
        after_dash = steps.after([group_id, dash_id])  # the retry: the code spelled "C", "-", "F"
        two_token = np.array([after_group[backend.single_token_id(f"-{letter}")] for letter in intents])
        three_token = after_group[dash_id] + np.array([after_dash[backend.single_token_id(letter)]
                                                       for letter in intents])
        combined = np.logaddexp(two_token, three_token)
        intent_probs, intent_off = renormalize(list(zip(intents, combined.tolist())), intents)
        intent = max(intents, key=lambda letter: intent_probs.get(letter, 0.0))
        share = float(np.exp(np.logaddexp.reduce(three_token) - np.logaddexp.reduce(combined)))
        return (self._step("group", group_probs, group_off, self.group_letters),
                self._step("intent", intent_probs, intent_off, intents), f"{group}-{intent}",
                {"three_token_share": significant(share)})

    def _generated(self, messages: list[Message]) -> tuple[DecisionStep, DecisionStep, str, dict[str, Any]]:
        """Grammar-constrained generation; each step's top candidates renormalised over its letters.

        A reply that is not a code (a server that ignored the grammar) or whose tokens are not the
        group letter then the intent letter raises ServerError, and so does a reply without logprobs
        (`OpenAICompatibleLLM.chat` refuses it): there are no probabilities to read. A step whose candidates hold no allowed letter is a real answer: the
        model put its probability elsewhere (off-label mass 1 for that step).
        """
        completion = self.llm.chat(messages, max_tokens=3, grammar=self.grammar, top_logprobs=self.top_logprobs)
        code = completion.text.strip()
        if code not in self.codes:
            raise ServerError(f"{_who_answered(self.llm)} replied {completion.text[:80]!r}, which is none of the "
                              f"{len(self.codes)} codes its grammar allows: it ignored the grammar. Use a server that "
                              "applies GBNF grammars (llama_cpp.server) or the embedded backend")
        tokens = completion.tokens
        spelled = [token.token for token in tokens]
        three_tokens = spelled[1:2] == ["-"]
        if [token.strip() for token in spelled[:1]] != [code[0]] or len(spelled) < (3 if three_tokens else 2):
            raise ServerError(f"{_who_answered(self.llm)} returned the tokens {spelled} for the code {code!r}, not "
                              "the group letter then the intent letter (\"C\", \"-F\" or \"C\", \"-\", \"F\") that a "
                              "full-list decision reads. Serve the workbook's model (Qwen2.5-Coder-1.5B-Instruct) with "
                              "llama_cpp.server, or use the embedded backend")
        group_probs, group_off = renormalize(list(tokens[0].top), self.group_letters)
        intents = self.intent_letters[code[0]]
        if three_tokens:  # the intent letter is the third token
            intent_probs, intent_off = renormalize(list(tokens[2].top), intents)
        else:
            dashed, intent_off = renormalize(list(tokens[1].top), [f"-{letter}" for letter in intents])
            intent_probs = {key[1:]: p for key, p in dashed.items()}
        return (self._step("group", group_probs, group_off, self.group_letters),
                self._step("intent", intent_probs, intent_off, intents), code,
                {"three_token_share": 1.0 if three_tokens else 0.0})


def _letter_candidates(backend: EmbeddedLLM, logprobs: np.ndarray, answers: Sequence[str]) -> list[tuple[str, float]]:
    """(token, log-probability) for each answer and its space-prefixed spelling, from the full vocabulary.

    `renormalize` sums the two spellings into the answer: the library's one rule for spellings.
    """
    candidates = []
    for answer in answers:
        for spelling in (answer, f" {answer}"):
            candidates.append((spelling, float(logprobs[backend.single_token_id(spelling)])))
    return candidates


# --------------------------------------------------------------------------- baselines without an LLM


class NearestNeighbourDecider:
    """Top-1 nearest neighbour's intent; confidence = its similarity minus the next intent's.

    details: similarity (the best cosine) and margin (best minus second-best distinct intent).
    """

    method = "knn"
    thread_safe = True

    def __init__(self, retriever: IntentRetriever, k: int = 8) -> None:
        self.retriever = retriever
        self.k = k
        self.fingerprint = fingerprint({"method": self.method, "pool": retriever.pool_fingerprint, "k": k})

    def decide(self, text: str) -> IntentDecision:
        return self.decide_many([text])[0]

    def decide_many(self, texts: Sequence[str]) -> list[IntentDecision]:
        """Decisions for many messages, embedded in one batch (seconds: the batch's time per message)."""
        start = time.perf_counter()
        vectors = self.retriever.embed([_clean_message(text) for text in texts])
        decisions = [self._decision(vector) for vector in vectors]
        seconds = (time.perf_counter() - start) / max(len(texts), 1)
        return [replace(decision, seconds=seconds, details={**decision.details, **_unread_note(text)})
                for decision, text in zip(decisions, texts)]

    def _decision(self, vector: np.ndarray) -> IntentDecision:
        nearest = self.retriever.nearest_to_vector(vector, self.k)
        similarity = nearest[0][1]
        margin = similarity - nearest[1][1] if len(nearest) > 1 else similarity
        return IntentDecision(label=nearest[0][0], code="", confidence=significant(float(np.clip(margin, 0, 1))),
                        steps=(), off_label_mass=0.0, candidates=tuple(label for label, _ in nearest),
                        candidate_probs=tuple(significant(s) for _, s in nearest), seconds=0.0,
                        details={"similarity": significant(similarity), "margin": significant(margin)})


class LogRegDecider:
    """Logistic regression on MiniLM embeddings of the pool; confidence = the top class probability."""

    method = "embed-logreg"
    thread_safe = True

    def __init__(self, pool: pd.DataFrame, *, c: float = 10.0, top: int = 8, embed: Embed | None = None) -> None:
        from sklearn.linear_model import LogisticRegression

        self._embed = embed or minilm_embed
        self.top = top
        self.model = LogisticRegression(C=c, max_iter=2000).fit(pool_embeddings(pool["text"].tolist(), embed),
                                                                pool["label"].tolist())
        self.fingerprint = fingerprint({"method": self.method, "C": c,
                                        "pool": [pool["text"].tolist(), pool["label"].tolist()]})

    def decide(self, text: str) -> IntentDecision:
        return self.decide_many([text])[0]

    def decide_many(self, texts: Sequence[str]) -> list[IntentDecision]:
        """Decisions for many messages, embedded in one batch (seconds: the batch's time per message)."""
        start = time.perf_counter()
        all_probs = self.model.predict_proba(self._embed([_clean_message(text) for text in texts]))
        decisions = []
        for probs, text in zip(all_probs, texts):
            order = np.argsort(-probs, kind="stable")[: self.top]
            labels = tuple(str(self.model.classes_[i]) for i in order)
            decisions.append(IntentDecision(label=labels[0], code="", confidence=significant(float(probs[order[0]])),
                                      steps=(), off_label_mass=0.0, candidates=labels,
                                      candidate_probs=tuple(significant(float(probs[i])) for i in order),
                                      seconds=0.0, details=_unread_note(text)))
        seconds = (time.perf_counter() - start) / max(len(texts), 1)
        return [replace(decision, seconds=seconds) for decision in decisions]


# --------------------------------------------------------------------------- shortlist


Debias = Literal["none", "permute", "calibrate"]


def cyclic_orders(n: int, n_orders: int) -> list[list[int]]:
    """`n_orders` rotations of range(n), evenly spaced, so each option visits positions far apart."""
    if not 1 <= n_orders <= max(n, 1):
        raise ValueError(f"n_orders must be between 1 and {n}, got {n_orders}")
    return [[(i + shift) % n for i in range(n)] for shift in (o * n // n_orders for o in range(n_orders))]


def contextual_calibration(probs: np.ndarray, prior: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Divide out the model's prior over options (Zhao et al., 2021) and renormalise.

    probs and prior: shape (..., n_options), rows summing to 1. The prior is what the model
    answers for a content-free message with the same options; a letter it favours for no
    reason is scaled down by exactly that favour.

    keep: an optional boolean mask of options to leave as the model gave them. An abstain
    option ("none of these") needs it: a content-free message *should* choose that option,
    so dividing by its prior would remove the very signal it carries. Only the other options
    are divided by their prior, and they share the probability the kept ones leave.
    """
    probs = np.asarray(probs, dtype=np.float64)
    scaled = probs / np.clip(np.asarray(prior, dtype=np.float64), 1e-12, None)
    if keep is None:
        return scaled / scaled.sum(axis=-1, keepdims=True)
    keep = np.asarray(keep, dtype=bool)
    if keep.shape != probs.shape[-1:]:
        raise ValueError(f"keep must be a mask over the {probs.shape[-1]} options, got shape {keep.shape}")
    corrected = scaled[..., ~keep]
    share = probs[..., ~keep].sum(axis=-1, keepdims=True)
    out = probs.copy()
    out[..., ~keep] = corrected / corrected.sum(axis=-1, keepdims=True) * share
    return out


def shortlist_probabilities(orders: np.ndarray, content_free: np.ndarray | None = None,
                            debias: Debias = "calibrate", keep: np.ndarray | None = None) -> np.ndarray:
    """Option probabilities after a debiasing choice, from per-ordering probabilities.

    orders: shape (n_orders, n_options), probabilities, each row aligned to the same candidate
    list (not to letters). "none": the first ordering only; "permute": the mean over
    orderings; "calibrate": contextual calibration per ordering (leaving the options in
    `keep` uncorrected, see `contextual_calibration`), then the mean.
    """
    orders = np.asarray(orders, dtype=np.float64)
    if debias == "none":
        return orders[0]
    if debias == "permute":
        return orders.mean(axis=0)
    if debias == "calibrate":
        if content_free is None:
            raise ValueError("debias='calibrate' needs the content-free probabilities")
        return contextual_calibration(orders, content_free, keep).mean(axis=0)
    raise ValueError(f"debias must be 'none', 'permute' or 'calibrate', got {debias!r}")


SHORTLIST_INSTRUCTION = (
    "You route customer messages to the right intent. Each request lists a few candidate intents, "
    "each with a letter and a one-line description, followed by the customer's message. Reply with "
    "the letter of the intent that fits the message best, and nothing else.")
SHORTLIST_NAMES_INSTRUCTION = (
    "You route customer messages to the right intent. Each request lists a few candidate intents, "
    "each with its name and a one-line description, followed by the customer's message. Reply with "
    "the name of the intent that fits the message best, and nothing else.")
NONE_INSTRUCTION = " If no candidate fits, choose the option that says so."


class ShortlistDecider:
    """Retrieve k candidate intents, then let the model choose one (see the module docstring).

    The instruction and `n_examples` worked examples (built from the pool, answers at
    different letters) form the cached prefix; each request evaluates only the options and
    the message. Options are shuffled per message with a seed derived from the message (the
    retrieval order would otherwise tell the model which is nearest), then rotated
    `n_orders` times. With `calibrate`, each ordering is also asked with the content-free
    message "N/A". The decision uses `debias`.

    details: orders (the candidate indices shown as A, B, ... in each ordering), order_probs
    (per ordering, probabilities aligned with candidates), content_free (the same for "N/A"),
    letters_chosen (the argmax letter of each ordering), similarities (retrieval cosines).
    With answer="names" the options are intent names scored as token sequences (embedded only;
    on other backends such a decider still writes the prompt, `messages`, but cannot decide).
    """

    method = "shortlist"

    def __init__(self, llm: LLM, retriever: IntentRetriever, label_groups: LabelGroups, *, k: int = 8,
                 none_option: bool = False, n_orders: int = 2, calibrate: bool = True,
                 debias: Debias = "calibrate", answer: Literal["letters", "names"] = "letters",
                 n_examples: int = 2, top_logprobs: int = DEFAULT_TOP_LOGPROBS, seed: int = 0) -> None:
        if debias == "calibrate" and not calibrate:
            raise ValueError("debias='calibrate' needs calibrate=True")
        self.llm = llm
        self.retriever = retriever
        self.descriptions = dict(label_groups.descriptions)
        self.k = k
        self.none_option = none_option
        self.n_orders = n_orders
        self.calibrate = calibrate
        self.debias = debias
        self.answer = answer
        self.top_logprobs = top_logprobs
        self._backend = embedded_backend(llm)
        self.thread_safe = not runs_in_process(llm)
        instruction = SHORTLIST_INSTRUCTION if answer == "letters" else SHORTLIST_NAMES_INSTRUCTION
        self.system_prompt = instruction + (NONE_INSTRUCTION if none_option else "")
        self.examples = self._examples(n_examples, seed)
        self.fingerprint = fingerprint({"method": self.method, "system": self.system_prompt,
                                        "examples": self.examples, "k": k, "none": none_option,
                                        "orders": n_orders, "calibrate": calibrate, "debias": debias,
                                        "answer": answer, "pool": retriever.pool_fingerprint})

    # -- prompt

    def _options_text(self, shown: Sequence[str], text: str) -> str:
        lines = ["Candidate intents:"]
        for letter, label in zip(letters(len(shown)), shown):
            description = NONE_OF_THESE if label == OUT_OF_SCOPE else self.descriptions[label]
            if self.answer == "letters":
                lines.append(f"{letter}. {description}")
            else:
                lines.append(f"- {'none_of_these' if label == OUT_OF_SCOPE else label}: {description}")
        lines += ["", f"Customer message: {text}"]
        return "\n".join(lines)

    def _reply(self, shown: Sequence[str], label: str) -> str:
        if self.answer == "letters":
            return letters(len(shown))[list(shown).index(label)]
        return "none_of_these" if label == OUT_OF_SCOPE else label

    def _examples(self, n_examples: int, seed: int) -> list[Message]:
        """Worked examples from the pool: each a pool message, its retrieved options (itself excluded), the answer.

        The answers sit at different letters; with a "none" option, the last example's right
        intent is removed from its options, so its answer is "none of these".
        """
        rng = np.random.default_rng(seed)
        turns: list[Message] = []
        positions = [1, self.k - 3, self.k // 2][:n_examples]
        picks = rng.choice(len(self.retriever.texts), size=n_examples, replace=False)
        for number, (pick, position) in enumerate(zip(picks, positions)):
            text, label = self.retriever.texts[pick], str(self.retriever.labels[pick])
            neighbours = [lab for lab, _ in self.retriever.nearest_intents(text, self.k + 1)]
            others = [lab for lab in neighbours if lab != label][: self.k - 1]
            wants_none = self.none_option and number == n_examples - 1
            if wants_none:
                others = [lab for lab in neighbours if lab != label][: self.k]
                shown = others + [OUT_OF_SCOPE]
                answer_label = OUT_OF_SCOPE
            else:
                shown = others[:position] + [label] + others[position:]
                shown += [OUT_OF_SCOPE] if self.none_option else []
                answer_label = label
            turns += [{"role": "user", "content": self._options_text(shown, text)},
                      {"role": "assistant", "content": self._reply(shown, answer_label)}]
        return turns

    def messages(self, shown: Sequence[str], text: str) -> list[Message]:
        return validate_messages([{"role": "system", "content": self.system_prompt}, *self.examples,
                                  {"role": "user", "content": self._options_text(shown, text)}])

    # -- scoring

    def _option_probs(self, asked: Sequence[tuple[Sequence[str], str]]) -> list[tuple[np.ndarray, float]]:
        """For each (shown options, message) in `asked`: the renormalised probabilities of the
        options (in shown order) and the off-label mass.

        On the embedded model the requests go in one `next_token_distributions` call, so tokens
        they share after the cached prefix are evaluated once: each ordering's options for the
        message and the content-free message, and the orderings' first tokens.
        """
        requests = [self.messages(shown, text) for shown, text in asked]
        if self.answer == "names":
            if self._backend is None:  # the prompt (`messages`) works anywhere; scoring names does not
                raise CapabilityError("answers as intent names are scored as sequences, which needs the embedded "
                                      "backend in live mode; use answer='letters'")
            return [self._name_probs(shown, messages) for (shown, _), messages in zip(asked, requests)]
        if self._backend is not None:
            distributions = self._backend.next_token_distributions(requests, reserve=32)
            candidate_lists = [_letter_candidates(self._backend, logprobs, letters(len(shown)))
                               for logprobs, (shown, _) in zip(distributions, asked)]
        else:
            candidate_lists = [list(self.llm.next_token_logprobs(messages, top_k=self.top_logprobs).top)
                               for messages in requests]
        results = []
        for candidates, (shown, _) in zip(candidate_lists, asked):
            allowed = letters(len(shown))
            probs, off = renormalize(candidates, allowed)
            if not probs:  # no letter to renormalise over: any probabilities would be made up
                seen = ", ".join(repr(token) for token, _ in candidates[:5])
                raise ServerError(f"{_who_answered(self.llm)} gave no option letter ({', '.join(allowed)}) any of "
                                  f"its top {len(candidates)} candidates for the answer ({seen}, ...): it ignored the "
                                  "instruction, or the model wanted to write something else. Use a server that "
                                  "reports logprobs of the workbook's model (llama_cpp.server) or the embedded backend")
            results.append((_aligned(probs, allowed), off))
        return results

    def _name_probs(self, shown: Sequence[str], messages: list[Message]) -> tuple[np.ndarray, float]:
        backend = self._backend
        steps = backend.continuation(messages, reserve=32)
        end = backend.token_ids("<|im_end|>", special=True)[-1]  # the reply ends after the name
        logprobs = []
        for label in shown:
            ids = backend.token_ids(self._reply(shown, label)) + [end]
            total = sum(float(steps.after(ids[:i])[token]) for i, token in enumerate(ids))
            logprobs.append(total)
        logprobs = np.array(logprobs)
        off = float(np.clip(-np.expm1(np.logaddexp.reduce(logprobs)), 0.0, 1.0))
        return np.exp(logprobs - np.logaddexp.reduce(logprobs)), off

    def decide(self, text: str) -> IntentDecision:
        start = time.perf_counter()
        message = _clean_message(text)
        nearest = self.retriever.nearest_intents(message, self.k)
        candidates = [label for label, _ in nearest] + ([OUT_OF_SCOPE] if self.none_option else [])
        n_intents = len(nearest)
        shuffle = np.random.default_rng(int(fingerprint(message), 16)).permutation(n_intents)
        orders = [[int(shuffle[i]) for i in rotation] + ([n_intents] if self.none_option else [])
                  for rotation in cyclic_orders(n_intents, self.n_orders)]
        texts = [message, CONTENT_FREE_MESSAGE] if self.calibrate else [message]
        scored = self._option_probs([([candidates[i] for i in order], asked) for order in orders for asked in texts])
        order_probs, content_free, offs, chosen = [], [], [], []
        for number, order in enumerate(orders):
            (probs, off), *free = scored[number * len(texts):(number + 1) * len(texts)]
            order_probs.append(_unshuffle(probs, order))
            offs.append(off)
            chosen.append(letters(len(order))[int(np.argmax(probs))])
            content_free += [_unshuffle(free_probs, order) for free_probs, _ in free]
        final = shortlist_probabilities(np.array(order_probs), np.array(content_free) if content_free else None,
                                        self.debias)
        best = int(np.argmax(final))
        step = DecisionStep("option", tuple(candidates), tuple(significant(p) for p in final),
                    significant(float(np.mean(offs))))
        return IntentDecision(
            label=candidates[best], code=letters(len(candidates))[orders[0].index(best)],
            confidence=significant(float(final[best])), steps=(step,), off_label_mass=step.off_label_mass,
            candidates=tuple(candidates), candidate_probs=step.probs, seconds=time.perf_counter() - start,
            details={"orders": orders,
                     "order_probs": [[significant(p) for p in row] for row in order_probs],
                     "content_free": [[significant(p) for p in row] for row in content_free],
                     "letters_chosen": chosen,
                     "similarities": [significant(s) for _, s in nearest], **_unread_note(text)})


def _unshuffle(probs: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """Probabilities in shown order -> aligned with the candidate list (order[i] = candidate shown at i)."""
    aligned = np.zeros(len(order))
    aligned[list(order)] = probs
    return aligned
