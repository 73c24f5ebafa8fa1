"""The notebook 09 exercise checkers accept the right answer and reject wrong ones."""
from lib.calibration import ece
from lib.exercises import is_correct


def test_ex1_ece_by_hand():
    assert is_correct("nb09-ex1", ece([0.9, 0.9, 0.6, 0.6], [0, 1, 1, 1]))[0]
    assert is_correct("nb09-ex1", 0.4)[0]
    assert not is_correct("nb09-ex1", 0.2)[0]
    assert not is_correct("nb09-ex1", "small")[0]


def test_ex2_constant_auroc():
    assert is_correct("nb09-ex2", 0.5)[0]
    assert not is_correct("nb09-ex2", 0.8)[0]
    assert not is_correct("nb09-ex2", None)[0]


def test_ex3_direction():
    assert is_correct("nb09-ex3", "under-confident")[0]
    assert is_correct("nb09-ex3", "Under confident")[0]
    assert not is_correct("nb09-ex3", "over-confident")[0]
    assert not is_correct("nb09-ex3", 0.041)[0]
