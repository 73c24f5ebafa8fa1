"""The notebook 21 exercise checkers accept the right answer and reject wrong ones."""
import numpy as np

from lib.exercises import is_correct
from lib.selective import auroc


def test_ex4_a_number_with_two_values_ranks_by_the_difference_of_its_shares():
    right = np.array([True] * 42 + [False] * 958)
    number = np.array([100] * 29 + [50] * 13 + [100] * 656 + [50] * 302) / 100
    assert is_correct("nb21-ex4", auroc(number, right))[0]
    assert not is_correct("nb21-ex4", 29 / 42)[0]  # the share of right decisions that said 100 is no ranking
    assert not is_correct("nb21-ex4", 0.5)[0]  # not every decision said 100
    assert not is_correct("nb21-ex4", 29 / 42 * (1 - 656 / 958))[0]  # ties count one half, not zero
