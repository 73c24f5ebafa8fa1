"""Checkers of notebook 04's exercises: the right answer passes, wrong or malformed ones fail."""
from lib.exercises import is_correct
from lib.rules import CommitteeMember


def member(name: str, department: str, advisor: bool = False) -> CommitteeMember:
    return CommitteeMember(name=name, is_advisor=advisor, has_faculty_appointment=True,
                           primary_department=department, is_tenured_or_emeritus=True)


def test_nb04_ex1_asks_for_the_violated_rules_of_a_committee_described_in_words():
    # advisor Ruiz (CS), Okoye (Chemistry, tenured), Zhang (Chemistry), Raman (CS postdoc): three faculty,
    # one of them in Computer Science
    assert is_correct("nb04-ex1", ["faculty", "home-department"])[0]
    assert is_correct("nb04-ex1", ("Home-Department", "faculty"))[0]
    for wrong in [["faculty"], ["home-department"], ["faculty", "home-department", "outside-member"], []]:
        assert not is_correct("nb04-ex1", wrong)[0], wrong
    assert not is_correct("nb04-ex1", "home-department")[0]  # the old answer to the old question, and a string
    assert not is_correct("nb04-ex1", ["faculty", "quorum"])[0]


def test_nb04_ex2_asks_for_the_fewest_pool_members_that_make_small_and_junior_valid():
    # small-and-junior has two faculty members (one in CS), none tenured: two more faculty are needed,
    # one of them tenured in Computer Science
    assert is_correct("nb04-ex2", ["Amara Okafor", "Jonas Weber"])[0]
    assert is_correct("nb04-ex2", ["chiara russo", "Professor Benedikt Lang"])[0]
    assert not is_correct("nb04-ex2", ["Jonas Weber", "Kavya Iyer"])[0]  # faculty, but no one in CS
    assert not is_correct("nb04-ex2", ["Amara Okafor", "Marcus Feld"])[0]  # Marcus Feld holds no appointment
    assert not is_correct("nb04-ex2", ["Amara Okafor", "Jonas Weber", "Kavya Iyer"])[0]  # valid, not the fewest
    assert not is_correct("nb04-ex2", ["Amara Okafor", "Amara Okafor"])[0]
    assert not is_correct("nb04-ex2", ["Amara Okafor", "Ada Lovelace"])[0]
    assert not is_correct("nb04-ex2", "Amara Okafor")[0]
    # the old exercise's answer, a committee violating exactly advisor and outside-member, no longer passes
    no_advisor = [member(n, "Computer Science") for n in "ABC"] + [member("D", "Mathematics")]
    assert not is_correct("nb04-ex2", no_advisor)[0]


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
