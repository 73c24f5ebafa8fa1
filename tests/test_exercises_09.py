"""The notebook 09 exercise checkers accept the right answer and reject wrong ones."""
import math

import numpy as np

from lib.asking import CategoryCalibrator, p_true
from lib.exercises import is_correct
from lib.selective import auroc


def test_ex1_category_map():
    words = ["certain"] * 50 + ["likely"] * 20 + ["guessing"] * 10
    right = [True] * 31 + [False] * 19 + [True] * 9 + [False] * 11 + [True] * 2 + [False] * 8
    fitted = CategoryCalibrator().fit(words, right).predict(["certain", "unsure"])
    assert is_correct("nb09-ex1", tuple(fitted))[0]
    assert not is_correct("nb09-ex1", (0.62, 0.0))[0]  # a word nobody said is not impossible
    assert not is_correct("nb09-ex1", 0.62)[0]


def test_ex2_isotonic_ties_a_pair_in_the_right_order():
    numbers, right = np.array([90, 70, 70, 50]) / 100, np.array([True, False, True, False])
    mapped = np.array([0.8, 0.5, 0.5, 0.5])
    assert is_correct("nb09-ex2", (auroc(numbers, right), auroc(mapped, right)))[0]
    assert not is_correct("nb09-ex2", (0.875, 0.875))[0]  # a monotone map can lower AUROC through ties
    assert not is_correct("nb09-ex2", 0.75)[0]


def test_ex3_bounded_p_true():
    assert is_correct("nb09-ex3", p_true({"Yes": -0.1}, lowest_candidate=-5.0).probability)[0]
    assert not is_correct("nb09-ex3", 1.0)[0]  # renormalised over Yes alone: the inflated reading
    assert not is_correct("nb09-ex3", math.exp(-0.1))[0]
