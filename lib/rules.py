"""Thesis-committee rules, checked twice: in plain Python and with the Z3 solver.

An LLM is good at reading a student's email into structured facts (`CommitteeMember`)
and bad at counting against thresholds. So the model extracts, and code decides:
`check_committee` applies the five rules directly; `explain_committee` and
`z3_check_committee` ask Z3 which rules the facts violate; `synthesize_committee` asks
Z3 to *build* a committee that satisfies every rule from a pool of faculty.

Extraction comes in two forms: `extract_committee` asks for every field of every member
in one JSON reply; `extract_committee_by_questions` asks for the names, then three short
questions per member, each answered from a closed list (the small model's one-reply
extraction marks too many advisors). `compare_extraction` scores either against gold
facts field by field, and `run_committee_cases` / `load_committee_run` save and read a
run over the ten committee cases (setup/run_committees.py).

The five rules (names and thresholds in `RULES`) require enough advisors (who chair
the committee), members with a faculty appointment, outside members, faculty in the
home department, and tenured or emeritus members. Two details matter:

- an *outside member* has a primary department that differs from every advisor's; a
  member with no known department never counts, nor does anyone if an advisor's
  department is unknown or the committee has no advisor at all;
- a home-department member must hold a faculty appointment there (a postdoc does not count).

Names, descriptions and thresholds live in one table, `RULES`, that both
implementations read, so they cannot drift apart; the per-member tests are written twice
(Python and Z3) on purpose, and a property test checks that they agree.
Department names are compared case-insensitively, with any run of whitespace (a doubled
space, a no-break space) read as one space.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3
from pydantic import BaseModel, Field

from lib.llm import LLM, Completion
from lib.structured import StructuredResult, ask_structured


class CommitteeMember(BaseModel):
    """The facts about one committee member that the rules need."""

    name: str = Field(description="The member's full name without titles, e.g. 'Elena Petrova'.")
    is_advisor: bool = Field(
        description="True if this person is the student's advisor or co-advisor (advisors chair the committee)."
    )
    has_faculty_appointment: bool = Field(
        description="True if this person holds a faculty appointment at the university (professor of any rank, "
        "lecturer, emeritus). False for postdocs, students, industry researchers and faculty of other universities."
    )
    primary_department: str | None = Field(
        description="The university department of the person's primary appointment, e.g. 'Computer Science'; "
        "null if they have none at the university or the text does not say."
    )
    is_tenured_or_emeritus: bool = Field(
        description="True if the text says the person is tenured (e.g. a tenured associate or full professor) "
        "or emeritus/emerita; False otherwise."
    )


@dataclass(frozen=True)
class Rule:
    """One committee rule: at least `minimum` members must be `counted`."""

    name: str
    counted: str
    minimum: int

    @property
    def description(self) -> str:
        """The rule in words, e.g. 'at least 2 faculty members in the home department'."""
        return f"at least {self.minimum} {self.counted}"


RULES: tuple[Rule, ...] = (
    Rule("advisor", "advisors (who chair the committee)", 1),
    Rule("faculty", "members with a faculty appointment at the university", 4),
    Rule("outside-member", "members whose primary department differs from every advisor's", 1),
    Rule("home-department", "faculty members in the home department", 2),
    Rule("tenured", "tenured or emeritus members", 1),
)
"""The single source of rule names, wording and thresholds for every checker here."""

RULE_NAMES: tuple[str, ...] = tuple(rule.name for rule in RULES)
_NO_ADVISOR_NOTE = "cannot be satisfied without an advisor to compare against"


@dataclass(frozen=True)
class CommitteeCheck:
    """Per-rule verdicts on one committee.

    `satisfied` and `violations` hold one readable line per rule (rule name, count found,
    count needed); `violated_rules` holds just the names of the violated rules, in `RULES`
    order, and `counts` the number of qualifying members per rule name.
    """

    satisfied: list[str]
    violations: list[str]
    violated_rules: list[str]
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        """True when every rule holds."""
        return not self.violations


def _department_key(department: str | None) -> str | None:
    """Department name for comparison: every run of whitespace (tabs, no-break spaces, doubled
    spaces) made one space, ends stripped, case-folded; None when missing or blank."""
    if department is None or not department.strip():
        return None
    return " ".join(department.split()).casefold()


def _validated_members(members: Sequence[CommitteeMember], argument: str) -> list[CommitteeMember]:
    if isinstance(members, (str, bytes)) or not isinstance(members, Sequence):
        raise TypeError(f"{argument} must be a list of CommitteeMember, got {type(members).__name__}")
    for index, member in enumerate(members):
        if not isinstance(member, CommitteeMember):
            raise TypeError(f"{argument}[{index}] must be a CommitteeMember, got {type(member).__name__}")
    return list(members)


def _validated_home_key(home_department: str) -> str:
    if not isinstance(home_department, str):
        raise TypeError(f"home_department must be a str, got {type(home_department).__name__}")
    key = _department_key(home_department)
    if key is None:
        raise ValueError("home_department must name a department, got a blank string")
    return key


def _verdict_line(rule: Rule, found: int) -> str:
    return f"{rule.name} ({rule.counted}): found {found}, need at least {rule.minimum}"


def _build_check(counts: Mapping[str, int], violated: set[str]) -> CommitteeCheck:
    """Turn per-rule counts and the set of violated rule names into a `CommitteeCheck`."""
    satisfied, violations = [], []
    for rule in RULES:
        line = _verdict_line(rule, counts[rule.name])
        if rule.name not in violated:
            satisfied.append(line)
        elif rule.name == "outside-member" and counts["advisor"] == 0:
            violations.append(f"{line}; {_NO_ADVISOR_NOTE}")
        else:
            violations.append(line)
    return CommitteeCheck(
        satisfied=satisfied,
        violations=violations,
        violated_rules=[name for name in RULE_NAMES if name in violated],
        counts=dict(counts),
    )


def _python_counts(members: list[CommitteeMember], home_key: str) -> dict[str, int]:
    """How many members qualify for each rule, computed directly."""
    advisor_keys = [_department_key(m.primary_department) for m in members if m.is_advisor]

    def is_outside(member: CommitteeMember) -> bool:
        key = _department_key(member.primary_department)
        return bool(advisor_keys) and key is not None and all(a is not None and a != key for a in advisor_keys)

    def in_home(member: CommitteeMember) -> bool:
        return member.has_faculty_appointment and _department_key(member.primary_department) == home_key

    return {
        "advisor": len(advisor_keys),
        "faculty": sum(m.has_faculty_appointment for m in members),
        "outside-member": sum(map(is_outside, members)),
        "home-department": sum(map(in_home, members)),
        "tenured": sum(m.is_tenured_or_emeritus for m in members),
    }


def check_committee(members: Sequence[CommitteeMember], home_department: str) -> CommitteeCheck:
    """Check a committee against every rule in `RULES`, in plain Python.

    An empty committee is not an error: it simply violates every rule. A committee with
    no advisor violates "advisor", and "outside-member" cannot hold either (there is no
    advisor's department to differ from); the violation line says so.

    Raises:
        TypeError: if `members` is not a list of CommitteeMember or `home_department` not a str.
        ValueError: if `home_department` is empty or blank.
    """
    members = _validated_members(members, "members")
    counts = _python_counts(members, _validated_home_key(home_department))
    violated = {rule.name for rule in RULES if counts[rule.name] < rule.minimum}
    return _build_check(counts, violated)


@dataclass(frozen=True)
class _Z3Member:
    """One (possible) committee member as Z3 terms.

    `present` is True for a given committee and a choice variable when synthesising;
    `department` is an integer code (-1: no department), so equality is Z3 equality.
    """

    present: z3.BoolRef
    advisor: z3.BoolRef
    faculty: z3.BoolRef
    tenured: z3.BoolRef
    department: z3.ArithRef


_NO_DEPARTMENT = -1


def _department_codes(members: list[CommitteeMember], home_key: str) -> tuple[list[int], int]:
    """Integer codes for each member's department (-1 for none) and for the home department."""
    member_keys = [_department_key(m.primary_department) for m in members]
    known_keys = sorted({key for key in member_keys if key is not None} | {home_key})
    code_of: dict[str | None, int] = {key: code for code, key in enumerate(known_keys)}
    code_of[None] = _NO_DEPARTMENT
    return [code_of[key] for key in member_keys], code_of[home_key]


def _z3_counts(people: list[_Z3Member], home_code: int) -> dict[str, z3.ArithRef]:
    """Z3 terms counting, for each rule, the present members that qualify."""

    def count(conditions: list[z3.BoolRef]) -> z3.ArithRef:
        return z3.Sum([z3.If(condition, 1, 0) for condition in conditions]) if conditions else z3.IntVal(0)

    advisors = [z3.And(p.present, p.advisor) for p in people]
    any_advisor = z3.Or(advisors) if advisors else z3.BoolVal(False)

    def is_outside(person: _Z3Member) -> z3.BoolRef:
        differs_from_every_advisor = [
            z3.Implies(is_advisor, z3.And(other.department != _NO_DEPARTMENT, other.department != person.department))
            for other, is_advisor in zip(people, advisors)
        ]
        return z3.And(person.present, person.department != _NO_DEPARTMENT, any_advisor, *differs_from_every_advisor)

    return {
        "advisor": count(advisors),
        "faculty": count([z3.And(p.present, p.faculty) for p in people]),
        "outside-member": count([is_outside(p) for p in people]),
        "home-department": count([z3.And(p.present, p.faculty, p.department == home_code) for p in people]),
        "tenured": count([z3.And(p.present, p.tenured) for p in people]),
    }


def _rule_constraints(counts: Mapping[str, z3.ArithRef]) -> dict[str, z3.BoolRef]:
    return {rule.name: counts[rule.name] >= rule.minimum for rule in RULES}


def _committee_as_facts(members: list[CommitteeMember], home_key: str) -> tuple[list[z3.BoolRef], list[_Z3Member], int]:
    """Z3 variables for a fixed committee plus the constraints that pin them to the facts."""
    codes, home_code = _department_codes(members, home_key)
    people, facts = [], []
    for index, (member, code) in enumerate(zip(members, codes)):
        person = _Z3Member(
            present=z3.BoolVal(True),
            advisor=z3.Bool(f"advisor_{index}"),
            faculty=z3.Bool(f"faculty_{index}"),
            tenured=z3.Bool(f"tenured_{index}"),
            department=z3.Int(f"department_{index}"),
        )
        people.append(person)
        facts += [
            person.advisor == member.is_advisor,
            person.faculty == member.has_faculty_appointment,
            person.tenured == member.is_tenured_or_emeritus,
            person.department == code,
        ]
    return facts, people, home_code


def _z3_verdicts(members: list[CommitteeMember], home_key: str) -> tuple[dict[str, int], set[str]]:
    """Per-rule counts (from a model of the facts) and violated rule names (from unsat cores).

    The facts are added as plain constraints; each rule is added as a *tracked* assertion
    (`assert_and_track`) in its own push/pop scope. Because the facts fix every variable,
    the check is unsat exactly when that rule is violated, and the unsat core is then that
    rule's name. Checking all rules in one solver call would also be unsat, but its core
    need only name *one* violated rule, not all of them.
    """
    facts, people, home_code = _committee_as_facts(members, home_key)
    count_terms = _z3_counts(people, home_code)
    solver = z3.Solver()
    solver.add(facts)
    if solver.check() != z3.sat:  # facts pin every variable to one value, so never happens
        raise RuntimeError("Z3 found the committee facts inconsistent; this is a bug in lib.rules")
    model = solver.model()
    counts = {name: model.eval(term, model_completion=True).as_long() for name, term in count_terms.items()}
    violated: set[str] = set()
    for name, constraint in _rule_constraints(count_terms).items():
        solver.push()
        solver.assert_and_track(constraint, z3.Bool(name))
        if solver.check() == z3.unsat:
            violated |= {str(label) for label in solver.unsat_core()}
        solver.pop()
    return counts, violated


def explain_committee(members: Sequence[CommitteeMember], home_department: str) -> list[str]:
    """Names of the rules the committee violates, in `RULES` order, read from Z3 unsat cores.

    Returns [] when every rule holds. Each rule is checked as its own tracked assertion
    over the fixed facts, so the unsat core of each check is exactly that rule (see
    `_z3_verdicts`), and the union of the cores is exactly the set of violated rules.

    Raises:
        TypeError, ValueError: as `check_committee`.
    """
    members = _validated_members(members, "members")
    _, violated = _z3_verdicts(members, _validated_home_key(home_department))
    return [name for name in RULE_NAMES if name in violated]


def z3_check_committee(members: Sequence[CommitteeMember], home_department: str) -> CommitteeCheck:
    """The same verdicts as `check_committee`, computed by Z3.

    Counts are read from a model of the facts and violated rules from unsat cores; the
    two checkers share only the `RULES` table, so agreement between them is evidence.

    Raises:
        TypeError, ValueError: as `check_committee`.
    """
    members = _validated_members(members, "members")
    counts, violated = _z3_verdicts(members, _validated_home_key(home_department))
    return _build_check(counts, violated)


def synthesize_committee(
    pool: Sequence[CommitteeMember], advisor_name: str, home_department: str, size: int = 4
) -> list[CommitteeMember] | None:
    """Choose `size` members from `pool`, including the named advisor, so that every rule holds.

    The named advisor chairs: in the result they have `is_advisor=True` and everyone else
    `is_advisor=False` (the pool's own `is_advisor` flags are ignored). `size` counts all
    members, advisor included. The choice is deterministic: among all valid committees,
    the one that prefers earlier pool members (lexicographically first), found by fixing
    one choice variable at a time in pool order. Names are matched ignoring case and
    surrounding whitespace.

    Returns:
        The chosen members in pool order, or None if no committee of that size exists.

    Raises:
        TypeError: if an argument has the wrong type.
        ValueError: if `size` < 1, `home_department` is blank, or `advisor_name` is not
            exactly one member of the pool.
    """
    pool = _validated_members(pool, "pool")
    home_key = _validated_home_key(home_department)
    if not isinstance(advisor_name, str):
        raise TypeError(f"advisor_name must be a str, got {type(advisor_name).__name__}")
    if not isinstance(size, int) or isinstance(size, bool):
        raise TypeError(f"size must be an int, got {type(size).__name__}")
    if size < 1:
        raise ValueError(f"size must be at least 1 (it counts the advisor too), got {size}")
    wanted = advisor_name.strip().casefold()
    matches = [i for i, member in enumerate(pool) if member.name.strip().casefold() == wanted]
    if len(matches) != 1:
        found = "is not in the pool" if not matches else f"matches {len(matches)} pool members"
        raise ValueError(f"advisor_name {advisor_name!r} {found} of {len(pool)} members; it must match exactly one")
    advisor_index = matches[0]

    candidates = [m.model_copy(update={"is_advisor": i == advisor_index}) for i, m in enumerate(pool)]
    codes, home_code = _department_codes(candidates, home_key)
    chosen = [z3.Bool(f"chosen_{index}") for index in range(len(candidates))]
    people = [
        _Z3Member(
            present=choice,
            advisor=z3.BoolVal(member.is_advisor),
            faculty=z3.BoolVal(member.has_faculty_appointment),
            tenured=z3.BoolVal(member.is_tenured_or_emeritus),
            department=z3.IntVal(code),
        )
        for choice, member, code in zip(chosen, candidates, codes)
    ]
    solver = z3.Solver()
    solver.add(chosen[advisor_index], z3.Sum([z3.If(c, 1, 0) for c in chosen]) == size)
    solver.add(list(_rule_constraints(_z3_counts(people, home_code)).values()))
    if solver.check() != z3.sat:
        return None
    for choice in chosen:  # lexicographically first: take each member if a solution remains
        solver.push()
        solver.add(choice)
        take = solver.check() == z3.sat
        solver.pop()
        solver.add(choice if take else z3.Not(choice))
    solver.check()
    model = solver.model()
    return [
        member for member, choice in zip(candidates, chosen) if z3.is_true(model.eval(choice, model_completion=True))
    ]


# --------------------------------------------------------------------------- extraction by the model


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
    _validated_home_key(home_department)
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

DEPARTMENTS: dict[str, str] = {
    "Computer Science": "computer scientists",
    "Electrical Engineering": "electrical engineers",
    "Linguistics": "linguists",
    "Mathematics": "mathematicians",
    "Physics": "physicists",
    "Statistics": "statisticians",
}
"""The university's departments and what their members are called: the closed list of answers
to the department question (a message may say "a tenured physicist" rather than "Physics")."""

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
DEPARTMENT_QUESTION = "What is the primary department of {name}? Answer with one of: {options}."


class CommitteeNames(BaseModel):
    """Step 1 of extraction one question at a time: who is on the committee."""

    names: list[str] = Field(description="The full name of every committee member, without titles, e.g. 'Elena Petrova'.")


def _question_messages(description: str, question: str) -> list[dict[str, str]]:
    """The message in the system turn (a prefix shared by every question, so cached) and the question last."""
    return [{"role": "system", "content": f"{QUESTIONS_SYSTEM_PROMPT}\n\nMessage:\n{description.strip()}"},
            {"role": "user", "content": question}]


def member_questions(name: str, departments: Mapping[str, str] = DEPARTMENTS) -> dict[str, tuple[str, list[str]]]:
    """The three questions asked about one member: topic -> (question, the answers allowed)."""
    listed = [f"{department} ({people})" for department, people in departments.items()]
    return {
        "role": (ROLE_QUESTION.format(name=name, options=", ".join(ROLES)), list(ROLES)),
        "position": (POSITION_QUESTION.format(name=name, options="; ".join(POSITIONS)), list(POSITIONS)),
        "department": (DEPARTMENT_QUESTION.format(name=name, options=", ".join([*listed, NO_DEPARTMENT])),
                       [*departments, NO_DEPARTMENT]),
    }


def extract_committee_by_questions(llm: LLM, description: str,
                                   departments: Mapping[str, str] = DEPARTMENTS) -> ExtractionResult:
    """Extract the committee in small steps, each answer chosen from a closed list.

    1. The names (JSON constrained by `CommitteeNames`; validated, retried once by `ask_structured`).
    2. Per member, three questions whose replies a grammar restricts to fixed options: the role
       (`ROLES`), the position (`POSITIONS`: the faculty appointment and tenure follow from it),
       and the primary department (one of `departments`, or `NO_DEPARTMENT`).

    A small model answers one focused question with named options far more reliably than it
    fills five fields for five people in one reply (and than it answers yes/no questions,
    where it leans to "yes"); closed lists stop it from inventing a department.

    Args:
        llm: the model (anything with `chat`).
        description: the student's message.
        departments: the university's departments -> what their members are called.

    Returns:
        An `ExtractionResult` like `extract_committee`'s, holding every completion in order;
        `members` is None when the names could not be read.
    """
    from lib.grammar import gbnf_for_options

    if not isinstance(description, str) or not description.strip():
        raise ValueError("description must be a non-empty string")
    if not isinstance(departments, Mapping) or not departments:
        raise ValueError("departments must be a non-empty mapping: department name -> what its members are called")
    if any(_department_key(d) in (None, _department_key(NO_DEPARTMENT)) for d in departments):
        raise ValueError(f"departments must be named, and {NO_DEPARTMENT!r} is the answer for no department")
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
        for topic, (question, options) in member_questions(name, departments).items():
            reply = llm.chat(_question_messages(description, question), max_tokens=16,
                             grammar=gbnf_for_options(options))
            completions.append(reply)
            answers[topic] = reply.text.strip()
        faculty, tenured = POSITIONS[answers["position"]]
        members.append(CommitteeMember(
            name=name, is_advisor=answers["role"] != "committee member", has_faculty_appointment=faculty,
            primary_department=None if answers["department"] == NO_DEPARTMENT else answers["department"],
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
    extracted = _validated_members(extracted, "extracted")
    gold = _validated_members(gold, "gold")
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
            same = (_department_key(got.primary_department) == _department_key(truth.primary_department)
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
    from lib.grammar import gbnf_for_options

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


# --------------------------------------------------------------------------- the saved run over the ten cases


COMMITTEE_METHODS: tuple[str, ...] = ("one-call", "by-questions")
"""The extractors a saved run can use: `extract_committee` (all fields in one JSON reply) and
`extract_committee_by_questions` (the names, then three closed questions per member)."""

RESULTS_DIR = Path(__file__).resolve().parent.parent / "data" / "results"


def committee_run_path(method: str, results_dir: Path = RESULTS_DIR) -> Path:
    """Where the saved extractions of the committee cases by `method` live."""
    if method not in COMMITTEE_METHODS:
        raise ValueError(f"method must be one of {COMMITTEE_METHODS}, got {method!r}")
    return Path(results_dir) / f"committees-{method}.jsonl"


def committee_prompt_fingerprint(method: str) -> str:
    """A hash of everything that shapes `method`'s requests: prompts, questions, schemas, departments."""
    from lib.grammar import schema_for_model
    from lib.hashing import fingerprint

    if method == "one-call":
        return fingerprint({"system": EXTRACTION_SYSTEM_PROMPT, "schema": schema_for_model(CommitteeExtraction)})
    if method == "by-questions":
        return fingerprint({"system": QUESTIONS_SYSTEM_PROMPT, "names": NAMES_REQUEST,
                            "questions": member_questions("{name}"), "schema": schema_for_model(CommitteeNames)})
    raise ValueError(f"method must be one of {COMMITTEE_METHODS}, got {method!r}")


def extract_case(llm: LLM, case: Mapping[str, Any], method: str) -> ExtractionResult:
    """Extract one committee case (a line of committee_cases.jsonl) with `method`."""
    if method == "one-call":
        return extract_committee(llm, case["description"], case["home_department"])
    if method == "by-questions":
        return extract_committee_by_questions(llm, case["description"])
    raise ValueError(f"method must be one of {COMMITTEE_METHODS}, got {method!r}")


def _read_committee_run(path: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], bool]:
    """(header, rows, last line torn) of a saved run; reading never changes the file."""
    if not path.is_file():
        return None, [], False
    text = path.read_text(encoding="utf-8")
    torn = bool(text) and not text.endswith("\n")
    lines = text.splitlines()[:-1] if torn else text.splitlines()
    header, rows = None, []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not a JSON line ({error.msg}); remove the line and run again") from None
        if entry.get("kind") == "header":
            header = entry
        else:
            rows.append(entry)
    return header, rows, torn


def run_committee_cases(llm: LLM, method: str, cases: Sequence[Mapping[str, Any]], *, header: Mapping[str, Any],
                        path: Path | None = None, progress: bool = True) -> Path:
    """Extract every case with `method` and append one JSON line per case to the saved run.

    Resumable: cases already in the file are skipped, so an interrupted run continues where
    it stopped. `header` (model, fingerprint, command, ...) starts a new file; resuming a file
    whose model or fingerprint differs raises instead of mixing two runs, and a file with rows
    but no header is refused. A last line cut short by a kill is dropped (and said so).
    """
    from tqdm.auto import tqdm

    path = path or committee_run_path(method)
    existing, rows, torn = _read_committee_run(path)
    if rows and existing is None:
        raise ValueError(f"{path} holds {len(rows)} rows but no header line; it is left as it is: "
                         "restore its header or move it away")
    if existing is not None:
        changed = [key for key in ("model", "fingerprint") if existing.get(key) != header.get(key)]
        if changed:
            raise ValueError(f"{path} was made with another {' and '.join(changed)}; move it away to start afresh")
    if torn:
        kept = path.read_text(encoding="utf-8")
        path.write_text(kept[: kept.rfind("\n") + 1], encoding="utf-8")
        print(f"{path.name}: dropped a last line cut short by an interrupted run")
    done = {row["case"] for row in rows}
    todo = [case for case in cases if case["id"] not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        if existing is None:
            handle.write(json.dumps({"kind": "header", **header}, sort_keys=True, ensure_ascii=False) + "\n")
        for case in tqdm(todo, desc=f"committees {method}", disable=not progress):
            result = extract_case(llm, case, method)
            row = {"kind": "row", "case": case["id"], "ok": result.ok, "errors": list(result.errors),
                   "members": None if result.members is None else [m.model_dump() for m in result.members],
                   "calls": len(result.completions),
                   "seconds": round(sum(c.seconds for c in result.completions), 2),
                   "generated_tokens": sum(c.completion_tokens for c in result.completions)}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            handle.flush()
    return path


@dataclass(frozen=True)
class CommitteeRun:
    """A saved run read back: its header, and per case id the extracted members (None: failed)."""

    header: dict[str, Any]
    members: dict[str, list[CommitteeMember] | None]
    rows: dict[str, dict[str, Any]]


def load_committee_run(method: str, results_dir: Path = RESULTS_DIR) -> CommitteeRun:
    """Read the saved extractions of `method` (made by `python setup/run_committees.py`)."""
    path = committee_run_path(method, results_dir)
    header, rows, _ = _read_committee_run(path)
    if header is None or not rows:
        raise FileNotFoundError(f"{path} does not exist or holds no rows; make it with "
                                f"`python setup/run_committees.py --method {method}`")
    members = {row["case"]: None if row["members"] is None else [CommitteeMember(**m) for m in row["members"]]
               for row in rows}
    return CommitteeRun(header, members, {row["case"]: row for row in rows})
