"""lib.extraction: committee extraction by the model (with a fake model), the differences report and the plain baseline."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

from lib.extraction import (answer_probability, CommitteeExtraction, compare_extraction, department_answer,
                            evidence_for, extract_committee, extract_committee_by_questions, member_questions,
                            message_sentences, NO_DEPARTMENT, normalized_name, plain_committee_verdict, POSITIONS,
                            ROLES)
from lib.saved_runs.committees import committee_prompt_fingerprint, load_committee_run, run_committee_cases
from lib.grammar import check_grammar, schema_for_model
from lib.backends.protocol import Completion, TokenLogprob
from lib.rules import CommitteeMember, check_committee
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


def test_names_match_without_titles_spacing_or_case():
    assert normalized_name("Professor Emerita Grace  Lindqvist") == "grace lindqvist"
    assert normalized_name("Dr. Benedikt Lang") == normalized_name("benedikt lang") == "benedikt lang"
    assert normalized_name("Drew Professor") == "drew professor"  # only leading titles go


def test_comparison_matches_members_by_normalised_name_and_scores_fields():
    assert compare_extraction([KIM, LANG], [LANG, KIM]).differences == []
    titled = [KIM.model_copy(update={"name": "Professor Rachel Kim", "primary_department": " computer\u00a0science"})]
    exact = compare_extraction(titled, [KIM])
    assert exact.differences == [] and (exact.fields_right, exact.fields_total, exact.accuracy) == (4, 4, 1.0)
    wrong = LANG.model_copy(update={"name": "Dr. Benedikt Lang", "is_tenured_or_emeritus": True,
                                    "primary_department": None})
    other = KIM.model_copy(update={"name": "Ada Lovelace"})
    comparison = compare_extraction([wrong, other], [KIM, LANG])
    assert comparison.differences == [
        "missing member 'Rachel Kim'",
        "extra member 'Ada Lovelace'",
        "Benedikt Lang: primary_department is None, should be 'Computer Science'",
        "Benedikt Lang: is_tenured_or_emeritus is True, should be False",
    ]
    # Rachel Kim missing (4 wrong), Ada Lovelace extra (4 wrong), Benedikt Lang 2 of 4 right
    assert (comparison.fields_right, comparison.fields_total) == (2, 12)


def questions_llm(*answers: str) -> FakeLLM:
    return FakeLLM(*(completion(text) for text in answers))


def test_extraction_by_questions_builds_members_from_closed_answers():
    llm = questions_llm('{"names": ["Professor Rachel Kim", "Benedikt Lang", "Rachel Kim"]}',
                        "co-advisor", "tenured professor", "Computer Science",
                        "committee member", "postdoc", NO_DEPARTMENT)
    result = extract_committee_by_questions(llm, DESCRIPTION)
    assert result.ok and not result.errors and len(result.completions) == 7
    kim, lang = result.members  # the repeated name is asked about once
    assert (kim.name, kim.is_advisor, kim.has_faculty_appointment, kim.primary_department,
            kim.is_tenured_or_emeritus) == ("Professor Rachel Kim", True, True, "Computer Science", True)
    assert (lang.is_advisor, lang.has_faculty_appointment, lang.primary_department,
            lang.is_tenured_or_emeritus) == (False, False, None, False)
    role, position, department = llm.requests[1:4]
    assert role["grammar"] == 'root ::= "advisor" | "co-advisor" | "committee member"'
    assert all(f'"{answer}"' in position["grammar"] for answer in POSITIONS)
    assert f'"{NO_DEPARTMENT}" | name' in department["grammar"]  # any department's name, or none
    assert "for example Physics for a physicist" in department["messages"][-1]["content"]
    assert "Professor Rachel Kim" in role["messages"][-1]["content"]
    # the message sits in the system turn, which every question shares (a cached prefix)
    assert len({request["messages"][0]["content"] for request in llm.requests}) == 1
    assert DESCRIPTION in llm.requests[0]["messages"][0]["content"]


def test_the_department_question_is_open_so_any_department_keeps_its_name():
    llm = questions_llm('{"names": ["Helen Okoye", "Marcus Feld"]}',
                        "committee member", "tenured professor", "Chemistry",
                        "committee member", "research scientist at a company", NO_DEPARTMENT)
    okoye, feld = extract_committee_by_questions(llm, "Professor Helen Okoye, a tenured chemist; Marcus Feld.").members
    assert (okoye.primary_department, feld.primary_department) == ("Chemistry", None)
    department = llm.requests[3]
    check_grammar(department["grammar"])
    assert "Answer with one of" not in department["messages"][-1]["content"]  # no closed list of departments


def test_department_answers_are_read_as_the_department_they_name():
    assert department_answer(" Economics ") == "Economics"
    assert department_answer(NO_DEPARTMENT) is None
    # a Chemistry member counts as a department that differs from a Computer Science advisor's
    members = [KIM, LANG, CommitteeMember(name="Helen Okoye", is_advisor=False, has_faculty_appointment=True,
                                          primary_department=department_answer("Chemistry"),
                                          is_tenured_or_emeritus=True)]
    assert check_committee(members, "Computer Science").counts["outside-member"] == 1


def test_sentences_do_not_end_after_a_title():
    text = "My advisor is Dr. Yusuf  Demir. I asked Prof. Lang, e.g. him! Is that enough? Thanks"
    assert message_sentences(text) == ["My advisor is Dr. Yusuf Demir.", "I asked Prof. Lang, e.g. him!",
                                       "Is that enough?", "Thanks"]
    assert message_sentences("   ") == []


def test_evidence_is_every_sentence_that_names_the_member():
    text = ("My advisor, Professor Rachel Kim, will chair. Dr. Benedikt Lang joins. "
            "Professor Rachel  KIM and Dr. Lang are both in Computer Science.")
    assert evidence_for("Rachel Kim", text) == ("My advisor, Professor Rachel Kim, will chair. "
                                                "Professor Rachel KIM and Dr. Lang are both in Computer Science.")
    assert evidence_for("Professor Benedikt Lang", text) == "Dr. Benedikt Lang joins."  # titles dropped to match
    assert evidence_for("Kavya Iyer", text) is None
    assert evidence_for("Dr.", text) is None  # a name that is only a title matches nothing


def test_extraction_with_evidence_quotes_the_sentence_before_each_question():
    description = "My advisor is Dr. Rachel Kim. Dr. Benedikt Lang, a postdoc, joins."
    llm = questions_llm('{"names": ["Rachel Kim", "Maria Unnamed"]}', "advisor", "tenured professor", "Computer Science",
                        "committee member", "postdoc", NO_DEPARTMENT)
    result = extract_committee_by_questions(llm, description, quote_evidence="always")
    assert result.ok and [m.is_advisor for m in result.members] == [True, False]
    kim_questions, unnamed_questions = llm.requests[1:4], llm.requests[4:7]
    for request in kim_questions:
        assert request["messages"][-1]["content"].startswith(
            'The message says about Rachel Kim: "My advisor is Dr. Rachel Kim."\n')
    # a name found in no sentence gets the plain questions, never a made-up quote
    assert [r["messages"][-1]["content"] for r in unnamed_questions] == [
        question for question, _ in member_questions("Maria Unnamed").values()]
    assert len({request["messages"][0]["content"] for request in llm.requests}) == 1
    assert len({committee_prompt_fingerprint(method)
                for method in ("by-questions", "questions-with-evidence", "evidence-when-unsure")}) == 3


def answered(text: str, probability: float) -> Completion:
    """A reply whose one token the model gave `probability`."""
    return dataclasses.replace(completion(text), tokens=(TokenLogprob(text, math.log(probability)),))


def test_only_unsure_answers_are_asked_again_with_the_quote_and_the_surer_answer_is_kept():
    description = "My advisor is Dr. Rachel Kim. Everyone else is in Computer Science."
    llm = FakeLLM(completion('{"names": ["Rachel Kim"]}'),
                  answered("committee member", 0.42), answered("advisor", 0.97),  # role: unsure, the quoted answer is surer
                  answered("tenured professor", 0.95),  # position: sure, asked once
                  answered("Computer Science", 0.6), answered("Statistics", 0.5))  # department: the plain answer is surer
    result = extract_committee_by_questions(llm, description, quote_evidence="when unsure")
    (kim,) = result.members
    assert kim.is_advisor and kim.is_tenured_or_emeritus and kim.primary_department == "Computer Science"
    assert len(result.completions) == 6
    quoted = [request["messages"][-1]["content"].startswith('The message says about Rachel Kim: "My advisor is Dr. Rachel Kim."')
              for request in llm.requests[1:]]
    assert quoted == [False, True, False, False, True]
    assert answer_probability(answered("advisor", 0.5)) == pytest.approx(0.5)
    assert answer_probability(completion("advisor")) == 1.0  # a reply without token probabilities is never re-asked
    with pytest.raises(ValueError, match="quote_evidence"):
        extract_committee_by_questions(FakeLLM(), DESCRIPTION, quote_evidence=True)


def test_positions_decide_faculty_and_tenure():
    assert set(ROLES) == {"advisor", "co-advisor", "committee member"}
    faculty = {position for position, (appointed, _) in POSITIONS.items() if appointed}
    tenured = {position for position, (_, tenure) in POSITIONS.items() if tenure}
    assert tenured == {"tenured professor", "emeritus professor"} and tenured < faculty
    assert not faculty & {"postdoc", "student", "research scientist at a company"}


def test_extraction_by_questions_reports_failures_and_checks_arguments():
    failed = extract_committee_by_questions(questions_llm('{"names": [', '{"names": [1]}'), DESCRIPTION)
    assert not failed.ok and failed.members is None and len(failed.errors) == 2
    nobody = extract_committee_by_questions(questions_llm('{"names": []}'), DESCRIPTION)
    assert nobody.ok and nobody.members == []
    with pytest.raises(ValueError, match="description"):
        extract_committee_by_questions(FakeLLM(), "  ")


def test_plain_verdict_reads_a_grammar_constrained_yes_or_no():
    llm = FakeLLM(completion("yes"), completion("no"))
    assert plain_committee_verdict(llm, "At least four members.", DESCRIPTION)[0] is True
    assert plain_committee_verdict(llm, "At least four members.", DESCRIPTION)[0] is False
    assert llm.requests[0]["grammar"] == 'root ::= "yes" | "no"'
    assert "At least four members." in llm.requests[0]["messages"][0]["content"]


CASES = [{"id": "one", "description": DESCRIPTION, "home_department": "Computer Science"},
         {"id": "two", "description": DESCRIPTION, "home_department": "Computer Science"}]
COMMAND = "python setup/run_saved.py --run committees-one-call"


def test_saved_run_resumes_and_reads_back(tmp_path):
    run_committee_cases(FakeLLM(completion(reply(KIM, LANG))), "one-call", CASES[:1], results_dir=tmp_path,
                        progress=False)
    llm = FakeLLM(completion(reply(KIM)))
    run_committee_cases(llm, "one-call", CASES, results_dir=tmp_path, progress=False)
    assert len(llm.requests) == 1  # the first case was not asked again
    run = load_committee_run("one-call", tmp_path)
    assert run.header["command"] == COMMAND and run.members == {"one": [KIM, LANG], "two": [KIM]}
    assert run.header["model"] == "scripted-model" and run.header["mode"] == "live"
    assert run.header["fingerprint"] == committee_prompt_fingerprint("one-call")
    assert run.rows["two"]["calls"] == 1 and run.rows["two"]["ok"]


def test_saved_run_is_never_mixed_or_wiped(tmp_path):
    path = tmp_path / "committees-one-call.jsonl"
    run_committee_cases(FakeLLM(completion(reply(KIM))), "one-call", CASES[:1], results_dir=tmp_path, progress=False)
    before = path.read_text(encoding="utf-8")
    other_model = FakeLLM()
    other_model.identity = "another-model"
    with pytest.raises(ValueError, match="other settings.*model"):
        run_committee_cases(other_model, "one-call", CASES, results_dir=tmp_path, progress=False)
    path.write_text(before.split("\n", 1)[1], encoding="utf-8")  # the header line lost
    with pytest.raises(ValueError, match="no header"):
        run_committee_cases(FakeLLM(), "one-call", CASES, results_dir=tmp_path, progress=False)
    assert path.read_text(encoding="utf-8") == before.split("\n", 1)[1]
    path.write_text(before + '{"kind": "row", "case": "two", "ok"', encoding="utf-8")  # killed mid-line
    assert set(load_committee_run("one-call", tmp_path).members) == {"one"}
    assert path.read_text(encoding="utf-8").endswith('"ok"')  # reading does not repair
    with pytest.warns(UserWarning, match="removed an unfinished last line"):
        run_committee_cases(FakeLLM(completion(reply(LANG))), "one-call", CASES, results_dir=tmp_path, progress=False)
    assert load_committee_run("one-call", tmp_path).members == {"one": [KIM], "two": [LANG]}
    with pytest.raises(FileNotFoundError, match=r"`python setup/run_saved.py --run committees-by-questions`"):
        load_committee_run("by-questions", tmp_path)
