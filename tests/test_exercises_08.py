"""The notebook 08 exercise checkers accept the right answer and reject wrong ones."""
import math

from lib.exercises import is_correct
from lib.semantic_entropy import discrete_semantic_entropy
from lib.text import matches_gold


def test_ex1_entropy():
    assert is_correct("nb08-ex1", discrete_semantic_entropy([0, 0, 1, 1, 2]))[0]
    assert not is_correct("nb08-ex1", math.log(3))[0]
    assert not is_correct("nb08-ex1", "a lot")[0]


def test_ex2_calls():
    assert is_correct("nb08-ex2", 10)[0]
    assert not is_correct("nb08-ex2", 20)[0]


def test_ex3_matches_gold():
    assert is_correct("nb08-ex3", matches_gold("thirty-six credits", "36 credits"))[0]
    assert not is_correct("nb08-ex3", False)[0]
    assert not is_correct("nb08-ex3", "yes")[0]
