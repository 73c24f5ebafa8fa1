"""One API for the language model, whichever backend runs it.

Two backends implement the same methods:

* `EmbeddedLLM` (default): llama-cpp-python in this process, no server, no key, no GPU.
* `OpenAICompatibleLLM`: any server that speaks OpenAI's chat API (llama.cpp's llama-server,
  llama-cpp-python's server, Ollama's /v1, vLLM, OpenAI itself).

Notebooks never build a backend themselves: they call `lib.get_llm(...)`, which picks the
backend from environment variables and wraps it in the record/replay layer
(`lib.recording`). A backend that cannot do something raises `CapabilityError` saying what
to use instead; it never makes numbers up.

Probabilities reported per generated token are those of the model *before* any grammar
mask and at temperature 1, which is what llama-server and llama-cpp-python's server report
too. Lesson 06 shows why that matters.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import platform
import re
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol, Sequence
from urllib.parse import urlparse

import numpy as np

from lib.logprobs import log_softmax
from lib.model_file import (MODEL_GGUF_NAME, MODEL_LICENSE, MODEL_NAME, MODEL_SHA256, ModelFile, ModelFileError,
                            configured_model, sha256_of)

Message = dict[str, str]
Candidate = tuple[str, float]
_ROLES = ("system", "user", "assistant")
DEFAULT_SERVER_TOP_LOGPROBS = 20


class CapabilityError(RuntimeError):
    """The configured backend cannot do what was asked; the message says what to use instead."""


class ServerUnavailableError(RuntimeError):
    """The OpenAI-compatible server did not answer; the message names the URL and how to start one."""


class ServerError(RuntimeError):
    """The server answered, but not with a usable reply (an error status, a body that is not a chat
    completion, a broken connection, no answer within the deadline); the message names the URL
    and what was wrong."""


DEFAULT_TIMEOUT_S = 30.0
"""Seconds one server request may take in all (WORKBOOK_TIMEOUT overrides): a decision takes a few."""


def request_timeout() -> float:
    """The whole-request deadline for server calls: $WORKBOOK_TIMEOUT seconds, else DEFAULT_TIMEOUT_S."""
    raw = os.environ.get("WORKBOOK_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"WORKBOOK_TIMEOUT={raw!r}: give the seconds a server request may take, e.g. 60")
    return seconds


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its text, its log-probability, and the top candidates at that step."""

    token: str
    logprob: float
    top: tuple[Candidate, ...] = ()


@dataclass(frozen=True)
class Completion:
    """A chat reply with everything a lesson may want to inspect."""

    text: str
    finish_reason: str  # "stop" (the model ended) or "length" (max_tokens reached)
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    tokens: tuple[TokenLogprob, ...] = ()

    @property
    def token_logprobs(self) -> list[float]:
        return [t.logprob for t in self.tokens]

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds > 0 else float("nan")


@dataclass(frozen=True)
class NextTokenLogprobs:
    """The model's distribution over the next token.

    `top` holds the most likely tokens, sorted by log-probability (descending). `scores`
    holds the log-probability of each token the caller asked about, if the backend could
    see it: the embedded backend sees the whole vocabulary, a server only its top-k, so a
    token missing from `scores` is unknown, not impossible.
    """

    top: tuple[Candidate, ...]
    scores: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


class LLM(Protocol):
    """What every backend (and the recording layer around it) offers."""

    def chat(self, messages: Sequence[Message], *, max_tokens: int, temperature: float = 0.0,
             seed: int | None = None, grammar: str | None = None,
             json_schema: dict[str, Any] | None = None, top_logprobs: int = 0) -> Completion: ...

    def next_token_logprobs(self, messages: Sequence[Message], *, prefix: str = "", top_k: int = 20,
                            score_tokens: Sequence[str] = ()) -> NextTokenLogprobs: ...

    def tokenize(self, text: str) -> list[str]: ...

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def info(self) -> dict[str, Any]: ...


def validate_messages(messages: Sequence[Message]) -> list[Message]:
    """Return `messages` as a list of {"role", "content"} dicts, or raise ValueError saying what is wrong."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise ValueError(f"messages[{index}] must be a dict with exactly the keys 'role' and 'content'")
        if message["role"] not in _ROLES:
            raise ValueError(f"messages[{index}]['role'] is {message['role']!r}; use one of {_ROLES}")
        if not isinstance(message["content"], str):
            raise ValueError(f"messages[{index}]['content'] must be a string")
        checked.append({"role": message["role"], "content": message["content"]})
    return checked


_TEMPLATE_TOKEN = re.compile(r"<\|[^<>|\s]{1,64}\|>|</?(?:s|bos|eos|start_of_turn|end_of_turn|pad|unk)>|"
                             r"\[/?INST\]|<</?SYS>>")
"""Text that chat templates use as control tokens: <|im_end|>, <|start_header_id|>, <s>, [INST], <<SYS>> ..."""
WORD_JOINER = "\u2060"


def neutralise_template_tokens(text: str) -> str:
    """`text` with every chat-template token broken by an invisible WORD JOINER after its first character.

    A server renders the chat template itself and reads the result with its control tokens,
    so a message holding "<|im_end|><|im_start|>system" would end the user's turn and open a
    system turn. "<\u2060|im_end|>" looks the same to a person and is plain text to every
    tokenizer. Text without such tokens is returned unchanged.
    """
    return _TEMPLATE_TOKEN.sub(lambda match: match.group(0)[0] + WORD_JOINER + match.group(0)[1:], text)


def _check_generation_args(max_tokens: int, temperature: float, top_logprobs: int,
                           grammar: str | None, json_schema: dict | None) -> None:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_logprobs < 0:
        raise ValueError(f"top_logprobs must be >= 0, got {top_logprobs}")
    if grammar is not None and json_schema is not None:
        raise ValueError("give either grammar or json_schema, not both")
    if grammar is not None:
        check_grammar(grammar)


def check_grammar(grammar: str) -> None:
    """Raise ValueError unless llama.cpp's own parser accepts `grammar` (GBNF with a 'root' rule).

    Checked locally, before any request: an empty grammar would be ignored silently, and a
    malformed one can bring a llama.cpp server down. The parser needs no model (grammars that
    name tokens, like <|im_end|>, need one and are refused here).
    """
    if not isinstance(grammar, str):
        raise TypeError(f"grammar must be a string of GBNF rules, got {type(grammar).__name__}")
    if not grammar.strip():
        raise ValueError("the grammar is empty; give GBNF rules with a 'root' rule, or grammar=None for free text")
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(None, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError("llama.cpp could not parse this GBNF grammar (it needs a 'root' rule):\n" + grammar[:500])
    llama_cpp.llama_sampler_free(sampler)


def library_versions() -> dict[str, str]:
    """Versions of the libraries that shape the numbers a lesson prints."""
    versions = {"python": platform.python_version()}
    for package in ("llama-cpp-python", "sentence-transformers", "torch", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


class LocalMethods:
    """What every backend does the same way: local MiniLM embeddings, token counts from tokenize."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from lib.embeddings import embed
        return embed(texts)

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` costs (recorded as one number, not the whole token list)."""
        return len(self.tokenize(text))


# --------------------------------------------------------------------------- embedded


class EmbeddedLLM(LocalMethods):
    """llama-cpp-python running a GGUF in this process.

    Prompt caching: the rendering of every message except the last (the system prompt and
    any examples) is the *shared prefix*. It stays in the KV cache between calls; the rest
    of the prompt is always evaluated as one batch on top of it. A request therefore takes
    exactly the same computation whatever ran before it, so its numbers are identical
    whether it runs first, second, or after a different request.
    """

    backend = "embedded"

    def __init__(self, model: ModelFile | None = None, *, n_ctx: int | None = None,
                 n_threads: int | None = None) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self._llama_cpp = llama_cpp
        self.model_file = model or configured_model()
        self.n_ctx = n_ctx or int(os.environ.get("WORKBOOK_N_CTX", "4096"))
        self.n_threads = n_threads or int(os.environ.get("WORKBOOK_THREADS", 0)) or os.cpu_count() or 1
        self._llama = llama_cpp.Llama(
            model_path=str(self.model_file.path), n_ctx=self.n_ctx, n_batch=self.n_ctx,
            n_threads=self.n_threads, n_threads_batch=self.n_threads, logits_all=False,
            verbose=False,
        )
        self._vocab = self._llama._model.vocab
        self._n_vocab = self._llama.n_vocab()
        self._pieces: dict[int, str] = {}
        template = self._llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"{self.model_file.path.name} has no chat template in its metadata")
        special = {"eos_token": self._piece(self._llama.token_eos()),
                   "bos_token": self._piece(self._llama.token_bos())}
        self._format_reply = Jinja2ChatFormatter(template, add_generation_prompt=True, **special)
        self._format_prefix = Jinja2ChatFormatter(template, add_generation_prompt=False, **special)
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._cached_prefix: list[int] = []
        self._sha256 = self.model_file.sha256
        self._sanity_probe()

    # -- load-time check

    def _sanity_probe(self) -> None:
        """Refuse a model whose next-token distribution is garbage, before it answers anything.

        One fixed question (a few tenths of a second). Any GGUF must give finite
        log-probabilities, far from uniform (entropy under SANITY_MAX_ENTROPY_SHARE of the
        uniform distribution's log(vocabulary)), with distinct top-5 values; a damaged file
        often gives NaN or five equal log-probabilities. The pinned model (recognised by
        its metadata name, which a damaged copy keeps) must also answer the known token
        with at least SANITY_PINNED_MIN_LOGPROB: a damaged copy can write fluent nonsense
        with confident log-probabilities.
        """
        logprobs = self.next_token_distribution(SANITY_PROMPT)
        self.clear_cache()
        problem = None
        if not np.isfinite(logprobs).all():
            problem = "its next-token log-probabilities hold NaN or infinity"
        else:
            entropy = float(-(np.exp(logprobs) * logprobs).sum())
            top = self._top(logprobs, 5)
            if entropy > SANITY_MAX_ENTROPY_SHARE * math.log(len(logprobs)):
                problem = f"its next-token distribution is nearly uniform (entropy {entropy:.2f} nats)"
            elif top[0][1] - top[-1][1] < 1e-6:
                problem = f"its five most likely next tokens have equal log-probabilities ({top[0][1]:.4f})"
            elif self._llama.metadata.get("general.name") == MODEL_GGUF_NAME and (
                    top[0][0] != SANITY_PINNED_ANSWER or top[0][1] < SANITY_PINNED_MIN_LOGPROB):
                problem = (f"it answers {top[0][0]!r} (log-probability {top[0][1]:.3f}) where {MODEL_NAME} answers "
                           f"{SANITY_PINNED_ANSWER!r} with at least {SANITY_PINNED_MIN_LOGPROB}")
        if problem:
            raise ModelFileError(
                f"{self.model_file.path} failed the load-time sanity check: {problem}. The file is damaged or not "
                "a working chat model; delete it and run `make setup` (or point WORKBOOK_MODEL_PATH at a good GGUF)")

    # -- identity and description

    @property
    def identity(self) -> str:
        if self._sha256 is None:
            self._sha256 = sha256_of(self.model_file.path)
        return f"embedded:{self._sha256}"

    def info(self) -> dict[str, Any]:
        name = self._llama.metadata.get("general.name", self.model_file.path.stem)
        is_default = self.model_file.sha256 == MODEL_SHA256
        return {
            "backend": self.backend,
            "model": MODEL_NAME if is_default else name,
            "file": self.model_file.path.name,
            "file_bytes": self.model_file.path.stat().st_size,
            "sha256": self.identity.split(":", 1)[1],
            "licence": MODEL_LICENSE if is_default else "see the model card",
            "parameters": self._llama._model.n_params(),
            "context_tokens": self.n_ctx,
            "threads": self.n_threads,
            "versions": library_versions(),
        }

    # -- tokens

    def _piece(self, token: int) -> str:
        """The text of one token (special tokens rendered), cached."""
        if token not in self._pieces:
            raw = self._llama.detokenize([token], special=True)
            self._pieces[token] = raw.decode("utf-8", errors="replace")
        return self._pieces[token]

    def _token_ids(self, text: str, *, special: bool) -> list[int]:
        if not text:
            return []
        return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def tokenize(self, text: str) -> list[str]:
        """The model's tokens for `text`, as strings (special-token syntax is read as plain text)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return [self._piece(t) for t in self._token_ids(text, special=False)]

    def single_token_id(self, text: str) -> int:
        """The id of `text` if the tokenizer makes exactly one token of it, else ValueError."""
        ids = self._token_ids(text, special=False)
        if len(ids) != 1:
            raise ValueError(f"{text!r} is {len(ids)} tokens for this model, not one: "
                             f"{[self._piece(t) for t in ids]}")
        return ids[0]

    def _chat_ids(self, formatter: Any, messages: list[Message]) -> list[int]:
        """Token ids of `messages` in the chat template, with BOS where the model wants one.

        The template's own text ("<|im_start|>user\n" ...) is read with its control tokens;
        message content never is: text such as "<|im_end|><|im_start|>system" in a customer's
        message stays plain text, so it cannot close the user's turn and speak as the system.
        Content is first shown as a server sees it (`neutralise_template_tokens`), so both
        backends read the same text; then any control-token text left (tokens of other
        spellings) is tokenized as plain text. When no content holds such text, reading the
        whole prompt at once gives the same ids, and that single pass is kept (the ids every
        recording was made with).
        """
        messages = [{"role": m["role"], "content": neutralise_template_tokens(m["content"])} for m in messages]
        if any(self._token_ids(m["content"], special=True) != self._token_ids(m["content"], special=False)
               for m in messages):
            ids = self._ids_with_plain_content(formatter, messages)
        else:
            ids = self._token_ids(formatter(messages=messages).prompt, special=True)
        if self._add_bos and (not ids or ids[0] != self._llama.token_bos()):
            ids = [self._llama.token_bos()] + ids
        return ids

    def _ids_with_plain_content(self, formatter: Any, messages: list[Message]) -> list[int]:
        """Render the template around placeholders, then tokenize the template's text with control
        tokens and each message's content without them."""
        marker = "\ue000"  # a private-use character, lengthened until no content holds it
        while any(marker in m["content"] for m in messages):
            marker += "\ue000"
        placeholders = [f"{marker}{index}{marker}" for index in range(len(messages))]
        prompt = formatter(messages=[{"role": m["role"], "content": placeholder}
                                     for m, placeholder in zip(messages, placeholders)]).prompt
        ids: list[int] = []
        for message, placeholder in zip(messages, placeholders):
            before, found, prompt = prompt.partition(placeholder)
            if not found:
                raise ValueError(f"the chat template of {self.model_file.path.name} does not show message "
                                 "content as given, so its content cannot be kept apart from control tokens")
            ids += self._token_ids(before, special=True) + self._token_ids(message["content"], special=False)
        return ids + self._token_ids(prompt, special=True)

    def _prompt_ids(self, messages: list[Message], prefix: str) -> tuple[list[int], int]:
        """Token ids of the rendered chat (plus an assistant `prefix`) and the shared-prefix length."""
        ids = self._chat_ids(self._format_reply, messages)
        shared = 0
        if len(messages) > 1:
            head_ids = self._chat_ids(self._format_prefix, messages[:-1])
            while shared < min(len(ids), len(head_ids)) and ids[shared] == head_ids[shared]:
                shared += 1
        return ids + self._token_ids(prefix, special=False), shared

    def prompt_split(self, messages: Sequence[Message]) -> tuple[int, int]:
        """(tokens in the rendered prompt, how many of them form the cached shared prefix)."""
        ids, shared = self._prompt_ids(validate_messages(messages), "")
        return len(ids), shared

    def clear_cache(self) -> None:
        """Forget the cached prefix, so the next call evaluates its whole prompt (for benchmarks)."""
        self._cached_prefix = []
        self._llama.n_tokens = 0

    # -- evaluation

    def _evaluate(self, ids: list[int], shared: int, reserve: int) -> None:
        """Put `ids` through the model, reusing the KV cache only for the shared prefix."""
        if len(ids) + reserve > self.n_ctx:
            raise ValueError(f"the prompt has {len(ids)} tokens and {reserve} more were asked for, "
                             f"but the context holds {self.n_ctx}; shorten the prompt or set WORKBOOK_N_CTX")
        prefix = ids[:shared]
        if prefix != self._cached_prefix:
            self._llama.n_tokens = 0
            self._cached_prefix = []
            if prefix:
                self._llama.eval(prefix)
            self._cached_prefix = prefix
        self._llama.n_tokens = len(prefix)
        self._llama.eval(ids[shared:])  # drops every cached position after the prefix first

    def _last_logits(self) -> np.ndarray:
        pointer = self._llama_cpp.llama_get_logits_ith(self._llama.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).copy()

    def _top(self, logprobs: np.ndarray, k: int) -> tuple[Candidate, ...]:
        if k <= 0:
            return ()
        best = np.argpartition(-logprobs, k)[:k]
        best = best[np.lexsort((best, -logprobs[best]))]
        return tuple((self._piece(int(t)), float(logprobs[t])) for t in best)

    def next_token_distribution(self, messages: Sequence[Message], *, prefix: str = "") -> np.ndarray:
        """Log-probabilities over the whole vocabulary for the token after `prefix` (embedded only)."""
        ids, shared = self._prompt_ids(validate_messages(messages), prefix)
        self._evaluate(ids, shared, reserve=0)
        return log_softmax(self._last_logits())

    def next_token_logprobs(self, messages: Sequence[Message], *, prefix: str = "", top_k: int = 20,
                            score_tokens: Sequence[str] = ()) -> NextTokenLogprobs:
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        score_ids = {text: self.single_token_id(text) for text in score_tokens}
        start = time.perf_counter()
        logprobs = self.next_token_distribution(messages, prefix=prefix)
        scores = {text: float(logprobs[token]) for text, token in score_ids.items()}
        return NextTokenLogprobs(self._top(logprobs, top_k), scores, time.perf_counter() - start)

    # -- generation

    def chat(self, messages: Sequence[Message], *, max_tokens: int, temperature: float = 0.0,
             seed: int | None = None, grammar: str | None = None,
             json_schema: dict[str, Any] | None = None, top_logprobs: int = 0) -> Completion:
        messages = validate_messages(messages)
        _check_generation_args(max_tokens, temperature, top_logprobs, grammar, json_schema)
        if json_schema is not None:
            from llama_cpp.llama_grammar import json_schema_to_gbnf
            grammar = json_schema_to_gbnf(json.dumps(json_schema))
        start = time.perf_counter()
        ids, shared = self._prompt_ids(messages, "")
        self._evaluate(ids, shared, reserve=max_tokens)
        constraint = _GrammarConstraint(self._llama_cpp, self._vocab, grammar) if grammar else None
        rng = np.random.default_rng(seed)
        generated: list[int] = []
        steps: list[TokenLogprob] = []
        finish_reason = "length"
        try:
            for _ in range(max_tokens):
                logits = self._last_logits()
                logprobs = log_softmax(logits)
                token = self._choose(logits, constraint, temperature, rng)
                if self._llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    finish_reason = "stop"
                    break
                if constraint:
                    constraint.accept(token)
                generated.append(token)
                steps.append(TokenLogprob(self._piece(token), float(logprobs[token]),
                                          self._top(logprobs, top_logprobs)))
                self._llama.eval([token])
        finally:
            if constraint:
                constraint.close()
        text = self._llama.detokenize(generated).decode("utf-8", errors="replace")
        return Completion(text, finish_reason, len(ids), len(generated),
                          time.perf_counter() - start, tuple(steps))

    def _choose(self, logits: np.ndarray, constraint: _GrammarConstraint | None, temperature: float,
                rng: np.random.Generator) -> int:
        """Greedy or seeded sampling over the tokens the grammar allows."""
        if temperature == 0:
            return self._greedy(logits, constraint)
        if constraint is not None:
            logits = constraint.mask(logits)
        probs = np.exp(log_softmax(logits / temperature))
        return int(np.searchsorted(np.cumsum(probs), rng.random() * probs.sum(), side="right"))

    @staticmethod
    def _greedy(logits: np.ndarray, constraint: _GrammarConstraint | None) -> int:
        """The most likely token the grammar allows.

        Checking a grammar against the whole vocabulary is slow, so we check the best token,
        then the best 64, then the best 4,096, and only then everything. The result is exact:
        every token outside the first k that were checked has a lower logit than all of them.
        """
        if constraint is None:
            return int(np.argmax(logits))
        for k in _GREEDY_SHORTLISTS:
            if k >= len(logits):
                break
            ids = np.argpartition(-logits, k - 1)[:k].astype(np.int32) if k > 1 else np.array(
                [np.argmax(logits)], dtype=np.int32)
            allowed = constraint.mask_subset(ids, logits[ids])
            if np.isfinite(allowed).any():
                best = allowed.max()
                return int(ids[allowed == best].min())  # ties: the lowest id, as np.argmax would
        return int(np.argmax(constraint.mask(logits)))


_GREEDY_SHORTLISTS = (1, 64, 4096)

SANITY_PROMPT: list[Message] = [{"role": "user", "content": "What is the capital of France? Reply with one word."}]
"""The load-time probe's question (`EmbeddedLLM._sanity_probe`)."""
SANITY_PINNED_ANSWER = "Paris"
SANITY_PINNED_MIN_LOGPROB = -0.1
"""The pinned model answers "Paris" with log-probability -0.009; a damaged copy does not."""
SANITY_MAX_ENTROPY_SHARE = 0.75
"""Refuse a next-token entropy above this share of log(vocabulary size) (a uniform distribution)."""


class _GrammarConstraint:
    """A llama.cpp GBNF grammar sampler applied to raw logits (-inf where the grammar forbids)."""

    def __init__(self, llama_cpp: Any, vocab: Any, grammar: str) -> None:
        self._llama_cpp = llama_cpp
        self._sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not self._sampler:
            raise ValueError("llama.cpp could not parse this GBNF grammar (it needs a 'root' rule):\n"
                             + grammar[:500])

    def _apply(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        llama_cpp = self._llama_cpp
        data = (llama_cpp.llama_token_data * len(ids))()
        view = np.ctypeslib.as_array(data)
        view["id"] = ids
        view["logit"] = logits
        view["p"] = 0.0
        array = llama_cpp.llama_token_data_array(data=data, size=len(ids), selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        if array.size != len(ids) or not np.array_equal(view["id"], ids):
            raise RuntimeError("llama.cpp's grammar sampler reordered the candidates; "
                               "this llama-cpp-python version is not supported")
        return view["logit"].copy()

    def mask_subset(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The logits of the candidate tokens `ids`, -inf where the grammar forbids them."""
        return self._apply(ids, logits.astype(np.float32))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        masked = self._apply(np.arange(len(logits), dtype=np.int32), logits.astype(np.float32))
        if not np.isfinite(masked).any():
            raise RuntimeError("the grammar allows no token at this step")
        return masked

    def accept(self, token: int) -> None:
        self._llama_cpp.llama_sampler_accept(self._sampler, token)

    def close(self) -> None:
        self._llama_cpp.llama_sampler_free(self._sampler)


# --------------------------------------------------------------------------- server


@dataclass(frozen=True)
class _Reply:
    """A server's whole answer: status, body text, and the URL it came from (for error messages)."""

    url: str
    status: int
    text: str

    def json(self) -> Any:
        try:
            return json.loads(self.text)
        except json.JSONDecodeError as error:
            raise ServerError(f"{self.url} answered {self.status} with a body that is not JSON ({error}): "
                              f"{self.text[:300]!r}") from None


_REFUSED_CAPABILITY = re.compile(r"logits_all|logprobs?\b[^.]{0,80}\b(not supported|unsupported|not available|"
                                 r"not enabled|disabled)|(not support|does not support|cannot return)[^.]{0,80}logprobs",
                                 re.IGNORECASE)
"""How servers say they cannot return token log-probabilities (llama_cpp.server without --logits_all,
vLLM and others); any other error that merely mentions logprobs is the server's own error."""


def _completion_problem(body: Any) -> str | None:
    """What keeps `body` from being an OpenAI chat completion, or None when it is one."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        return "no choices"
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return "choices[0] has no message"
    if not isinstance(choice["message"].get("content") or "", str):
        return "choices[0].message.content is not text"
    logprobs = choice.get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    for item in content or []:
        if not (isinstance(item, dict) and isinstance(item.get("token"), str)
                and isinstance(item.get("logprob"), (int, float))):
            return "a token of choices[0].logprobs.content has no token text or no logprob number"
        for candidate in item.get("top_logprobs") or []:
            if not (isinstance(candidate, dict) and isinstance(candidate.get("token"), str)
                    and isinstance(candidate.get("logprob"), (int, float))):
                return "a top_logprobs candidate has no token text or no logprob number"
    return None


class OpenAICompatibleLLM(LocalMethods):
    """Any server with OpenAI's /v1/chat/completions: llama-server, llama-cpp-python, Ollama, vLLM, OpenAI.

    Every request has one deadline for the whole exchange (`timeout` seconds, by default
    $WORKBOOK_TIMEOUT or DEFAULT_TIMEOUT_S), not a limit per read: a server that trickles a
    byte every few seconds is stopped once the deadline has passed (at most one read later).
    Every way a server can fail raises ServerUnavailableError (nothing answers) or
    ServerError (an unusable answer), naming the URL.
    """

    backend = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_top_logprobs: int = DEFAULT_SERVER_TOP_LOGPROBS, timeout: float | None = None) -> None:
        import httpx

        self._httpx = httpx
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_top_logprobs = max_top_logprobs
        self.timeout = request_timeout() if timeout is None else timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=self.timeout, headers=headers)
        self._schema_style = "json_schema"
        self._is_openai = urlparse(self.base_url).hostname == "api.openai.com"

    @property
    def identity(self) -> str:
        return f"openai:{self.model}"

    def _root_url(self) -> str:
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def _request(self, method: str, url: str, payload: dict | None = None) -> _Reply:
        """Send one request and read the whole answer before the deadline."""
        httpx = self._httpx
        deadline = time.monotonic() + self.timeout
        late = ServerError(f"{url} did not finish answering within {self.timeout:g} s (WORKBOOK_TIMEOUT); "
                           "the server is overloaded or stuck. Raise WORKBOOK_TIMEOUT for slow hardware")
        try:
            with self._client.stream(method, url, json=payload) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:
                        raise late
                text = body.decode(response.encoding or "utf-8", errors="replace")
                return _Reply(url, response.status_code, text)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise ServerUnavailableError(
                f"no answer from the model server at {self.base_url} ({type(error).__name__}). Start one, "
                "e.g. `python -m llama_cpp.server --model .cache/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf "
                "--host 127.0.0.1 --port 8080 --n_ctx 4096 --logits_all true` and set WORKBOOK_BASE_URL="
                "http://127.0.0.1:8080/v1, or unset WORKBOOK_BACKEND to use the embedded model."
            ) from None
        except httpx.TimeoutException:
            raise late from None
        except httpx.TransportError as error:
            raise ServerError(f"{url}: the server closed or broke the connection before its answer was complete "
                              f"({type(error).__name__}: {error})") from None

    def _post_json(self, url: str, payload: dict) -> Any:
        reply = self._request("POST", url, payload)
        if reply.status >= 400:
            raise ServerError(f"{url} answered {reply.status}: {reply.text[:500]}")
        return reply.json()

    def info(self) -> dict[str, Any]:
        url = f"{self.base_url}/models"
        reply = self._request("GET", url)
        listing = None
        if reply.status < 400:
            try:
                listing = json.loads(reply.text)
            except json.JSONDecodeError:
                pass
        models = listing.get("data") if isinstance(listing, dict) else None
        if not (isinstance(models, list) and all(isinstance(m, dict) and "id" in m for m in models)):
            raise ServerError(f"{url} answered {reply.status} without a model list ({reply.text[:200]!r}): this is "
                              "not an OpenAI-compatible server, or WORKBOOK_BASE_URL misses its /v1")
        return {"backend": self.backend, "model": self.model, "base_url": self.base_url,
                "server_models": [m["id"] for m in models], "versions": library_versions()}

    def _schema_format(self, schema: dict) -> dict:
        if self._schema_style == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
        return {"type": "json_object", "schema": schema}

    def chat(self, messages: Sequence[Message], *, max_tokens: int, temperature: float = 0.0,
             seed: int | None = None, grammar: str | None = None,
             json_schema: dict[str, Any] | None = None, top_logprobs: int = 0) -> Completion:
        messages = validate_messages(messages)
        _check_generation_args(max_tokens, temperature, top_logprobs, grammar, json_schema)
        if top_logprobs > self.max_top_logprobs:
            raise CapabilityError(
                f"this server gives at most {self.max_top_logprobs} top candidates per token; ask for fewer, "
                "raise WORKBOOK_MAX_TOP_LOGPROBS if your server allows more, or use the embedded backend")
        if grammar is not None and self._is_openai:
            raise CapabilityError("OpenAI's API has no GBNF grammar; pass json_schema= (structured outputs) "
                                  "or use the embedded backend or a llama.cpp server")
        messages = [{"role": m["role"], "content": neutralise_template_tokens(m["content"])} for m in messages]
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                   "temperature": temperature, "logprobs": True}
        if top_logprobs:
            payload["top_logprobs"] = top_logprobs
        if seed is not None:
            payload["seed"] = seed
        if grammar is not None:
            payload["grammar"] = grammar
        start = time.perf_counter()
        url = f"{self.base_url}/chat/completions"
        if json_schema is not None:
            payload["response_format"] = self._schema_format(json_schema)
        response = self._request("POST", url, payload)
        if json_schema is not None and response.status >= 400 and "response_format" in response.text:
            self._schema_style = "json_object" if self._schema_style == "json_schema" else "json_schema"
            payload["response_format"] = self._schema_format(json_schema)
            response = self._request("POST", url, payload)
        if response.status >= 400:
            if _REFUSED_CAPABILITY.search(response.text):
                raise CapabilityError(f"{url} refused token logprobs ({response.text[:300]}). Start "
                                      "llama_cpp.server with --logits_all true, or use the embedded backend")
            raise ServerError(f"{url} answered {response.status}: {response.text[:500]}")
        body = response.json()
        seconds = time.perf_counter() - start
        problem = _completion_problem(body)
        usage = body.get("usage") if isinstance(body, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        counts = [usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)]
        if problem is None and not all(isinstance(count, int) for count in counts):
            problem = "usage holds token counts that are not integers"
        if problem is not None:
            raise ServerError(f"{url} answered JSON that is not a chat completion ({problem}): {response.text[:300]}")
        choice = body["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        steps = tuple(
            TokenLogprob(item["token"], float(item["logprob"]),
                         tuple(sorted(((c["token"], float(c["logprob"])) for c in item.get("top_logprobs") or []),
                                      key=lambda pair: -pair[1])))
            for item in content
        )
        return Completion(choice["message"].get("content") or "", choice.get("finish_reason") or "stop",
                          int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", len(steps))),
                          seconds, steps)

    def next_token_logprobs(self, messages: Sequence[Message], *, prefix: str = "", top_k: int = 20,
                            score_tokens: Sequence[str] = ()) -> NextTokenLogprobs:
        if prefix:
            raise CapabilityError("a chat server cannot continue a partial assistant reply (prefix=...); use "
                                  "chat(..., grammar=..., top_logprobs=k) and read the step you need from "
                                  "its tokens, or use the embedded backend")
        completion = self.chat(messages, max_tokens=1, top_logprobs=top_k)
        top = completion.tokens[0].top if completion.tokens else ()
        seen = dict(top)
        scores = {text: seen[text] for text in score_tokens if text in seen}
        return NextTokenLogprobs(top, scores, completion.seconds)

    def tokenize(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        root = self._root_url()
        url = f"{root}/tokenize"
        response = self._request("POST", url, {"content": text, "with_pieces": True})
        if response.status < 400:  # llama-server
            tokens = response.json().get("tokens") if isinstance(response.json(), dict) else None
            if not isinstance(tokens, list):
                raise ServerError(f"{url} answered without a token list: {response.text[:300]}")
            return [item["piece"] if isinstance(item, dict) else str(item) for item in tokens]
        url = f"{root}/extras/tokenize"
        response = self._request("POST", url, {"input": text})
        if response.status < 400:  # llama-cpp-python's server
            tokens = response.json().get("tokens") if isinstance(response.json(), dict) else None
            if not isinstance(tokens, list):
                raise ServerError(f"{url} answered without a token list: {response.text[:300]}")
            pieces = [self._post_json(f"{root}/extras/detokenize", {"tokens": [token]}) for token in tokens]
            if not all(isinstance(piece, dict) and isinstance(piece.get("text"), str) for piece in pieces):
                raise ServerError(f"{root}/extras/detokenize answered without a text")
            return [piece["text"] for piece in pieces]
        raise CapabilityError(f"the server at {self.base_url} offers no tokenizer endpoint; use the embedded "
                              "backend's tokenize")


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class BackendConfig:
    """Which backend to use, read from WORKBOOK_* environment variables."""

    backend: str
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    max_top_logprobs: int = DEFAULT_SERVER_TOP_LOGPROBS

    @classmethod
    def from_environment(cls) -> BackendConfig:
        backend = os.environ.get("WORKBOOK_BACKEND", "embedded").strip().lower()
        if backend == "embedded":
            return cls("embedded")
        if backend != "openai":
            raise ValueError(f"WORKBOOK_BACKEND={backend!r}: use 'embedded' (default) or 'openai'")
        base_url = os.environ.get("WORKBOOK_BASE_URL")
        model = os.environ.get("WORKBOOK_MODEL")
        if not base_url or not model:
            raise ValueError("WORKBOOK_BACKEND=openai needs WORKBOOK_BASE_URL (e.g. http://127.0.0.1:8080/v1) "
                             "and WORKBOOK_MODEL (the server's model id)")
        return cls("openai", base_url, model, os.environ.get("WORKBOOK_API_KEY"),
                   int(os.environ.get("WORKBOOK_MAX_TOP_LOGPROBS", DEFAULT_SERVER_TOP_LOGPROBS)))

    def identity(self) -> str:
        """The model identity recordings are keyed by, known without loading the model."""
        if self.backend == "openai":
            return f"openai:{self.model}"
        override = os.environ.get("WORKBOOK_MODEL_PATH")
        return f"embedded:{sha256_of(configured_model().path) if override else MODEL_SHA256}"

    def create(self) -> EmbeddedLLM | OpenAICompatibleLLM:
        if self.backend == "openai":
            return OpenAICompatibleLLM(self.base_url, self.model, api_key=self.api_key,
                                       max_top_logprobs=self.max_top_logprobs)
        return EmbeddedLLM()


def fingerprint(value: Any) -> str:
    """A short stable hash of any JSON-serialisable value (prompts, requests)."""
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
