"""Grounded answers: the model answers from given sections only, with quotes that code then checks.

`grounded_answer` shows the model a question and a few corpus sections (each headed by
its section id), asks for a `lib.quotes.GroundedAnswer` (the answer plus verbatim quotes,
each naming its section) as JSON under a schema constraint, and checks every quote with
`lib.quotes.verify_answer`. The prompt lives here and nowhere else, so notebook 03 (quote
verification), 07 (token confidence of grounded answers) and 18 (the assembled assistant)
ask exactly the same question in exactly the same words.

An answer that fails validation twice is reported as a failure (`answer` is None), never
repaired: see `lib.structured`. `answer_field_logprobs` reads the log-probabilities of the
answer's own tokens off a grounded reply (its quotes and JSON punctuation say nothing of how
sure the model was).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lib.backends.protocol import Completion, LLM, Message
from lib.quotes import GroundedAnswer, QuoteVerdict, verify_answer
from lib.structured import StructuredResult, ask_structured

__all__ = [
    "GROUNDING_SYSTEM_PROMPT", "DEFAULT_MAX_TOKENS", "GroundingResult", "grounding_messages", "grounded_answer",
    "answer_field_logprobs",
]

GROUNDING_SYSTEM_PROMPT = (
    "You answer questions about the Quillmere Institute of Technology using ONLY the sections "
    "given to you. Reply with a JSON object with two keys: \"answer\", a short answer to the "
    "question, and \"quotes\", a list of passages copied word for word from the sections that "
    "support the answer, each with the \"section_id\" of the section it was copied from. Copy "
    "quotes exactly, character for character; use '...' only to leave out words inside one "
    "passage. If the sections do not answer the question, say so in \"answer\" and give no quotes."
)
"""The instructions for every grounded answer in the workbook."""

DEFAULT_MAX_TOKENS = 300


@dataclass(frozen=True)
class GroundingResult(StructuredResult[GroundedAnswer]):
    """A grounded answer (`StructuredResult.value`), the question, and the verdict on each quote.

    `value` (also readable as `answer`) is the validated `GroundedAnswer`, or None when the
    model failed to produce one in two attempts (`errors` says why); `ok` says which.
    `verdicts` holds one `QuoteVerdict` per quote, in the answer's order (empty when there is
    no answer).
    """

    question: str
    verdicts: tuple[QuoteVerdict, ...]

    @property
    def answer(self) -> GroundedAnswer | None:
        """The validated answer, or None."""
        return self.value

    @property
    def completion(self) -> Completion:
        """The reply the answer came from (or the last failed one)."""
        return self.completions[-1]

    @property
    def n_verified(self) -> int:
        """How many quotes were found in the sections."""
        return sum(verdict.ok for verdict in self.verdicts)


def grounding_messages(question: str, sections: Mapping[str, str], *, system: str = GROUNDING_SYSTEM_PROMPT,
                       numbered: bool = False) -> list[Message]:
    """The chat messages for a grounded answer: the instructions, then the sections and the question.

    Each section is shown as "[section id]" followed by its text, in the order given; with
    `numbered`, as "[n]", its position from 1, so that the model can cite it only by number
    (`lib.model_citations`, with its own `system` instructions).
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    if not isinstance(sections, Mapping) or not sections:
        raise ValueError("sections must be a non-empty mapping of section id to section text")
    shown = "\n\n".join(f"[{n if numbered else section_id}]\n{text.strip()}"
                         for n, (section_id, text) in enumerate(sections.items(), start=1))
    user = f"Sections:\n\n{shown}\n\nQuestion: {question.strip()}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def grounded_answer(
    llm: LLM,
    question: str,
    sections: Mapping[str, str],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    top_logprobs: int = 0,
    max_gap: int = 400,
) -> GroundingResult:
    """Answer `question` from `sections` (section id -> text) with verified quotes.

    The reply is a `GroundedAnswer` as JSON constrained by its schema and validated by
    pydantic; an invalid or cut-off reply is retried once (`lib.structured.ask_structured`).
    Quotes are then checked against `sections` with `verify_answer` (elisions allowed with
    gaps up to `max_gap` characters). `top_logprobs` is passed to the model, for lessons
    that read token probabilities of the answer.
    """
    messages = grounding_messages(question, sections)
    result = ask_structured(llm, messages, GroundedAnswer, max_tokens=max_tokens, top_logprobs=top_logprobs)
    verdicts: Sequence[QuoteVerdict] = ()
    if result.value is not None:
        verdicts = verify_answer(result.value, dict(sections), max_gap=max_gap)
    return GroundingResult(result.value, result.completions, result.errors, question=question, verdicts=tuple(verdicts))


_ANSWER_KEY = re.compile(r'"answer"\s*:\s*"')


def answer_field_logprobs(completion: Completion) -> list[float]:
    """The log-probabilities of the tokens that wrote the value of the "answer" field in a JSON reply.

    A grounded reply is JSON (`{"answer": "...", "quotes": [...]}`); the quotes are copied
    from the sections and so are nearly certain, and the keys and punctuation are forced by
    the schema, so only the answer's own tokens say how sure the model was of what it
    answered. A token counts when it overlaps the answer's characters. Returns [] when
    the completion carries no tokens (a backend or a saved reply without log-probabilities),
    when the tokens do not spell the text, or when the reply has no answer string.
    """
    if not completion.tokens or "".join(t.token for t in completion.tokens) != completion.text:
        return []
    key = _ANSWER_KEY.search(completion.text)
    if key is None:
        return []
    start = key.end()
    try:
        _, end = json.decoder.scanstring(completion.text, start)  # end is just past the closing quote
    except ValueError:
        return []
    logprobs, position = [], 0
    for token in completion.tokens:
        token_end = position + len(token.token)
        if position < end - 1 and token_end > start:
            logprobs.append(token.logprob)
        position = token_end
    return logprobs
