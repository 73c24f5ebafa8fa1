"""Checkers of notebook 03's exercises: the right answer passes, wrong or malformed ones fail."""
from lib.exercises import is_correct


def test_nb03_ex1():
    assert is_correct("nb03-ex1", "elided")[0]
    assert not is_correct("nb03-ex1", "stitched")[0]
    assert not is_correct("nb03-ex1", 3)[0]


def test_nb03_ex2():
    assert is_correct("nb03-ex2", "THE STANDARD  STIPEND is 3,140 per month")[0]
    assert not is_correct("nb03-ex2", "the standard stipend is 3,140 per month")[0]  # exact, not normalised
    assert not is_correct("nb03-ex2", "the standard stipend is 3,410 per month")[0]
    assert not is_correct("nb03-ex2", None)[0]


def test_nb03_ex3():
    assert is_correct("nb03-ex3", 80)[0]
    assert not is_correct("nb03-ex3", 81)[0]
    assert not is_correct("nb03-ex3", 400)[0]
    assert not is_correct("nb03-ex3", "eighty")[0]
