"""The notebook 14 exercise checkers accept the right answer and reject wrong ones."""
import math

import numpy as np
import pytest

from lib.exercises import is_correct
from lib.routing import ConformalClassifier, Action, set_router


def test_ex1_break_even():
    p = 0.2
    assert math.isclose(p * 1 + (1 - p) * 6, 5.0)
    assert is_correct("nb14-ex1", 0.2)[0]
    assert not is_correct("nb14-ex1", 0.8)[0]
    assert not is_correct("nb14-ex1", "a fifth")[0]


def test_ex2_conformal_rank_matches_the_library():
    probs = np.eye(3)[np.zeros(19, dtype=int)] * 0.0 + 1 / 3
    scores = np.linspace(0.01, 0.19, 19)
    probs = np.column_stack([1 - scores, scores / 2, scores / 2])
    fitted = ConformalClassifier(alpha=0.1, score="lac").fit(probs, np.zeros(19, dtype=int))
    assert math.isclose(fitted.q_hat_, np.sort(scores)[18 - 1])
    assert is_correct("nb14-ex2", 18)[0]
    assert not is_correct("nb14-ex2", 19)[0]
    assert not is_correct("nb14-ex2", True)[0]


@pytest.mark.parametrize("answer, expected", [("hand_over", True), ("hand over", True), ("ask", False), (None, False)])
def test_ex3_empty_set(answer, expected):
    assert set_router([np.array([], dtype=int)])[0] == Action.HAND_OVER
    assert is_correct("nb14-ex3", answer)[0] is expected
