"""Citations the model writes itself: a marker after each claim, each checked against the section it names.

`lib.citations` renders [1], [2] after a grounded answer from its quotes: the model never
writes a marker. Here it does. The sections are shown numbered [1], [2], ... in the order
they were retrieved (`lib.citations.number_sections`), and the model replies with a
`ClaimedAnswer` as JSON under its schema (`lib.structured.ask_structured`): a list of
claims, each a sentence of the answer, the number of the section it takes the sentence
from (null when it takes it from none) and a quote copied from that section.

The schema enforces the format (one number or null per claim); code checks the rest
(`check_claims`). A claim's marker is

- **valid** when its number names a section that was shown and its quote verifies against
  *that* section (`lib.quotes.verify_answer`, through `lib.citations.cite`: exact,
  normalised or elided, never merely found in another section);
- **invalid** when the number names no section shown, or the quote is empty or not in the
  section it names;
- **missing** when the claim has no number (the model says it took it from no section).

The checker is a verified quote, nothing more: it proves that the cited section holds the
quoted words, not that the words say what the sentence says. A claim that paraphrases its
quote wrongly passes; what the sentence adds beyond its quote is not checked.

Hand-over rule (`ModelCitedAnswer.handed_over`): an answer is handed over when the model
gave no valid reply, when it made no claim, when any marker is invalid, or when any claim
lacks a marker. Only an answer whose every sentence carries a valid marker would be shown.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

from lib.citations import Citation, cite, source_lines, strip_markers
from lib.grounding import grounding_messages
from lib.backends.protocol import LLM, Message
from lib.quotes import GroundedAnswer, Quote, verify_answer
from lib.structured import StructuredResult, ask_structured

__all__ = [
    "MODEL_CITATION_SYSTEM_PROMPT", "MODEL_CITATION_MAX_TOKENS", "MAX_CLAIMS", "Claim", "ClaimedAnswer",
    "ClaimVerdict", "ModelCitedAnswer", "model_citation_messages", "check_claims", "model_cited_answer",
]

MODEL_CITATION_SYSTEM_PROMPT = (
    "You answer questions about the Quillmere Institute of Technology using ONLY the numbered "
    "sections given to you. Reply with JSON: \"claims\", a list of the sentences of a short answer. "
    "For each sentence give \"source\", the number of the section it comes from, and \"quote\", "
    "words copied exactly from that section that support it. If no section supports a sentence, "
    "give source null and quote \"\"."
)
"""The instructions for an answer whose claims carry their own section numbers (chosen on dev questions)."""

MODEL_CITATION_MAX_TOKENS = 300
"""Budget of one answer (retried once with twice as many if cut off, by `ask_structured`)."""

MAX_CLAIMS = 4
"""Most claims an answer may make: the schema allows no more, so a short answer stays short."""


class Claim(BaseModel):
    """One sentence of an answer, the section it comes from, and the words of that section that support it."""

    sentence: str = Field(description="One sentence of the answer.")
    source: int | None = Field(description="The number of the section the sentence comes from, or null.")
    quote: str = Field(description="Words copied exactly from that section; empty when source is null.")


class ClaimedAnswer(BaseModel):
    """An answer as a list of claims, each with its own section number."""

    claims: list[Claim] = Field(max_length=MAX_CLAIMS, description="The sentences of the answer, in order.")


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim and the check of its marker.

    `citation` is None when the claim has no marker (source null); otherwise a
    `lib.citations.Citation` whose `problem` says why the marker is invalid ("" when valid).
    """

    claim: Claim
    citation: Citation | None

    @property
    def marked(self) -> bool:
        """True when the claim names a section."""
        return self.citation is not None

    @property
    def valid(self) -> bool:
        """True when the claim's marker names a section shown and its quote verifies there."""
        return self.citation is not None and self.citation.valid

    @property
    def marker(self) -> str:
        """"[n]" as the model wrote it, or "" when the claim has no marker."""
        return f"[{self.claim.source}]" if self.citation is not None else ""


@dataclass(frozen=True)
class ModelCitedAnswer(StructuredResult[ClaimedAnswer]):
    """A model-cited answer (`value`, None when no reply validated), its question and the verdict on each claim."""

    question: str
    shown: tuple[str, ...]
    verdicts: tuple[ClaimVerdict, ...]

    @property
    def n_claims(self) -> int:
        """How many claims the answer makes."""
        return len(self.verdicts)

    @property
    def n_valid(self) -> int:
        """Claims whose marker names a shown section that holds their quote."""
        return sum(v.valid for v in self.verdicts)

    @property
    def n_invalid(self) -> int:
        """Claims whose marker names no shown section, or a section that does not hold their quote."""
        return sum(v.marked and not v.valid for v in self.verdicts)

    @property
    def n_unmarked(self) -> int:
        """Claims without a marker."""
        return sum(not v.marked for v in self.verdicts)

    @property
    def handed_over(self) -> bool:
        """True unless the reply is valid, makes a claim, and every claim carries a valid marker."""
        return not self.ok or self.n_claims == 0 or self.n_valid < self.n_claims

    @property
    def problems(self) -> list[str]:
        """One line per claim whose marker is invalid or missing: its position (from 1) and why."""
        return [f"claim {i}: " + ("no marker" if v.citation is None else f"{v.marker} {v.citation.problem}")
                for i, v in enumerate(self.verdicts, start=1) if not v.valid]

    def render(self, width: int = 80) -> str:
        """The sentences, each followed by its marker as written, then one line per cited section with its quote.

        Markers and banners written inside a sentence are removed (`lib.citations.strip_markers`): the
        only markers shown are the claims' checked `source` numbers.
        """
        text = " ".join(f"{strip_markers(v.claim.sentence)} {v.marker}".rstrip() for v in self.verdicts)
        return "\n".join([text, *source_lines([v.citation for v in self.verdicts if v.citation is not None], width)])


def model_citation_messages(question: str, sections: Mapping[str, str]) -> list[Message]:
    """The chat messages: the instructions, then the sections as "[n]" and their text, then the question.

    `lib.grounding.grounding_messages` with these instructions and the sections numbered by their
    order (as `number_sections` numbers them); their ids are not shown, so a marker can only be a
    number. Content goes through the chat path, which keeps question and section text from
    becoming control tokens (`lib.backends.protocol.neutralise_template_tokens`).
    """
    return grounding_messages(question, sections, system=MODEL_CITATION_SYSTEM_PROMPT, numbered=True)


def check_claims(answer: ClaimedAnswer, sections: Mapping[str, str], *, max_gap: int = 400) -> tuple[ClaimVerdict, ...]:
    """Check each claim's marker against the sections shown (section id -> text, in the order shown).

    A claim with a number in 1..len(sections) has its quote verified against the section of that
    number, and only that one, with `lib.quotes.verify_answer` (elisions allowed with gaps up to
    `max_gap` characters) and numbered by `lib.citations.cite`; a number outside that range is
    invalid without a search. One `ClaimVerdict` per claim, in the answer's order.
    """
    shown = list(sections)
    verdicts = []
    for claim in answer.claims:
        if claim.source is None:
            verdicts.append(ClaimVerdict(claim, None))
        elif not 1 <= claim.source <= len(shown):
            problem = f"names no section shown (sections 1 to {len(shown)} were shown)"
            verdicts.append(ClaimVerdict(claim, Citation(claim.source, None, claim.quote, None, problem)))
        else:
            section_id = shown[claim.source - 1]
            quoted = GroundedAnswer(answer=claim.sentence, quotes=[Quote(text=claim.quote, section_id=section_id)])
            (citation,) = cite(claim.sentence, verify_answer(quoted, sections, max_gap=max_gap), shown).citations
            verdicts.append(ClaimVerdict(claim, citation))
    return tuple(verdicts)


def model_cited_answer(llm: LLM, question: str, sections: Mapping[str, str], *,
                       max_tokens: int = MODEL_CITATION_MAX_TOKENS) -> ModelCitedAnswer:
    """Ask `llm` to answer `question` from `sections` (section id -> text, in the order shown) with its own markers.

    The reply is a `ClaimedAnswer` as JSON under its schema, validated and retried once by
    `lib.structured.ask_structured`; each claim is then checked by `check_claims`. No reply
    that validates gives an answer with no claims, handed over.
    """
    messages = model_citation_messages(question, sections)
    result = ask_structured(llm, messages, ClaimedAnswer, max_tokens=max_tokens)
    verdicts = check_claims(result.value, sections) if result.value is not None else ()
    return ModelCitedAnswer(result.value, result.completions, result.errors, question=question,
                            shown=tuple(sections), verdicts=verdicts)
