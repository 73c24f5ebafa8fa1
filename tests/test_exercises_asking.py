"""The asking-the-model exercise checkers accept the right answer and reject wrong ones."""
import math

import numpy as np

from lib.asking import CategoryCalibrator, p_true
from lib.calibration import IsotonicCalibrator
from lib.exercises import is_correct
from lib.selective import auroc


def test_ex1_category_map():
    words = ["certain"] * 50 + ["likely"] * 20 + ["guessing"] * 10
    right = [True] * 31 + [False] * 19 + [True] * 9 + [False] * 11 + [True] * 2 + [False] * 8
    fitted = CategoryCalibrator().fit(words, right).predict(["certain", "unsure"])
    assert is_correct("nbask-ex1", tuple(fitted))[0]
    assert not is_correct("nbask-ex1", (0.62, 0.0))[0]  # a word nobody said is not impossible
    assert not is_correct("nbask-ex1", 0.62)[0]


def test_ex2_flat_isotonic_auroc():
    calibration = IsotonicCalibrator().fit([0.5, 0.5, 1.0, 1.0], [True, False, False, True])
    test_numbers, test_right = np.array([1.0, 0.5, 1.0, 0.5]), np.array([True, True, False, False])
    assert is_correct("nbask-ex2", auroc(calibration.predict(test_numbers), test_right))[0]
    assert not is_correct("nbask-ex2", auroc(test_numbers, test_right) + 0.25)[0]
    assert not is_correct("nbask-ex2", True)[0]


def test_ex3_bounded_p_true():
    assert is_correct("nbask-ex3", p_true({"Yes": -0.1}, lowest_candidate=-5.0).probability)[0]
    assert not is_correct("nbask-ex3", 1.0)[0]  # renormalised over Yes alone: the inflated reading
    assert not is_correct("nbask-ex3", math.exp(-0.1))[0]
