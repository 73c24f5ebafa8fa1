"""Committee extraction by the model (with a fake model), the differences report and the plain baseline."""
from __future__ import annotations

import json

import pytest

from lib.grammar import schema_for_model
from lib.rules import (CommitteeExtraction, CommitteeMember, check_committee, extract_committee,
                       extraction_differences, plain_committee_verdict)
from tests.test_grounding import FakeLLM, completion

KIM = CommitteeMember(name="Rachel Kim", is_advisor=True, has_faculty_appointment=True,
                      primary_department="Computer Science", is_tenured_or_emeritus=True)
LANG = CommitteeMember(name="Benedikt Lang", is_advisor=False, has_faculty_appointment=True,
                       primary_department="Computer Science", is_tenured_or_emeritus=False)
DESCRIPTION = "My advisor is Professor Rachel Kim (Computer Science, tenured); Dr. Benedikt Lang also joins."


def reply(*members: CommitteeMember) -> str:
    return json.dumps({"members": [m.model_dump() for m in members]})


def test_extraction_is_parsed_under_the_schema():
    llm = FakeLLM(completion(reply(KIM, LANG)))
    result = extract_committee(llm, DESCRIPTION, "Computer Science")
    assert result.ok and result.members == [KIM, LANG] and not result.errors
    assert llm.requests[0]["json_schema"] == schema_for_model(CommitteeExtraction)
    assert "home department is Computer Science" in llm.requests[0]["messages"][1]["content"]
    assert check_committee(result.members, "Computer Science").violated_rules == ["faculty", "outside-member"]


def test_invalid_extraction_is_retried_once():
    bad = json.dumps({"members": [{"name": "Rachel Kim", "is_advisor": "maybe"}]})
    result = extract_committee(FakeLLM(completion(bad), completion(reply(KIM))), DESCRIPTION, "Computer Science")
    assert result.ok and result.members == [KIM] and len(result.completions) == 2


def test_extraction_failure_is_reported_not_guessed():
    llm = FakeLLM(completion('{"members": [', "length"), completion('{"members": [{"na', "length"))
    result = extract_committee(llm, DESCRIPTION, "Computer Science")
    assert not result.ok and result.members is None and len(result.errors) == 2


def test_extraction_arguments_are_checked():
    with pytest.raises(ValueError, match="description"):
        extract_committee(FakeLLM(), " ", "Computer Science")
    with pytest.raises(ValueError, match="home_department"):
        extract_committee(FakeLLM(), DESCRIPTION, " ")


def test_differences_name_missing_extra_and_wrong_fields():
    assert extraction_differences([KIM, LANG], [LANG, KIM]) == []
    assert extraction_differences([KIM.model_copy(update={"primary_department": " computer science"})], [KIM]) == []
    wrong = LANG.model_copy(update={"is_tenured_or_emeritus": True, "primary_department": None})
    other = KIM.model_copy(update={"name": "Ada Lovelace"})
    assert extraction_differences([wrong, other], [KIM, LANG]) == [
        "missing member 'Rachel Kim'",
        "extra member 'Ada Lovelace'",
        "Benedikt Lang: is_tenured_or_emeritus is True, should be False",
        "Benedikt Lang: primary_department is None, should be 'Computer Science'",
    ]


def test_plain_verdict_reads_a_grammar_constrained_yes_or_no():
    llm = FakeLLM(completion("yes"), completion("no"))
    assert plain_committee_verdict(llm, "At least four members.", DESCRIPTION)[0] is True
    assert plain_committee_verdict(llm, "At least four members.", DESCRIPTION)[0] is False
    assert llm.requests[0]["grammar"] == 'root ::= "yes" | "no"'
    assert "At least four members." in llm.requests[0]["messages"][0]["content"]
