"""The committee cases from departments other than Computer Science (committee_cases_departments.jsonl):
labels recomputed from the gold facts, quotes that are exact spans of the description, a split by department."""
from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from lib.datasets import CORPUS_DIR
from lib.quotes import verify_quote
from lib.rules import RULE_NAMES, CommitteeMember, check_committee, z3_check_committee

PATH = CORPUS_DIR / "committee_cases_departments.jsonl"
FIELDS = ("is_advisor", "has_faculty_appointment", "primary_department", "is_tenured_or_emeritus")
KEYS = {"id", "split", "home_department", "description", "members", "evidence", "expected_verdict", "expected_ok",
        "expected_violations", "missing", "non_members", "phrasing", "indirect"}
REQUIRED_PHRASING = ("co-advisors", "associate professor with tenure", "emeritus", "lecturer", "research scientist",
                     "visiting", "adjunct", "industry", "courtesy appointment", "titles", "mentioned twice",
                     "tenure stated indirectly", "another department", "other university")


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CASES = _read(PATH)
OLD_CASES = _read(CORPUS_DIR / "committee_cases.jsonl")


def _outcome(members: list[dict], home: str) -> tuple[bool, tuple[str, ...]]:
    check = check_committee([CommitteeMember(**member) for member in members], home)
    return check.ok, tuple(check.violated_rules)


def _unstated(case: dict) -> list[tuple[int, str]]:
    """(member index, field) of every fact the description does not state (its quote is null)."""
    return [(index, field) for index, quotes in enumerate(case["evidence"]) for field in FIELDS
            if quotes[field] is None]


def _values(case: dict, index: int, field: str) -> list:
    """What an unstated fact could be: yes or no; or the home department, any department the case states, a new
    one (its own, so two unstated departments can differ), its gold value, or none."""
    if field != "primary_department":
        return [True, False]
    stated = {member["primary_department"] for member, quotes in zip(case["members"], case["evidence"])
              if quotes["primary_department"] is not None and member["primary_department"] is not None}
    gold = case["members"][index]["primary_department"]
    return sorted({case["home_department"], *stated, f"another department {index}"} | ({gold} - {None})) + [None]


def _completions(case: dict) -> dict[tuple, tuple[bool, tuple[str, ...]]]:
    """The verdict for every way of filling in the unstated facts (a faculty member always has a department)."""
    unstated = _unstated(case)
    verdicts = {}
    for values in itertools.product(*(_values(case, index, field) for index, field in unstated)):
        members = [dict(member) for member in case["members"]]
        for (index, field), value in zip(unstated, values):
            members[index][field] = value
        if all(member["primary_department"] is not None for member in members if member["has_faculty_appointment"]):
            verdicts[values] = _outcome(members, case["home_department"])
    return verdicts


def _labels(case: dict) -> tuple[str, list[tuple[str, str]]]:
    """The verdict ("accept", "reject" or "ask") and the unstated facts that decide it, computed."""
    verdicts = _completions(case)
    unstated = _unstated(case)
    assert verdicts[tuple(case["members"][i][f] for i, f in unstated)] == _outcome(case["members"],
                                                                                    case["home_department"])
    if len({ok for ok, _ in verdicts.values()}) == 1:
        # invalid for certain, yet with rules that depend on an unstated fact, would need a reject and a question
        assert len(set(verdicts.values())) == 1, case["id"]
        ok, _ = next(iter(verdicts.values()))
        return ("accept" if ok else "reject"), []
    decisive = []
    for position, (index, field) in enumerate(unstated):
        others: dict[tuple, set[bool]] = {}
        for values, (ok, _) in verdicts.items():
            others.setdefault(values[:position] + values[position + 1:], set()).add(ok)
        if any(len(oks) > 1 for oks in others.values()):
            decisive.append((case["members"][index]["name"], field))
    return "ask", decisive


def _changes_verdict(case: dict, name: str, field: str) -> bool:
    """Whether this fact, changed alone (a yes/no flipped, a department to another), changes the verdict."""
    members = [dict(member) for member in case["members"]]
    member = next(m for m in members if m["name"] == name)
    member[field] = "another department" if field == "primary_department" else not member[field]
    return _outcome(members, case["home_department"]) != _outcome(case["members"], case["home_department"])


def _departments(case: dict) -> set[str]:
    return {case["home_department"]} | {m["primary_department"] for m in case["members"] if m["primary_department"]}


def test_every_case_has_the_fields_and_valid_members():
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)) and not set(ids) & {case["id"] for case in OLD_CASES}
    for case in CASES:
        assert set(case) == KEYS, case["id"]
        assert case["split"] in {"dev", "test"} and case["expected_verdict"] in {"accept", "reject", "ask"}
        members = [CommitteeMember(**member) for member in case["members"]]
        assert len({member.name for member in members}) == len(members) >= 3, case["id"]
        assert [quotes["name"] for quotes in case["evidence"]] == [member.name for member in members], case["id"]
        assert all(m.primary_department is not None for m in members if m.has_faculty_appointment), case["id"]
        text = case["description"].casefold()
        for name in [member.name for member in members] + case["non_members"]:
            assert name.casefold() in text, (case["id"], name)
        assert not set(case["non_members"]) & {member.name for member in members}, case["id"]


def test_stored_verdicts_are_what_both_checkers_compute_from_the_gold_facts():
    for case in CASES:
        members = [CommitteeMember(**member) for member in case["members"]]
        check = check_committee(members, case["home_department"])
        assert (check.ok, check.violated_rules) == (case["expected_ok"], case["expected_violations"]), case["id"]
        assert z3_check_committee(members, case["home_department"]) == check, case["id"]
        if case["expected_verdict"] != "ask":
            assert case["expected_verdict"] == ("accept" if check.ok else "reject"), case["id"]


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_the_verdict_is_ask_exactly_when_an_unstated_fact_decides_it(case):
    verdict, decisive = _labels(case)
    assert case["expected_verdict"] == verdict
    assert [(m["member"], m["field"]) for m in case["missing"]] == decisive
    for question in case["missing"]:
        assert question["question"].strip() and question["user_reply"].strip()
        surname = question["member"].split()[-1]
        assert surname in question["question"] or question["field"] == "is_advisor", question


def test_a_missing_quote_for_the_only_tenured_member_turns_an_accept_into_a_question():
    case = next(case for case in CASES if case["id"] == "mathematics-co-advisors-emeritus-only-tenure")
    assert _labels(case) == ("accept", [])
    evidence = [dict(quotes) for quotes in case["evidence"]]
    next(q for q in evidence if q["name"] == "Heinrich Vollmer")["is_tenured_or_emeritus"] = None
    assert _labels({**case, "evidence": evidence}) == ("ask", [("Heinrich Vollmer", "is_tenured_or_emeritus")])


def test_every_stored_quote_is_an_exact_span_of_its_description():
    quoted = 0
    for case in CASES:
        for quotes in case["evidence"]:
            for field in FIELDS:
                quote = quotes[field]
                if quote is None:
                    continue
                check = verify_quote(quote, case["description"])
                assert check.kind == "exact", (case["id"], quotes["name"], field, quote, check.reason)
                assert case["description"][check.start:check.end] == quote and len(quote) <= 120
                quoted += 1
        by_name = {quotes["name"]: quotes for quotes in case["evidence"]}
        for fact in case["missing"]:
            assert by_name[fact["member"]][fact["field"]] is None, (case["id"], fact)
        for fact in case["indirect"]:
            assert by_name[fact["member"]][fact["field"]] is not None, (case["id"], fact)
    assert quoted >= 0.9 * sum(len(case["members"]) * len(FIELDS) for case in CASES)


def test_dev_and_test_cases_never_share_a_department():
    split_of: dict[str, set[str]] = {}
    for case in CASES:
        split_of.setdefault(case["home_department"], set()).add(case["split"])
    assert all(len(splits) == 1 for splits in split_of.values()), split_of
    dev = set().union(*(_departments(case) for case in CASES if case["split"] == "dev"))
    test = set().union(*(_departments(case) for case in CASES if case["split"] == "test"))
    assert not dev & test
    # nor do notebook 04's dev cases, so a choice made on all dev cases never sees a test department
    assert not test & set().union(*(_departments(case) for case in OLD_CASES if case["split"] == "dev"))
    for case in CASES:
        for department in test if case["split"] == "dev" else dev:
            assert not re.search(rf"\b{re.escape(department)}\b", case["description"], re.IGNORECASE), (case["id"],
                                                                                                      department)


def test_counts_and_balance():
    assert len(CASES) >= 40
    homes = {case["home_department"] for case in CASES}
    assert "Computer Science" not in homes and len(homes) >= 12
    for split in ("dev", "test"):
        assert len({case["home_department"] for case in CASES if case["split"] == split}) >= 6
    verdicts = Counter(case["expected_verdict"] for case in CASES)
    assert 6 <= verdicts["ask"] <= 10
    decided = verdicts["accept"] + verdicts["reject"]
    assert min(verdicts["accept"], verdicts["reject"]) >= 0.4 * decided
    assert 0.4 <= sum(case["expected_ok"] for case in CASES) / len(CASES) <= 0.6  # asks counted by the reply
    for split in ("dev", "test"):
        violated = Counter(rule for case in CASES if case["split"] == split and case["expected_verdict"] == "reject"
                           for rule in case["expected_violations"])
        assert all(violated[rule] >= 2 for rule in RULE_NAMES), (split, violated)


def test_a_person_has_the_same_facts_in_every_case_and_in_the_faculty_list():
    facts: dict[str, tuple] = {}
    for record in _read(CORPUS_DIR / "faculty.jsonl"):
        facts[record["name"]] = tuple(record[field] for field in FIELDS[1:])
    for case in CASES:
        for member in case["members"]:
            found = tuple(member[field] for field in FIELDS[1:])
            assert facts.setdefault(member["name"], found) == found, (case["id"], member["name"])


def test_phrasing_covers_what_generalisation_needs():
    phrasing = Counter(feature for case in CASES for feature in case["phrasing"])
    assert all(phrasing[feature] >= 2 for feature in REQUIRED_PHRASING), phrasing
    decisive = [(case["id"], fact["member"]) for case in CASES for fact in case["indirect"]
                if _changes_verdict(case, fact["member"], fact["field"])]
    assert len(decisive) >= 8  # the right verdict hangs on a fact the description states only indirectly
