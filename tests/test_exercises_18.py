"""The notebook 18 exercise checkers accept the right answer and reject wrong ones."""
import math

from lib.exercises import is_correct
from lib.logprobs import renormalize


def test_ex1_decision():
    assert is_correct("nb18-ex1", "ask")[0]
    assert is_correct("nb18-ex1", " ASK ")[0]
    assert not is_correct("nb18-ex1", "hand_over")[0]
    assert not is_correct("nb18-ex1", 3)[0]


def test_ex2_answerability():
    probabilities, _ = renormalize([("yes", -0.7), ("yes", -1.6), ("no", -1.9), ("no", -3.0)], ("yes", "no"))
    assert is_correct("nb18-ex2", probabilities["yes"])[0]
    assert is_correct("nb18-ex2", 0.778)[0]
    assert not is_correct("nb18-ex2", math.exp(-0.7) / (math.exp(-0.7) + math.exp(-1.9)))[0]  # one spelling only
    assert not is_correct("nb18-ex2", "high")[0]


def test_ex3_precision():
    assert is_correct("nb18-ex3", 3 / 4)[0]
    assert not is_correct("nb18-ex3", 3 / 5)[0]
    assert not is_correct("nb18-ex3", True)[0]
