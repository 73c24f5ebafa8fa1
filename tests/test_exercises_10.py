"""The notebook 10 exercise checkers accept the right answer and reject wrong ones."""
import math

from lib.exercises import is_correct
from lib.semantic_entropy import discrete_semantic_entropy


def test_ex1_entropy():
    assert is_correct("nb10-ex1", discrete_semantic_entropy([0, 0, 1, 1, 2]))[0]
    assert not is_correct("nb10-ex1", math.log(3))[0]
    assert not is_correct("nb10-ex1", "a lot")[0]


def test_ex2_calls():
    assert is_correct("nb10-ex2", 10)[0]
    assert not is_correct("nb10-ex2", 20)[0]


def test_ex3_cascade_confidence_by_hand():
    semantic = 1 - math.log(2) / math.log(4)  # clusters [0, 0, 1, 1]: two meanings, two samples each
    assert is_correct("nb10-ex3", 0.8 * (0.70 / 0.8 + semantic) / 2)[0]
    assert is_correct("nb10-ex3", 0.55)[0]
    assert not is_correct("nb10-ex3", 0.70)[0]  # the calibrated confidence alone
    assert not is_correct("nb10-ex3", (0.70 + semantic) / 2)[0]  # the mean, not scaled back below the threshold
    assert not is_correct("nb10-ex3", True)[0]
    assert not is_correct("nb10-ex3", "about a half")[0]
