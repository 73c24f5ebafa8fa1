"""The embedded backend: llama-cpp-python running the pinned GGUF in this process (no server, no key, no GPU).

`EmbeddedLLM` offers the model API of `lib.backends.protocol.LLM`, and for the deciders that read
several distributions from one prompt (`lib.decisions`) its evaluation API: `prompt_ids`,
`evaluate`, `continuation` (a prompt evaluated once, then the distribution after any short
continuation) and `next_token_distributions` (requests sharing a prefix, evaluated once). A
prompt longer than the context is refused (ValueError), never shortened. `common_prefix_length`
and `prefix_tree_tokens` count the tokens a shared prefix saves (a benchmark's floor).

Notebooks never build it themselves: `lib.get_llm` builds it through `lib.backends.factory`.
"""
from __future__ import annotations

import json
import math
import time
from typing import Any, Callable, Sequence

import numpy as np

from lib.backends.common import LocalMethods, check_generation_args, library_versions
from lib.backends.protocol import (Candidate, Completion, JsonSchema, Message, NextTokenLogprobs, TokenLogprob,
                                   neutralise_template_tokens, validate_messages)
from lib.checks import check_positive_int
from lib.grammar import GrammarConstraint
from lib.logprobs import log_softmax
from lib.model_file import PINNED_MODELS, ModelFile, ModelFileError, configured_model, sha256_of
from lib.settings import context_tokens_setting, threads_setting

__all__ = [
    "common_prefix_length", "prefix_tree_tokens", "KEPT_TOKENS_MULTIPLE", "EmbeddedLLM", "Continuation",
    "SANITY_PROMPT", "SANITY_PINNED_ANSWER", "SANITY_PINNED_MIN_LOGPROB", "SANITY_MAX_ENTROPY_SHARE",
]


def common_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    """How many tokens `first` and `second` share from their start: the part of one prompt whose KV
    state another can keep."""
    return next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))


def prefix_tree_tokens(prompts: Sequence[Sequence[int]]) -> int:
    """How many distinct tokens `prompts` hold when every start they share is counted once: the
    tokens a model must evaluate for all of them at least, if it keeps each shared start's KV state."""
    ordered = sorted(list(prompt) for prompt in prompts)
    return sum(len(prompt) - common_prefix_length(prompt, before) for before, prompt in zip([[]] + ordered, ordered))



class EmbeddedLLM(LocalMethods):
    """llama-cpp-python running a GGUF in this process.

    Prompt caching: the rendering of every message except the last (the system prompt and
    any examples) is the *shared prefix*. It stays in the KV cache between calls; the rest
    of the prompt is always evaluated as one batch on top of it. A request therefore takes
    exactly the same computation whatever ran before it, so its numbers are identical
    whether it runs first, second, or after a different request.
    """

    backend_name = "embedded"

    def __init__(self, model: ModelFile | None = None, *, n_ctx: int | None = None,
                 n_threads: int | None = None, n_batch: int | None = None) -> None:
        """Load `model` (the configured one by default).

        `n_ctx` and `n_threads` default to WORKBOOK_N_CTX and WORKBOOK_THREADS. `n_batch`: the
        most prompt tokens llama.cpp puts through the model in one step (default `n_ctx`).
        llama-cpp-python 0.3 also sets the physical batch to min(`n_batch`, 512) (`n_ubatch`, which
        decides how the matrix products are split), so any `n_batch` of 512 or more computes the
        same numbers and a smaller one changes the split (`lib.saved_runs.drift` measures by how much).
        """
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self._llama_cpp = llama_cpp
        self.n_ctx = n_ctx or context_tokens_setting()
        self.n_threads = n_threads or threads_setting()
        self.n_batch = self.n_ctx if n_batch is None else n_batch
        check_positive_int(self.n_batch, "n_batch")
        self.model_file = model or configured_model()
        try:
            self._llama = llama_cpp.Llama(
                model_path=str(self.model_file.path), n_ctx=self.n_ctx, n_batch=self.n_batch,
                n_threads=self.n_threads, n_threads_batch=self.n_threads, logits_all=False,
                verbose=False,
            )
        except ValueError as error:  # llama-cpp-python's "Failed to load model from file"
            raise ModelFileError(f"llama.cpp could not load {self.model_file.path} ({error}): the file is damaged or "
                                 "not a GGUF model; delete it and run `make setup` (or point WORKBOOK_MODEL_PATH at "
                                 "a good GGUF)") from None
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

        One fixed question (a few tenths of a second). Any GGUF must give finite logits
        (checked first: a model damaged early in the file gives NaN, which `log_softmax`
        would refuse with no word about the file), log-probabilities far from uniform (entropy under SANITY_MAX_ENTROPY_SHARE of the
        uniform distribution's log(vocabulary)), with distinct top-5 values; a damaged file
        often gives NaN or five equal log-probabilities. The pinned model (recognised by
        its metadata name, which a damaged copy keeps) must also answer the known token
        with at least its SANITY_PINNED_MIN_LOGPROB: a damaged copy can write fluent nonsense
        with confident log-probabilities.
        """
        ids, shared = self.prompt_ids(validate_messages(SANITY_PROMPT))
        self.evaluate(ids, shared)
        logits = self._last_logits()
        self.clear_cache()
        problem = None
        if not np.isfinite(logits).all():  # checked before log_softmax, which refuses NaN
            problem = "its next-token logits hold NaN or infinity"
        else:
            logprobs = log_softmax(logits)
            entropy = float(-(np.exp(logprobs) * logprobs).sum())
            top = self._top(logprobs, 5)
            if entropy > SANITY_MAX_ENTROPY_SHARE * math.log(len(logprobs)):
                problem = f"its next-token distribution is nearly uniform (entropy {entropy:.2f} nats)"
            elif top[0][1] - top[-1][1] < 1e-6:
                problem = f"its five most likely next tokens have equal log-probabilities ({top[0][1]:.4f})"
            elif (pinned := next((model for model in PINNED_MODELS.values()  # by metadata, which a damaged copy keeps
                                  if model.gguf_name == self._llama.metadata.get("general.name")), None)) and (
                    top[0][0] != SANITY_PINNED_ANSWER or top[0][1] < SANITY_PINNED_MIN_LOGPROB[pinned.name]):
                problem = (f"it answers {top[0][0]!r} (log-probability {top[0][1]:.3f}) where {pinned.title} answers "
                           f"{SANITY_PINNED_ANSWER!r} with at least {SANITY_PINNED_MIN_LOGPROB[pinned.name]}")
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

    def info(self) -> dict[str, object]:
        name = self._llama.metadata.get("general.name", self.model_file.path.stem)
        pinned = next((model for model in PINNED_MODELS.values() if model.sha256 == self.model_file.sha256), None)
        return {
            "backend": self.backend_name,
            "model": pinned.title if pinned else name,
            "file": self.model_file.path.name,
            "file_bytes": self.model_file.path.stat().st_size,
            "sha256": self.identity.split(":", 1)[1],
            "licence": pinned.licence if pinned else "see the model card",
            "parameters": self._llama._model.n_params(),
            "context_tokens": self.n_ctx,
            "threads": self.n_threads,
            "versions": library_versions(),
        }

    @property
    def physical_batch(self) -> int:
        """The most prompt tokens one matrix product takes (llama.cpp's `n_ubatch`): min(`n_batch`, 512)."""
        return int(self._llama.context_params.n_ubatch)

    # -- tokens

    def _piece(self, token: int) -> str:
        """The text of one token (special tokens rendered), cached."""
        if token not in self._pieces:
            raw = self._llama.detokenize([token], special=True)
            self._pieces[token] = raw.decode("utf-8", errors="replace")
        return self._pieces[token]

    def token_ids(self, text: str, *, special: bool = False) -> list[int]:
        """The token ids of `text`; with `special`, control-token text such as "<|im_end|>" is read as one token."""
        if not text:
            return []
        return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def tokenize(self, text: str) -> list[str]:
        """The model's tokens for `text`, as strings (special-token syntax is read as plain text)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return [self._piece(t) for t in self.token_ids(text, special=False)]

    def single_token_id(self, text: str) -> int:
        """The id of `text` if the tokenizer makes exactly one token of it, else ValueError."""
        ids = self.token_ids(text, special=False)
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
        if any(self.token_ids(m["content"], special=True) != self.token_ids(m["content"], special=False)
               for m in messages):
            ids = self._ids_with_plain_content(formatter, messages)
        else:
            ids = self.token_ids(formatter(messages=messages).prompt, special=True)
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
            ids += self.token_ids(before, special=True) + self.token_ids(message["content"], special=False)
        return ids + self.token_ids(prompt, special=True)

    def prompt_ids(self, messages: list[Message], prefix: str = "") -> tuple[list[int], int]:
        """Token ids of the rendered chat (plus an assistant `prefix`) and the shared-prefix length.

        The shared prefix is the rendering of every message but the last (see the class
        docstring): `evaluate` keeps it in the KV cache between requests.
        """
        ids = self._chat_ids(self._format_reply, messages)
        shared = 0
        if len(messages) > 1:
            shared = common_prefix_length(ids, self._chat_ids(self._format_prefix, messages[:-1]))
        return ids + self.token_ids(prefix, special=False), shared

    def prompt_split(self, messages: Sequence[Message]) -> tuple[int, int]:
        """(tokens in the rendered prompt, how many of them form the cached shared prefix)."""
        ids, shared = self.prompt_ids(validate_messages(messages), "")
        return len(ids), shared

    def clear_cache(self) -> None:
        """Forget the cached prefix, so the next call evaluates its whole prompt (for benchmarks)."""
        self._cached_prefix = []
        self._llama.n_tokens = 0

    # -- evaluation

    @property
    def cached_prefix_tokens(self) -> int:
        """How many tokens the KV cache holds as the shared prefix of the last request."""
        return len(self._cached_prefix)

    def evaluate(self, ids: list[int], shared: int, reserve: int = 0) -> None:
        """Put `ids` through the model, reusing the KV cache only for the first `shared` of them.

        `reserve` tokens must still fit in the context after `ids` (the reply, or the
        continuations a decider reads); ValueError says so when they do not.
        """
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

    def continuation(self, messages: Sequence[Message], *, reserve: int = 16) -> Continuation:
        """Evaluate a prompt once, then read the next-token distribution after any short continuation.

        A multi-step answer (a group letter, then an intent letter; an intent name token by
        token) then costs one prompt evaluation plus one decoding step per token, as a
        generation would. `reserve`: tokens of continuation the context must hold.
        """
        ids, shared = self.prompt_ids(validate_messages(messages))
        self.evaluate(ids, shared, reserve=reserve)

        def decode(start: int, tokens: list[int]) -> np.ndarray:
            self._llama.n_tokens = len(ids) + start
            for token in tokens:
                self._llama.eval([token])
            return log_softmax(self._last_logits())

        return Continuation(log_softmax(self._last_logits()), decode)

    def next_token_distributions(self, requests: Sequence[Sequence[Message]], *,
                                 reserve: int = 0) -> list[np.ndarray]:
        """Next-token log-probabilities, shape (n_vocab,) each, for requests that share tokens after
        the cached prefix (a shortlist's orderings, each asked with the customer message and with a
        content-free one).

        Each request evaluates only the tokens this call has not already put in the KV cache: it
        keeps the longest start it shares with the request before it. Its own tokens go in at most
        two batches: up to the furthest point a later request shares with it (so that one keeps
        them), then the rest. A shortlist's options are thus evaluated once for the message and
        the content-free message, and its orderings share their first tokens.

        llama.cpp's CPU kernels multiply a batch's tokens in groups of a few rows, counted from
        the batch's start, and a token's numbers depend on its place in a group. So a request
        keeps a batch's tokens only up to a multiple of `KEPT_TOKENS_MULTIPLE` after that
        batch's start: every token it evaluates then sits where it would if the request had
        evaluated that batch itself, and the numbers are those of each ordering asked alone
        (measured: keeping 9 or 10 tokens of an ordering moved a probability by up to 0.024,
        keeping 8 changed none). The split depends only on the requests, never on what ran
        before the call; a request alone is one batch, as `next_token_distribution` evaluates it.
        """
        encoded = [self.prompt_ids(validate_messages(messages)) for messages in requests]
        longest = max((len(ids) for ids, _ in encoded), default=0)
        in_cache: list[int] = []  # what this call has put in the KV cache so far
        starts: list[int] = []  # where each batch that put `in_cache` there began
        distributions = []
        for index, (ids, shared) in enumerate(encoded):
            last = len(ids) - 1  # every request evaluates at least its last token
            kept = min(common_prefix_length(in_cache, ids), last)
            start = max((position for position in starts if position <= kept), default=0)
            kept = start + (kept - start) // KEPT_TOKENS_MULTIPLE * KEPT_TOKENS_MULTIPLE
            branch = min(max((common_prefix_length(ids, later) for later, _ in encoded[index + 1:]), default=0), last)
            reuse = bool(in_cache) and kept >= max(shared, self.cached_prefix_tokens)
            stop = branch if branch > (kept if reuse else shared) else len(ids)
            if reuse:
                self._llama.n_tokens = kept
                self._llama.eval(ids[kept:stop])
            else:  # `evaluate` checks that the longest request and `reserve` fit
                self.evaluate(ids[:stop], shared, reserve=reserve + longest - stop)
            if stop < len(ids):
                self._llama.eval(ids[stop:])
            in_cache = ids
            starts = [position for position in starts if position < kept] + [kept] if reuse else [0, shared]
            starts += [stop] if stop < len(ids) else []
            distributions.append(log_softmax(self._last_logits()))
        return distributions

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
        """Log-probabilities, shape (n_vocab,), over the whole vocabulary for the token after `prefix`
        (embedded only)."""
        ids, shared = self.prompt_ids(validate_messages(messages), prefix)
        self.evaluate(ids, shared, reserve=0)
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
             json_schema: JsonSchema | None = None, top_logprobs: int = 0) -> Completion:
        messages = validate_messages(messages)
        check_generation_args(max_tokens, temperature, top_logprobs, grammar, json_schema)
        if json_schema is not None:
            from llama_cpp.llama_grammar import json_schema_to_gbnf
            grammar = json_schema_to_gbnf(json.dumps(json_schema))
        start = time.perf_counter()
        ids, shared = self.prompt_ids(messages, "")
        self.evaluate(ids, shared, reserve=max_tokens)
        constraint = GrammarConstraint(self._llama_cpp, self._vocab, grammar) if grammar else None
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

    def _choose(self, logits: np.ndarray, constraint: GrammarConstraint | None, temperature: float,
                rng: np.random.Generator) -> int:
        """Greedy or seeded sampling over the tokens the grammar allows."""
        if temperature == 0:
            return self._greedy(logits, constraint)
        if constraint is not None:
            logits = constraint.mask(logits)
        probs = np.exp(log_softmax(logits / temperature))
        return int(np.searchsorted(np.cumsum(probs), rng.random() * probs.sum(), side="right"))

    @staticmethod
    def _greedy(logits: np.ndarray, constraint: GrammarConstraint | None) -> int:
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


class Continuation:
    """A prompt evaluated once on the embedded model, and the next-token distribution after any
    short continuation of it, decoding only the tokens not already in the cache.

    Made by `EmbeddedLLM.continuation`. Only positions after the prompt are written, so the
    backend's shared-prefix cache stays valid. `first`: the log-probabilities, shape
    (n_vocab,), of the token right after the prompt. `decode(start, tokens)` puts `tokens`
    into the context from `start` tokens after the prompt on and returns the log-probabilities
    of the token after them.
    """

    def __init__(self, first: np.ndarray, decode: Callable[[int, list[int]], np.ndarray]) -> None:
        self.first = first
        self._decode = decode
        self._pushed: list[int] = []

    def after(self, tokens: Sequence[int]) -> np.ndarray:
        """Log-probabilities, shape (n_vocab,), of the next token after the prompt plus `tokens`."""
        tokens = list(tokens)
        if not tokens:
            return self.first
        common = common_prefix_length(tokens, self._pushed)
        if common == len(tokens):  # the logits we need were overwritten: decode the last token again
            common -= 1
        logprobs = self._decode(common, tokens[common:])
        self._pushed = tokens
        return logprobs


_GREEDY_SHORTLISTS = (1, 64, 4096)
KEPT_TOKENS_MULTIPLE = 8
"""`EmbeddedLLM.next_token_distributions` keeps tokens a batch evaluated up to a multiple of this
after the batch's start (llama.cpp's repacked CPU kernels group a batch's rows by 4)."""

SANITY_PROMPT: list[Message] = [{"role": "user", "content": "What is the capital of France? Reply with one word."}]
"""The question of the load-time sanity probe every `EmbeddedLLM` answers before any other."""
SANITY_PINNED_ANSWER = "Paris"
SANITY_PINNED_MIN_LOGPROB: dict[str, float] = {"qwen2.5-coder-1.5b-instruct": -0.1, "qwen2.5-coder-0.5b-instruct": -0.5}
"""The least log-probability of "Paris" each pinned model (by name) must give: the 1.5B answers with
-0.009, the 0.5B with -0.090; a damaged copy does not."""
SANITY_MAX_ENTROPY_SHARE = 0.75
"""Refuse a next-token entropy above this share of log(vocabulary size) (a uniform distribution)."""
