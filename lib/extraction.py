"""Reading a committee out of a student's message with the model, and scoring what it read.

The rules themselves live in `lib.rules`; this module is the model's side of notebook 04.
`extract_committee` asks for every field of every member in one JSON reply;
`extract_committee_by_questions` asks for the names, then three short questions per member:
the role and the position from a closed list, the department by its name (the small model's
one-reply extraction marks too many advisors). With `quote_evidence` a question starts with the sentences of the message that name
the member (`evidence_for`, cut out by code, so the quote is true by construction): before every
question, or only when the plain answer's probability (`answer_probability`) is low.
`compare_extraction` scores an extraction against gold facts field by field, after matching
names with `normalized_name`; `plain_committee_verdict` is the baseline in which the model
judges the committee itself. The saved runs over the committee cases, dev and test, are
`lib.saved_runs.committees`'s.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from pydantic import BaseModel, Field

from lib.backends.protocol import Completion, LLM
from lib.grammar import gbnf_for_options, gbnf_for_options_or_name
from lib.rules import CommitteeMember, department_key, validated_home_key, validated_members
from lib.structured import StructuredResult, ask_structured

__all__ = [
    "CommitteeExtraction", "EXTRACTION_SYSTEM_PROMPT", "ExtractionResult", "extraction_messages",
    "extract_committee", "QUESTIONS_SYSTEM_PROMPT", "ROLES", "POSITIONS", "NO_DEPARTMENT", "NAMES_REQUEST",
    "ROLE_QUESTION", "POSITION_QUESTION", "DEPARTMENT_QUESTION", "EVIDENCE_INTRO", "EvidencePolicy",
    "EVIDENCE_POLICIES", "UNSURE_BELOW", "message_sentences", "evidence_for", "CommitteeNames", "member_questions",
    "department_grammar", "department_answer", "answer_probability", "extract_committee_by_questions",
    "MEMBER_FIELDS", "normalized_name", "ExtractionComparison", "compare_extraction", "PLAIN_JUDGE_PROMPT",
    "plain_committee_verdict",
]

class CommitteeExtraction(BaseModel):
    """What the model fills in from a student's message: one record per committee member."""

    members: list[CommitteeMember] = Field(description="Every committee member named in the text, advisors included.")


EXTRACTION_SYSTEM_PROMPT = (
    "You read a PhD student's message about their thesis committee and extract facts, nothing else. "
    "Reply with a JSON object {\"members\": [...]} holding one record per committee member named in "
    "the message, the advisor or co-advisors included. Use only what the message says. Fields:\n"
    + "\n".join(f"- {name}: {field.description}" for name, field in CommitteeMember.model_fields.items())
)
"""The instructions for extracting committee facts (field meanings come from `CommitteeMember`)."""


@dataclass(frozen=True)
class ExtractionResult(StructuredResult[CommitteeExtraction]):
    """The committee extraction as `ask_structured` returned it, read as a list of members.

    `members` is None when no valid extraction came back in two attempts (`errors` says
    why); the committee is then *not* checked, because a guessed record would let a
    misread decide the verdict.
    """

    @property
    def members(self) -> list[CommitteeMember] | None:
        """The extracted members, in the order the model gave them, or None."""
        return None if self.value is None else list(self.value.members)


def extraction_messages(description: str, home_department: str) -> list[dict[str, str]]:
    """The chat messages asking for `CommitteeExtraction` from a free-text committee description."""
    if not isinstance(description, str) or not description.strip():
        raise ValueError("description must be a non-empty string")
    validated_home_key(home_department)
    user = (f"The student's home department is {home_department.strip()}.\n\n"
            f"Message:\n{description.strip()}")
    return [{"role": "system", "content": EXTRACTION_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def extract_committee(llm: LLM, description: str, home_department: str, *, max_tokens: int = 600) -> ExtractionResult:
    """Let the model read a committee description into `CommitteeMember` records.

    The reply is JSON constrained by the schema of `CommitteeExtraction`, validated by
    pydantic, and retried once when invalid or cut off (`lib.structured.ask_structured`);
    after that it is an extraction failure. The model only extracts: deciding whether the
    committee is valid is `check_committee`'s job.
    """
    messages = extraction_messages(description, home_department)
    result = ask_structured(llm, messages, CommitteeExtraction, max_tokens=max_tokens)
    return ExtractionResult(result.value, result.completions, result.errors)


QUESTIONS_SYSTEM_PROMPT = (
    "You answer questions about a PhD student's message to the graduate office about their thesis "
    "committee. Use only what the message says; answer with exactly one of the options you are given."
)
"""The instructions for extraction one question at a time; the message follows them (see `extract_committee_by_questions`)."""

ROLES: tuple[str, ...] = ("advisor", "co-advisor", "committee member")
"""The answers to the role question; a member is an advisor when the answer is advisor or co-advisor."""

POSITIONS: dict[str, tuple[bool, bool]] = {
    "tenured professor": (True, True),
    "emeritus professor": (True, True),
    "professor, tenure not stated": (True, False),
    "assistant professor": (True, False),
    "lecturer": (True, False),
    "postdoc": (False, False),
    "student": (False, False),
    "research scientist at a company": (False, False),
}
"""The answers to the position question -> (holds a faculty appointment, tenured or emeritus)."""

NO_DEPARTMENT = "not at the university"
"""The answer to the department question for a member with no department at the university."""

NAMES_REQUEST = (
    "List every person the message names as a member of the committee, advisors included, once each. "
    "Write each name as given, without titles such as Professor, Dr. or Emerita."
)
ROLE_QUESTION = "What role does the message give {name}? Answer with one of: {options}."
POSITION_QUESTION = "What is {name}'s position, according to the message? Answer with one of: {options}."
DEPARTMENT_QUESTION = ("What is the primary department of {name}, according to the message? Answer with the name of "
                       "the department (for example Physics for a physicist), or with \"{none}\".")
"""The department question is open: a closed list of departments pushes a member of any department
it lacks (a chemist, an economist) into the nearest listed one, where the checker counts them wrongly."""


EVIDENCE_INTRO = 'The message says about {name}: "{evidence}"'
"""Put before each question when extraction quotes the evidence first: the sentences that name the member."""

EvidencePolicy = Literal["never", "always", "when unsure"]
EVIDENCE_POLICIES: tuple[str, ...] = get_args(EvidencePolicy)
"""When `extract_committee_by_questions` quotes the evidence before a question."""

UNSURE_BELOW = 0.9
"""With `quote_evidence="when unsure"`, an answer whose `answer_probability` is below this is asked
again with the quote. Chosen while working on the ten dev committee cases; the held-out test cases
(`split` "test" in committee_cases.jsonl) check it."""

_ABBREVIATIONS = ("Dr.", "Prof.", "Mr.", "Mrs.", "Ms.", "St.", "e.g.", "i.e.")


def message_sentences(text: str) -> list[str]:
    """The sentences of `text`, split after `.`, `!` or `?` followed by a space, except after a
    title such as "Dr." (so "Dr. Kavya Iyer" stays in one sentence); whitespace runs become one space."""
    words, sentences, current = " ".join(text.split()).split(" "), [], []
    for word in words:
        current.append(word)
        if word.endswith((".", "!", "?")) and word not in _ABBREVIATIONS:
            sentences.append(" ".join(current))
            current = []
    if current and current != [""]:
        sentences.append(" ".join(current))
    return sentences


def evidence_for(name: str, description: str) -> str | None:
    """The sentences of `description` that name `name` (matched as `normalized_name` matches names),
    joined by a space, or None when no sentence names them.

    The evidence is cut from the message by code, so it is a true quote by construction; the
    model only reads it, right before the question it answers.
    """
    key = normalized_name(name)
    if not key:
        return None
    found = [sentence for sentence in message_sentences(description) if key in " ".join(sentence.split()).casefold()]
    return " ".join(found) or None


class CommitteeNames(BaseModel):
    """Step 1 of extraction one question at a time: who is on the committee."""

    names: list[str] = Field(description="The full name of every committee member, without titles, e.g. 'Elena Petrova'.")


def _question_messages(description: str, question: str) -> list[dict[str, str]]:
    """The message in the system turn (a prefix shared by every question, so cached) and the question last."""
    return [{"role": "system", "content": f"{QUESTIONS_SYSTEM_PROMPT}\n\nMessage:\n{description.strip()}"},
            {"role": "user", "content": question}]


def member_questions(name: str, evidence: str | None = None) -> dict[str, tuple[str, list[str]]]:
    """The three questions asked about one member: topic -> (question, the fixed answers allowed).

    The department question also allows any department's name (`department_grammar`).
    With `evidence` (see `evidence_for`), each question starts with that quote (`EVIDENCE_INTRO`).
    """
    intro = "" if evidence is None else EVIDENCE_INTRO.format(name=name, evidence=evidence) + "\n"
    return {
        "role": (intro + ROLE_QUESTION.format(name=name, options=", ".join(ROLES)), list(ROLES)),
        "position": (intro + POSITION_QUESTION.format(name=name, options="; ".join(POSITIONS)), list(POSITIONS)),
        "department": (intro + DEPARTMENT_QUESTION.format(name=name, none=NO_DEPARTMENT), [NO_DEPARTMENT]),
    }


def department_grammar() -> str:
    """The grammar of a reply to the department question: `NO_DEPARTMENT`, or a department's name of
    one to four words starting with a capital ("Chemistry", "Electrical Engineering")."""
    return gbnf_for_options_or_name([NO_DEPARTMENT])


def department_answer(reply: str) -> str | None:
    """The primary department a reply to the department question names, or None for `NO_DEPARTMENT`."""
    text = reply.strip()
    return None if text == NO_DEPARTMENT else text


def answer_probability(completion: Completion) -> float:
    """The probability the model gave its whole answer: the product of its tokens' probabilities.

    Each token's probability is read from the model's full distribution, before a grammar
    removed the tokens it forbids, so mass the model put on other words lowers it.
    """
    return math.exp(sum(completion.token_logprobs))


def extract_committee_by_questions(llm: LLM, description: str, *,
                                   quote_evidence: EvidencePolicy = "never") -> ExtractionResult:
    """Extract the committee in small steps, each answer chosen from a closed list.

    1. The names (JSON constrained by `CommitteeNames`; validated, retried once by `ask_structured`).
    2. Per member, three questions whose replies a grammar restricts to fixed options: the role
       (`ROLES`), the position (`POSITIONS`: the faculty appointment and tenure follow from it),
       and the primary department, open: any department's name, or `NO_DEPARTMENT` (a closed list
       of departments pushed "a tenured chemist" into the nearest listed department).

    A small model answers one focused question with named options far more reliably than it
    fills five fields for five people in one reply (and than it answers yes/no questions,
    where it leans to "yes").

    With `quote_evidence="always"`, every question about a member starts with the sentences
    of the message that name them (`evidence_for`, cut out by code, so always a true quote):
    the model reads the words about this person right before it answers, instead of drifting
    to a department or role that another sentence mentions; but a long sentence that names
    several people can pull it to a neighbour's department. With `"when unsure"`, a question
    is asked plainly first, and only an answer whose `answer_probability` is below
    `UNSURE_BELOW` is asked again with the quote; the more probable of the two answers is
    kept. A member whose name no sentence contains is only asked the plain questions.

    Args:
        llm: the model (anything with `chat`).
        description: the student's message.
        quote_evidence: when to start a question with the sentences that name the member:
            "never", "always", or "when unsure" (re-ask an answer below `UNSURE_BELOW`).

    Returns:
        An `ExtractionResult` like `extract_committee`'s, holding every completion in order;
        `members` is None when the names could not be read.
    """
    if not isinstance(description, str) or not description.strip():
        raise ValueError("description must be a non-empty string")
    if quote_evidence not in EVIDENCE_POLICIES:
        raise ValueError(f"quote_evidence must be one of {EVIDENCE_POLICIES}, got {quote_evidence!r}")
    names_reply = ask_structured(llm, _question_messages(description, NAMES_REQUEST), CommitteeNames, max_tokens=160)
    completions = list(names_reply.completions)
    if names_reply.value is None:
        return ExtractionResult(None, tuple(completions), names_reply.errors)
    names: dict[str, str] = {}
    for name in names_reply.value.names:
        if name.strip() and normalized_name(name) not in names:
            names[normalized_name(name)] = name.strip()
    members = []
    for name in names.values():
        answers: dict[str, str] = {}
        evidence = None if quote_evidence == "never" else evidence_for(name, description)
        plain = member_questions(name)
        quoted = member_questions(name, evidence) if evidence is not None else plain
        for topic, (question, options) in (quoted if quote_evidence == "always" else plain).items():
            grammar = department_grammar() if topic == "department" else gbnf_for_options(options)
            reply = llm.chat(_question_messages(description, question), max_tokens=16, grammar=grammar)
            completions.append(reply)
            if quote_evidence == "when unsure" and evidence is not None and answer_probability(reply) < UNSURE_BELOW:
                second = llm.chat(_question_messages(description, quoted[topic][0]), max_tokens=16, grammar=grammar)
                completions.append(second)
                reply = max(reply, second, key=answer_probability)
            answers[topic] = reply.text.strip()
        faculty, tenured = POSITIONS[answers["position"]]
        members.append(CommitteeMember(
            name=name, is_advisor=answers["role"] != "committee member", has_faculty_appointment=faculty,
            primary_department=department_answer(answers["department"]),
            is_tenured_or_emeritus=tenured))
    return ExtractionResult(CommitteeExtraction(members=members), tuple(completions), names_reply.errors)


_TITLES = frozenset({"professor", "prof.", "prof", "dr.", "dr", "emeritus", "emerita", "mr.", "mrs.", "ms."})

MEMBER_FIELDS: tuple[str, ...] = ("is_advisor", "has_faculty_appointment", "primary_department",
                                  "is_tenured_or_emeritus")
"""The fields of `CommitteeMember` that the rules read, compared one by one by `compare_extraction`."""


def normalized_name(name: str) -> str:
    """A name for matching people: leading titles dropped, whitespace runs made one space, case-folded.

    'Professor Emerita Grace  Lindqvist' and 'grace lindqvist' give the same key, so a
    kept title is not scored as one missing and one extra member.
    """
    words = name.split()
    while words and words[0].casefold() in _TITLES:
        words = words[1:]
    return " ".join(words).casefold()


@dataclass(frozen=True)
class ExtractionComparison:
    """An extraction compared with the gold members, field by field.

    Members are matched by `normalized_name`. Each matched member contributes its four
    `MEMBER_FIELDS`; a missing or extra member contributes four wrong fields.
    `differences` has one readable line per missing member, extra member and wrong field.
    """

    differences: list[str]
    fields_right: int
    fields_total: int

    @property
    def accuracy(self) -> float:
        """Share of fields right (1.0 for two empty committees)."""
        return self.fields_right / self.fields_total if self.fields_total else 1.0


def compare_extraction(extracted: Sequence[CommitteeMember], gold: Sequence[CommitteeMember]) -> ExtractionComparison:
    """Compare an extraction with the gold members, member by member and field by field.

    Departments are compared as the rules compare them (see `check_committee`), names after
    `normalized_name`. `differences == []` means every fact the rules use is right.
    """
    extracted = validated_members(extracted, "extracted")
    gold = validated_members(gold, "gold")
    found = {normalized_name(member.name): member for member in extracted}
    expected = {normalized_name(member.name): member for member in gold}
    differences = [f"missing member {member.name!r}" for member in gold if normalized_name(member.name) not in found]
    extra = [member for member in extracted if normalized_name(member.name) not in expected]
    differences += [f"extra member {member.name!r}" for member in extra]
    right = 0
    for name, truth in expected.items():
        if name not in found:
            continue
        got = found[name]
        for field in MEMBER_FIELDS:
            same = (department_key(got.primary_department) == department_key(truth.primary_department)
                    if field == "primary_department" else getattr(got, field) == getattr(truth, field))
            right += same
            if not same:
                differences.append(f"{truth.name}: {field} is {getattr(got, field)!r}, should be {getattr(truth, field)!r}")
    return ExtractionComparison(differences, right, len(MEMBER_FIELDS) * (len(expected) + len(extra)))


PLAIN_JUDGE_PROMPT = (
    "You check thesis committees against the rules below. Answer with yes if the proposed committee "
    "satisfies every rule, and no otherwise.\n\nRules:\n{rules}"
)
"""The instructions for the baseline: the model reads the rules and judges the committee itself."""


def plain_committee_verdict(llm: LLM, rules_text: str, description: str) -> tuple[bool, Completion]:
    """The baseline that extraction + checking replaces: the model reads the rules and says yes or no.

    The reply is constrained to "yes" or "no" by a grammar, so it is always readable; the
    model decides alone. Returns (True for "yes", the completion).
    """
    if not isinstance(rules_text, str) or not rules_text.strip():
        raise ValueError("rules_text must be the non-empty text of the committee rules")
    if not isinstance(description, str) or not description.strip():
        raise ValueError("description must be a non-empty string")
    messages = [
        {"role": "system", "content": PLAIN_JUDGE_PROMPT.format(rules=rules_text.strip())},
        {"role": "user", "content": f"Proposed committee:\n{description.strip()}\n\n"
                                    "Does this committee satisfy every rule? Answer yes or no."},
    ]
    completion = llm.chat(messages, max_tokens=2, grammar=gbnf_for_options(["yes", "no"]))
    return completion.text.strip() == "yes", completion
