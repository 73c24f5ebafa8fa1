"""Thesis-committee rules, checked twice: in plain Python and with the Z3 solver.

An LLM is good at reading a student's email into structured facts (`CommitteeMember`)
and bad at counting against thresholds. So the model extracts (`lib.extraction`), and code
decides: `check_committee` applies the five rules directly; `explain_committee` and
`z3_check_committee` ask Z3 which rules the facts violate; `synthesize_committee` asks
Z3 to *build* a committee that satisfies every rule from a pool of faculty.

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
Department names are compared as `department_key` writes them: case, spacing, Unicode forms and
invisible characters make no difference.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import z3
from pydantic import BaseModel, Field

from lib.text import normalize_text

__all__ = [
    "CommitteeMember", "Rule", "RULES", "RULE_NAMES", "CommitteeCheck", "department_key", "validated_members",
    "validated_home_key", "check_committee", "explain_committee", "z3_check_committee", "synthesize_committee",
]


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


def department_key(department: str | None) -> str | None:
    """A department name as every rule (Python and Z3) compares it; None when missing or blank.

    `lib.text.normalize_text` (NFKC, so fullwidth letters and decomposed accents are the plain
    ones; invisible format characters such as a zero-width space, word joiner, soft hyphen or
    byte-order mark removed; case folded), then without spaces: an invisible character can stand
    where the space was ("Computer\u200bScience"), and no two departments differ only in spacing.
    """
    if department is None:
        return None
    return "".join(normalize_text(department).split()) or None


def validated_members(members: Sequence[CommitteeMember], argument: str) -> list[CommitteeMember]:
    """`members` as a list, after checking it is a sequence of `CommitteeMember` (a TypeError
    naming `argument` otherwise)."""
    if isinstance(members, (str, bytes)) or not isinstance(members, Sequence):
        raise TypeError(f"{argument} must be a list of CommitteeMember, got {type(members).__name__}")
    for index, member in enumerate(members):
        if not isinstance(member, CommitteeMember):
            raise TypeError(f"{argument}[{index}] must be a CommitteeMember, got {type(member).__name__}")
    return list(members)


def validated_home_key(home_department: str) -> str:
    """The `department_key` of `home_department`, after checking it is a non-blank string
    (TypeError or ValueError otherwise)."""
    if not isinstance(home_department, str):
        raise TypeError(f"home_department must be a str, got {type(home_department).__name__}")
    key = department_key(home_department)
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
    advisor_keys = [department_key(m.primary_department) for m in members if m.is_advisor]

    def is_outside(member: CommitteeMember) -> bool:
        key = department_key(member.primary_department)
        return bool(advisor_keys) and key is not None and all(a is not None and a != key for a in advisor_keys)

    def in_home(member: CommitteeMember) -> bool:
        return member.has_faculty_appointment and department_key(member.primary_department) == home_key

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
    members = validated_members(members, "members")
    counts = _python_counts(members, validated_home_key(home_department))
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
    member_keys = [department_key(m.primary_department) for m in members]
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
    has_department = [p.department != _NO_DEPARTMENT for p in people]
    # An advisor without a department makes nobody outside (no department to differ from).
    advisor_without_department = [z3.And(is_advisor, z3.Not(known)) for is_advisor, known in zip(advisors, has_department)]
    no_advisor_lacks_department = z3.Not(z3.Or(advisor_without_department)) if people else z3.BoolVal(True)

    def is_outside(person: _Z3Member, known: z3.BoolRef) -> z3.BoolRef:
        differs_from_every_advisor = [z3.Implies(is_advisor, other.department != person.department)
                                      for other, is_advisor in zip(people, advisors)]
        return z3.And(person.present, known, any_advisor, no_advisor_lacks_department, *differs_from_every_advisor)

    return {
        "advisor": count(advisors),
        "faculty": count([z3.And(p.present, p.faculty) for p in people]),
        "outside-member": count([is_outside(p, known) for p, known in zip(people, has_department)]),
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
    members = validated_members(members, "members")
    _, violated = _z3_verdicts(members, validated_home_key(home_department))
    return [name for name in RULE_NAMES if name in violated]


def z3_check_committee(members: Sequence[CommitteeMember], home_department: str) -> CommitteeCheck:
    """The same verdicts as `check_committee`, computed by Z3.

    Counts are read from a model of the facts and violated rules from unsat cores; the
    two checkers share only the `RULES` table, so agreement between them is evidence.

    Raises:
        TypeError, ValueError: as `check_committee`.
    """
    members = validated_members(members, "members")
    counts, violated = _z3_verdicts(members, validated_home_key(home_department))
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
    pool = validated_members(pool, "pool")
    home_key = validated_home_key(home_department)
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
