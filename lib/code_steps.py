"""Reading a group probability and an intent probability off a constrained code reply.

A grammar from `lib.grammar.gbnf_for_codes` makes the model write a code such as "C-F".
The grammar fixes the characters, not the tokens: this model's tokenizer has a token
"-F", so the same code can come out as two tokens ['C', '-F'] or as three ['C', '-', 'F'].
Where the intent is decided depends on that spelling:

- two tokens: the intent is chosen at step 2, among candidates "-A", "-B", ...;
- three tokens: step 2 only writes "-" and the intent is chosen at step 3, among "A", "B", ...

Reading step 2 of a three-token reply gives P("-") (close to 1 after the mask, and
meaningless); reading step 3 of a two-token reply reads nothing. `read_code` looks at
which tokens were generated and reads each probability at the step that decided it.

The top candidates a backend reports are taken *before* the grammar mask, so they
include tokens the grammar forbade; `read_code` keeps only the allowed ones, renormalises
(`lib.logprobs.renormalize`) and reports the rest as off-label mass. It follows the
library's one rule for spellings: a candidate with surrounding whitespace (" D") counts as
the answer it spells ("D"), as everywhere in `lib` (see `renormalize` for why).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lib.backends.protocol import TokenLogprob
from lib.logprobs import renormalize

__all__ = [
    "CodeReading", "read_code",
]


@dataclass(frozen=True)
class CodeReading:
    """What a constrained code reply says about the model's confidence.

    code: the code generated, e.g. "C-F".
    spelling: the generated tokens, e.g. ("C", "-F") or ("C", "-", "F").
    intent_step: 1-based step at which the intent letter was chosen (2 or 3).
    group_probabilities: group letter -> probability, over the allowed group letters among
        step 1's candidates (renormalised).
    intent_probabilities: intent letter -> probability within the chosen group, over the
        allowed continuations among the intent step's candidates (renormalised).
    group_off_label, intent_off_label: probability the model gave, at those steps, to
        top candidates the grammar forbade.
    """

    code: str
    spelling: tuple[str, ...]
    intent_step: int
    group_probabilities: dict[str, float]
    intent_probabilities: dict[str, float]
    group_off_label: float
    intent_off_label: float

    @property
    def p_group(self) -> float:
        """P(chosen group); 0.0 when the chosen letter is missing from the candidates."""
        return self.group_probabilities.get(self.code[0], 0.0)

    @property
    def p_intent(self) -> float:
        """P(chosen intent | chosen group); 0.0 when missing from the candidates."""
        return self.intent_probabilities.get(self.code[-1], 0.0)

    @property
    def confidence(self) -> float:
        """P(group) x P(intent | group): the probability of the whole code."""
        return self.p_group * self.p_intent


def read_code(tokens: Sequence[TokenLogprob], codes: Iterable[str]) -> CodeReading:
    """Read P(group) at step 1 and P(intent | group) at the step that wrote the intent letter.

    tokens: the generated tokens of a reply constrained to `codes` (a `Completion.tokens`
    generated with `top_logprobs` > 0). codes: the valid codes, "A-A", "C-F", ...

    The reply must be spelled with the group letter alone as its first token (the only
    spellings this model's tokenizer can produce: "C" then "-F", or "C" then "-" then
    "F"); anything else raises ValueError saying what was generated.
    """
    code_list = sorted(set(codes))
    spelling = tuple(step.token for step in tokens)
    code = "".join(spelling)
    if code not in code_list:
        raise ValueError(f"the reply {code!r} (tokens {list(spelling)}) is not one of the codes")
    if spelling[0] != code[0] or "".join(spelling[:-1]) not in (code[0], code[:2]):
        raise ValueError(f"expected the spelling [group, '-letter'] or [group, '-', letter], got {list(spelling)}")
    if not all(step.top for step in tokens):
        raise ValueError("the tokens carry no top candidates; generate with top_logprobs > 0")
    groups = sorted({c[0] for c in code_list})
    group_probabilities, group_off_label = renormalize(list(tokens[0].top), groups)
    written = "".join(spelling[:-1])  # "C" or "C-": what came before the intent step
    continuations = {c[len(written):]: c[-1] for c in code_list if c.startswith(written)}
    by_continuation, intent_off_label = renormalize(list(tokens[-1].top), continuations)
    intent_probabilities = {continuations[token]: p for token, p in by_continuation.items()}
    return CodeReading(code, spelling, len(spelling), group_probabilities, intent_probabilities,
                       group_off_label, intent_off_label)
