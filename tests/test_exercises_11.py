"""The notebook 11 exercise checkers accept the right answer and reject wrong ones."""
from lib.calibration import ece
from lib.exercises import is_correct


def test_ex1_ece_by_hand():
    assert is_correct("nb11-ex1", ece([0.9, 0.9, 0.6, 0.6], [0, 1, 1, 1]))[0]
    assert is_correct("nb11-ex1", 0.4)[0]
    assert not is_correct("nb11-ex1", 0.2)[0]
    assert not is_correct("nb11-ex1", "small")[0]


def test_ex2_brier_by_hand():
    assert is_correct("nb11-ex2", (0.9**2 + 0.1**2 + 0.4**2 + 0.4**2) / 4)[0]
    assert is_correct("nb11-ex2", 0.285)[0]
    assert not is_correct("nb11-ex2", 0.4)[0]  # the ECE of exercise 1
    assert not is_correct("nb11-ex2", (0.9 + 0.1 + 0.4 + 0.4) / 4)[0]  # absolute, not squared
    assert not is_correct("nb11-ex2", None)[0]


def test_ex3_constant_brier_by_hand():
    assert is_correct("nb11-ex3", (0.75**2 + 3 * 0.25**2) / 4)[0]
    assert is_correct("nb11-ex3", 0.1875)[0]
    assert not is_correct("nb11-ex3", 0.285)[0]
    assert not is_correct("nb11-ex3", 0.0)[0]  # the constant's ECE, not its Brier score
    assert not is_correct("nb11-ex3", "lower")[0]
