"""A labelled fallback answer: a general answer behind a banner when the handbook is silent; a rule for invented policy.

The assistant declines a question the handbook does not answer (HAND_OVER). The original
design answers it instead, from general knowledge, under a banner that says it is not from
the handbook (`lib.citations.GENERAL_ANSWER_BANNER`). `fallback_answer` does that: the model
is told there is no handbook section and that it must answer generally, and no section is
shown. The risk is a general answer that reads like Quillmere's policy: "students must file
form G-7 within 30 days" when the handbook has no such form or deadline.

`invented_policy_sentences` is the rule that flags it, sentence by sentence. A sentence states
a policy as fact when any of these holds:

1. it holds a **specific** and neither **general framing** nor **advice**: "typically 6 months"
   and "likely an HP LaserJet" are still a figure and a name a student will act on, while
   "fees vary from 500 to 5,000 at most universities" and "ask the Housing Office" are not;
2. it holds an **obligation** and no **hedge**;
3. it grants a **permission**: it opens with "You", "Students", "Graduate students", "PhD
   students", "Employees" or "Staff", then "can", "may", "are allowed to" or "are permitted
   to", then anything but an advice verb ("Graduate students can use the 3D printer if ...");
4. it opens with "Yes" or "No": a verdict on the question the handbook does not give;
5. it names Quillmere ("Quillmere", "QIT", "the Institute") and holds a specific, whatever
   else it says: "Quillmere typically charges 5,000" is a figure the handbook does not give.

A **specific** is a digit (not the number of a numbered list item), a money sign or "%", a
number word from two to twelve, "thirty", "sixty" or "ninety", a named office or form (a
capitalised word followed by "Office", "Form", "Committee", "Board", "Center"/"Centre",
"Department" or "Services", or "Office of"), or a deadline ("deadline", "within", "by the end
of", "no later than"). **General framing** is "vary", "varies", "varying", "differ(s)",
"depend(s/ing/ent)", "universities", "institutions", "schools", "colleges", "many", "most",
"some" or "each": the sentence is about universities in general. **Advice** is an advice verb:
"ask", "contact", "consult", "check", "confirm", "speak", "talk", "email", "visit", "reach",
"find" or "look". An **obligation** is "must", "required", "requires", "is/are not allowed",
"not permitted", "prohibited", "entitled", "eligible", "will be charged", "will be reimbursed"
or "covers the"; a **hedge** is general framing, advice, or "may", "might", "could", "can",
"typically", "usually", "often", "generally", "commonly" or "likely". Case is ignored except
in names and in the openings of 3 and 4. The banner is not part of the text the rule reads.
An answer is flagged when any of its sentences is (`states_invented_policy`).

The rule is a heuristic; the saved fallback answers are also labelled by hand
(data/corpus/fallback_labels.jsonl, labels `FALLBACK_LABELS`) to measure how often it agrees.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lib.citations import GENERAL_ANSWER_BANNER, strip_markers
from lib.backends.protocol import Completion, LLM, Message

__all__ = [
    "FALLBACK_SYSTEM_PROMPT", "FALLBACK_MAX_TOKENS", "FALLBACK_LABELS", "FallbackAnswer", "fallback_messages",
    "fallback_answer", "invented_policy_sentences", "states_invented_policy",
]

FALLBACK_SYSTEM_PROMPT = (
    "You help students of the Quillmere Institute of Technology. Its handbook says nothing on "
    "this question, so you do not know Quillmere's rule. In two or three sentences, say what such "
    "rules usually depend on at universities and which office the student could ask. Give no "
    "number, amount, date or yes-or-no answer."
)
"""The instructions for a general answer when the handbook is silent (chosen on dev questions)."""

FALLBACK_MAX_TOKENS = 120
"""Budget of one fallback answer: two or three sentences."""

FALLBACK_LABELS: tuple[str, ...] = ("invented_policy", "generic", "declined")
"""Hand labels of a fallback answer: it states a Quillmere policy the handbook does not have as
fact; it gives general advice only; it gives no advice at all (says it cannot answer)."""

_NUMBER_WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve", "thirty", "sixty", "ninety")
_SPECIFIC = re.compile(
    r"\d|[$\u20ac\u00a3%]"
    r"|(?i:\b(?:" + "|".join(_NUMBER_WORDS) + r")\b|\bdeadlines?\b|\bwithin\b|\bby the end of\b|\bno later than\b)"
    r"|\b[A-Z][\w&'-]*\s+(?:Office|Form|Committee|Board|Center|Centre|Department|Services)\b|\bOffice of\b")
_LIST_NUMBER = re.compile(r"^\d+[.)]\s+")
_OBLIGATION = re.compile(
    r"\b(?:must|required|requires|(?:is|are) not allowed|not permitted|prohibited|entitled|eligible"
    r"|will be charged|will be reimbursed|covers the)\b", re.IGNORECASE)
_GENERAL = (r"vary|varies|varying|differs?|depends?|depending|dependent|universities|institutions|schools|colleges"
            r"|many|most|some|each")
_ADVICE = r"ask|contact|consult|check|confirm|speak|talk|email|visit|reach|find|look"
_GENERAL_OR_ADVICE = re.compile(rf"\b(?:{_GENERAL}|{_ADVICE})\b", re.IGNORECASE)
_HEDGE = re.compile(rf"\b(?:{_GENERAL}|{_ADVICE}|may|might|could|can|typically|usually|often|generally|commonly"
                    r"|likely)\b", re.IGNORECASE)
_PERMISSION = re.compile(
    r"^(?:You|Students|Graduate students|PhD students|Employees|Staff)\s+(?:can|may|are allowed to|are permitted to)"
    rf"\s+(?!(?:usually\s+|also\s+)?(?:{_ADVICE})\b)")
_VERDICT = re.compile(r"^(?:Yes|No)\b")
_QUILLMERE = re.compile(r"\bQuillmere\b|\bQIT\b|\bthe Institute\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(\[])|\n+")


@dataclass(frozen=True)
class FallbackAnswer:
    """A general answer to a question the handbook does not answer.

    `text` is what the model wrote; `reply` is what a student sees: the banner, then the text.
    `flagged` holds the sentences of `text` that the invented-policy rule flags.
    """

    question: str
    text: str
    completion: Completion
    flagged: tuple[str, ...]

    @property
    def reply(self) -> str:
        """`GENERAL_ANSWER_BANNER`, then the answer, without markers or banners the model wrote into it
        (`lib.citations.strip_markers`): a general answer must not look like a cited one."""
        return f"{GENERAL_ANSWER_BANNER} {strip_markers(self.text)}"

    @property
    def invented_policy(self) -> bool:
        """True when the rule flags a sentence (see `invented_policy_sentences`)."""
        return bool(self.flagged)


def fallback_messages(question: str) -> list[Message]:
    """The chat messages of a fallback answer: the instructions and the question, no section."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    return [{"role": "system", "content": FALLBACK_SYSTEM_PROMPT}, {"role": "user", "content": question.strip()}]


def fallback_answer(llm: LLM, question: str, *, max_tokens: int = FALLBACK_MAX_TOKENS) -> FallbackAnswer:
    """Answer `question` from general knowledge, behind the banner, with the rule's flag.

    Greedy, so the same question gets the same answer. The reply is plain text; the banner is
    added by code, never left to the model.
    """
    completion = llm.chat(fallback_messages(question), max_tokens=max_tokens, temperature=0.0)
    text = completion.text.strip()
    return FallbackAnswer(question, text, completion, tuple(invented_policy_sentences(text)))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text.removeprefix(GENERAL_ANSWER_BANNER)) if s.strip()]


def invented_policy_sentences(text: str) -> list[str]:
    """The sentences of a fallback answer that state a policy as fact (the rule of the module docstring).

    Sentences end at ".", "!" or "?" followed by a space and a capital (or a quote or bracket),
    or at a line break. Returns the flagged sentences, in order.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    flagged = []
    for sentence in _sentences(text):
        specific = bool(_SPECIFIC.search(_LIST_NUMBER.sub("", sentence)))
        if (specific and not _GENERAL_OR_ADVICE.search(sentence)
                or _OBLIGATION.search(sentence) and not _HEDGE.search(sentence)
                or _PERMISSION.search(sentence) or _VERDICT.search(sentence)
                or specific and _QUILLMERE.search(sentence)):
            flagged.append(sentence)
    return flagged


def states_invented_policy(text: str) -> bool:
    """True when the rule flags any sentence of `text` (`invented_policy_sentences`)."""
    return bool(invented_policy_sentences(text))
