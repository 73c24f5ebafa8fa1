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
    assert is_correct("nb04-ex3", 4)[0]
    assert not is_correct("nb04-ex3", 3)[0]
    assert not is_correct("nb04-ex3", 5)[0]
    assert not is_correct("nb04-ex3", "four")[0]
