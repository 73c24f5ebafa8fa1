"""Ask the model for a pydantic record under a JSON-schema constraint: validate, retry once, never guess.

Constrained decoding guarantees that every token the model writes can continue valid JSON
of the requested shape. It does not guarantee that the JSON is *finished* (generation can
stop at `max_tokens`), nor the checks the grammar cannot express (numeric bounds, formats).
So every reply is validated with pydantic, and a reply that fails is asked for once more:

- cut off at `max_tokens` (finish_reason "length"): the same messages, with twice the budget;
- finished but invalid: the same messages plus the bad reply and a note saying what was wrong.

If the second reply fails too, the result says so (`value` is None, `errors` holds both
reasons). Nothing is repaired or guessed: a half-written JSON object is a failure, not a
record. `lib.grounding` (answers with quotes) and `lib.extraction.extract_committee` (committee
facts) both ask through `ask_structured`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import pydantic

from lib.grammar import schema_for_model
from lib.backends.protocol import Completion, LLM, Message

__all__ = [
    "Record", "MAX_ATTEMPTS", "StructuredResult", "ask_structured",
]

Record = TypeVar("Record", bound=pydantic.BaseModel)

MAX_ATTEMPTS = 2
"""The first request and one retry."""


@dataclass(frozen=True)
class StructuredResult(Generic[Record]):
    """What came back from `ask_structured`.

    `value` is the validated record, or None when every attempt failed. `completions` holds
    every reply, in order (one, or two after a retry). `errors` holds one line per failed
    attempt, saying why it was rejected.
    """

    value: Record | None
    completions: tuple[Completion, ...]
    errors: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when a reply validated."""
        return self.value is not None

    @property
    def retried(self) -> bool:
        """True when the first reply was rejected and the model was asked again."""
        return len(self.completions) > 1


def _rejection(completion: Completion, model: type[pydantic.BaseModel]) -> tuple[pydantic.BaseModel | None, str]:
    """The validated record, or None and a one-line reason for rejecting the reply."""
    if completion.finish_reason == "length":
        return None, f"cut off at {completion.completion_tokens} tokens (finish_reason 'length'): incomplete JSON"
    try:
        return model.model_validate_json(completion.text), ""
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "reply"
        return None, f"invalid {model.__name__} ({error.error_count()} error(s)); first at {where}: {first['msg']}"


def ask_structured(
    llm: LLM,
    messages: Sequence[Message],
    model: type[Record],
    *,
    max_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    top_logprobs: int = 0,
) -> StructuredResult[Record]:
    """Ask `llm` for one `model` record as JSON constrained by the model's schema, validated by pydantic.

    Args:
        llm: anything with the `chat` method of `lib.backends.protocol.LLM` (a recorded model, or a fake in tests).
        messages: the chat messages; the reply is constrained by `schema_for_model(model)`.
        model: the pydantic class the reply must validate as.
        max_tokens: the budget of the first attempt; a reply cut off at it is retried with twice as many.
        temperature, seed, top_logprobs: passed to `llm.chat` unchanged on every attempt.

    Returns:
        A `StructuredResult`: the record (or None), every completion, and why attempts failed.
    """
    if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
        raise TypeError(f"model must be a pydantic BaseModel class, got {model!r}")
    schema = schema_for_model(model)
    request = list(messages)
    budget = max_tokens
    completions: list[Completion] = []
    errors: list[str] = []
    for attempt in range(MAX_ATTEMPTS):
        completion = llm.chat(request, max_tokens=budget, temperature=temperature, seed=seed,
                              json_schema=schema, top_logprobs=top_logprobs)
        completions.append(completion)
        value, reason = _rejection(completion, model)
        if value is not None:
            return StructuredResult(value, tuple(completions), tuple(errors))
        errors.append(f"attempt {attempt + 1}: {reason}")
        if completion.finish_reason == "length":
            budget = 2 * budget
        else:
            request = [*messages, {"role": "assistant", "content": completion.text},
                       {"role": "user", "content": f"That reply was rejected: {reason}. "
                        "Reply again with one complete JSON object that fits the schema."}]
    return StructuredResult(None, tuple(completions), tuple(errors))
