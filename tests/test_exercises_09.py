"""The notebook 09 exercise checkers accept the right answer and reject wrong ones."""
import numpy as np
from scipy.special import softmax

from lib.exercises import is_correct


def test_ex1_temperature_two():
    assert is_correct("nb09-ex1", float(softmax(np.log([0.8, 0.2]) / 2).max()))[0]
    assert not is_correct("nb09-ex1", 0.8)[0]
    assert not is_correct("nb09-ex1", "two thirds")[0]


def test_ex2_direction():
    assert is_correct("nb09-ex2", "over-confident")[0]
    assert not is_correct("nb09-ex2", "under-confident")[0]


def test_ex3_choice_unchanged():
    assert is_correct("nb09-ex3", False)[0]
    assert not is_correct("nb09-ex3", True)[0]
    assert not is_correct("nb09-ex3", "no")[0]
