"""Checkers of notebook 04's exercises: the right answer passes, wrong or malformed ones fail."""
from lib.exercises import is_correct
from lib.rules import CommitteeMember


def member(name: str, department: str, advisor: bool = False) -> CommitteeMember:
    return CommitteeMember(name=name, is_advisor=advisor, has_faculty_appointment=True,
                           primary_department=department, is_tenured_or_emeritus=True)


def test_nb04_ex1():
    assert is_correct("nb04-ex1", "home-department")[0]
    assert not is_correct("nb04-ex1", "faculty")[0]


def test_nb04_ex2():
    no_advisor = [member(n, "Computer Science") for n in "ABC"] + [member("D", "Mathematics")]
    assert is_correct("nb04-ex2", no_advisor)[0]
    assert not is_correct("nb04-ex2", no_advisor[:3])[0]  # also too few faculty
    assert not is_correct("nb04-ex2", [member("A", "Computer Science", advisor=True)] + no_advisor)[0]
    assert not is_correct("nb04-ex2", "four professors")[0]


def test_nb04_ex3():
    # any person from outside both advisors' departments fixes the committee
    for name in ["Jonas Weber", "kavya iyer", "Professor Liam O'Connell", "Nikolai Sørensen"]:
        assert is_correct("nb04-ex3", name)[0], name
    for name in ["Daniel Whitfield",  # Computer Science, an advisor's department (and already a member)
                 "Grace Lindqvist",  # Mathematics, the other advisor's department
                 "Marcus Feld",  # no department at the university: never an outside member
                 "Ada Lovelace",  # not in the pool
                 "Elena Petrova"]:  # already on the committee
        assert not is_correct("nb04-ex3", name)[0], name
    assert not is_correct("nb04-ex3", 4)[0]
