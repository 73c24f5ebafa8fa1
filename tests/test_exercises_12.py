"""The notebook 12 exercise checkers accept the right answer and reject wrong ones."""
import numpy as np
from scipy.special import softmax

from lib.exercises import is_correct


def test_ex1_temperature_two():
    assert is_correct("nb12-ex1", float(softmax(np.log([0.8, 0.2]) / 2).max()))[0]
    assert not is_correct("nb12-ex1", 0.8)[0]
    assert not is_correct("nb12-ex1", "two thirds")[0]


def test_ex2_temperature_fitted_by_hand():
    logprobs = np.log([[0.9, 0.1], [0.9, 0.1], [0.2, 0.8]])  # right option first
    grid = np.linspace(0.5, 4.0, 35001)
    mean_nll = [-np.mean(np.log(softmax(logprobs / t, axis=1)[:, 0])) for t in grid]
    fitted = float(grid[int(np.argmin(mean_nll))])
    assert 1.6 < fitted < 1.8  # above 1: the confident mistake makes the fit flatten
    assert is_correct("nb12-ex2", round(fitted, 2))[0]
    for wrong in (1.0, 0.58, 2.0):
        assert not is_correct("nb12-ex2", wrong)[0]
    assert not is_correct("nb12-ex2", "over-confident")[0]


def test_ex3_temperature_where_the_ranking_flips():
    a, b = np.log([0.7, 0.3]), np.log([0.6, 0.1, 0.1, 0.1, 0.1])
    grid = np.linspace(0.5, 1.0, 50001)
    gap = np.array([softmax(a / t).max() - softmax(b / t).max() for t in grid])
    crossing = float(grid[np.argmin(np.abs(gap))])
    assert 0.6 < crossing < 0.75
    assert is_correct("nb12-ex3", round(crossing, 2))[0]
    assert is_correct("nb12-ex3", crossing)[0]
    for wrong in (0.5, 1.0, 0.75, 0.6):
        assert not is_correct("nb12-ex3", wrong)[0]
    assert not is_correct("nb12-ex3", "about 0.7")[0]
