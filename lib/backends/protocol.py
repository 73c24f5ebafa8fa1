"""The model API every backend offers, and the values it returns: the one type a function that takes a model names.

Two backends implement `LLM` (`lib.backends.embedded.EmbeddedLLM`, in this process, and
`lib.backends.openai_compatible.OpenAICompatibleLLM`, any OpenAI-compatible server), and so does
the record/replay layer around them (`lib.recording.RecordedLLM`); `lib.backends.factory` builds
the one the settings name. A backend that cannot do something raises `CapabilityError` saying what
to use instead; it never makes numbers up.

Probabilities reported per generated token are those of the model before any grammar mask and at
temperature 1, which is what llama-server and llama-cpp-python's server report too. Message
content never becomes control tokens (`neutralise_template_tokens`).

This module imports nothing else of `lib`, so any module can name the types without loading a backend.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = [
    "Message", "Candidate", "JsonSchema", "CapabilityError", "TokenLogprob", "Completion", "NextTokenLogprobs", "LLM",
    "Layered", "validate_messages", "WORD_JOINER", "neutralise_template_tokens",
]

Message = dict[str, str]
"""One chat message: {"role": "system" | "user" | "assistant", "content": text}."""
Candidate = tuple[str, float]
"""A token and its log-probability."""
JsonSchema = dict[str, Any]
"""A JSON schema a reply must follow (`lib.grammar.schema_for_model` makes one from a pydantic model)."""
_ROLES = ("system", "user", "assistant")


class CapabilityError(RuntimeError):
    """The configured backend cannot do what was asked; the message says what to use instead."""


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
    """What every backend (and the recording layer around it) offers: the one type a function that
    takes a model names."""

    @property
    def backend_name(self) -> str:
        """Which backend answers: "embedded" or "openai"."""

    @property
    def identity(self) -> str:
        """The model's identity, which recordings and saved runs are keyed by: `embedded:<sha256>`, `openai:<id>`."""

    def chat(self, messages: Sequence[Message], *, max_tokens: int, temperature: float = 0.0,
             seed: int | None = None, grammar: str | None = None,
             json_schema: JsonSchema | None = None, top_logprobs: int = 0) -> Completion: ...

    def next_token_logprobs(self, messages: Sequence[Message], *, prefix: str = "", top_k: int = 20,
                            score_tokens: Sequence[str] = ()) -> NextTokenLogprobs: ...

    def tokenize(self, text: str) -> list[str]: ...

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def info(self) -> dict[str, object]: ...


@runtime_checkable
class Layered(Protocol):
    """A model behind a layer of its own (the record/replay layer, `lib.recording.RecordedLLM`) that
    hands over the backend itself when calls may bypass the layer (live mode), else None."""

    def live_backend(self) -> LLM | None: ...


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


