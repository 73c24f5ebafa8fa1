"""Checkers of notebook 05's exercises: the right answer passes, wrong or malformed ones fail."""
from lib.exercises import NB05_EX1_MISREAD, is_correct
from lib.rules import CommitteeMember, check_committee


def test_nb05_ex1_asks_for_the_member_and_field_the_model_misread():
    name, field = NB05_EX1_MISREAD
    assert is_correct("nb05-ex1", (name, field))[0]
    assert is_correct("nb05-ex1", [f"Dr. {name.upper()}", f" {field} "])[0]
    assert not is_correct("nb05-ex1", (name, "name"))[0]
    assert not is_correct("nb05-ex1", ("Ada Lovelace", field))[0]
    assert is_correct("nb05-ex1", name) == (False, ' (expected a pair (name, field), e.g. ("Ada Lovelace", "is_advisor"))')


def test_nb05_ex2_asks_for_the_checkers_verdict_not_the_models():
    committee = [CommitteeMember(name="Rachel Kim", is_advisor=True, has_faculty_appointment=True,
                                 primary_department="Computer Science", is_tenured_or_emeritus=True),
                 CommitteeMember(name="Benedikt Lang", is_advisor=False, has_faculty_appointment=True,
                                 primary_department="Computer Science", is_tenured_or_emeritus=False),
                 CommitteeMember(name="Hiroshi Tanaka", is_advisor=False, has_faculty_appointment=True,
                                 primary_department="Electrical Engineering", is_tenured_or_emeritus=True),
                 CommitteeMember(name="Marcus Feld", is_advisor=False, has_faculty_appointment=False,
                                 primary_department=None, is_tenured_or_emeritus=False)]
    assert check_committee(committee, "Computer Science").violated_rules == ["faculty"]
    assert is_correct("nb05-ex2", ("invalid", ["faculty"]))[0]
    assert is_correct("nb05-ex2", ["Invalid", ("Faculty",)])[0]
    for wrong in [("valid", []), ("invalid", []), ("invalid", ["faculty", "outside-member"])]:
        assert not is_correct("nb05-ex2", wrong)[0], wrong
    assert not is_correct("nb05-ex2", "invalid")[0]


def test_nb05_ex3_asks_for_the_one_unstated_fact_that_decides_the_verdict():
    members = [("Amara Okafor", True, True, "Computer Science", True),
               ("Benedikt Lang", False, True, "Computer Science", False),
               ("Elena Petrova", False, True, "Mathematics", True)]
    stated = [CommitteeMember(name=n, is_advisor=a, has_faculty_appointment=f, primary_department=d,
                              is_tenured_or_emeritus=t) for n, a, f, d, t in members]

    def verdict(faculty, tenured):
        ruiz = CommitteeMember(name="Ana Ruiz", is_advisor=False, has_faculty_appointment=faculty,
                               primary_department="Chemistry", is_tenured_or_emeritus=tenured)
        return check_committee([*stated, ruiz], "Computer Science").ok

    assert verdict(True, False) != verdict(False, False)  # the appointment decides
    assert verdict(True, True) == verdict(True, False)  # her tenure does not
    assert is_correct("nb05-ex3", ("Ana Ruiz", "has_faculty_appointment"))[0]
    assert is_correct("nb05-ex3", ("Dr. Ana Ruiz", "has_faculty_appointment"))[0]
    assert not is_correct("nb05-ex3", ("Ana Ruiz", "is_tenured_or_emeritus"))[0]
    assert not is_correct("nb05-ex3", ("Benedikt Lang", "is_tenured_or_emeritus"))[0]
