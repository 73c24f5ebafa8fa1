"""The notebook 17 exercise checkers accept the right answer and reject wrong ones."""
import math

import numpy as np

from lib.exercises import is_correct
from lib.routing import ConformalClassifier, mean_cost


def test_ex1_break_even():
    p = 0.2
    assert math.isclose(p * 1 + (1 - p) * 6, 5.0)
    assert is_correct("nb17-ex1", 0.2)[0]
    assert not is_correct("nb17-ex1", 0.8)[0]
    assert not is_correct("nb17-ex1", "a fifth")[0]


def test_ex2_conformal_rank_matches_the_library():
    probs = np.eye(3)[np.zeros(19, dtype=int)] * 0.0 + 1 / 3
    scores = np.linspace(0.01, 0.19, 19)
    probs = np.column_stack([1 - scores, scores / 2, scores / 2])
    fitted = ConformalClassifier(alpha=0.1, score="lac").fit(probs, np.zeros(19, dtype=int))
    assert math.isclose(fitted.q_hat_, np.sort(scores)[18 - 1])
    assert is_correct("nb17-ex2", 18)[0]
    assert not is_correct("nb17-ex2", 19)[0]
    assert not is_correct("nb17-ex2", True)[0]


def test_ex3_act_beats_ask_above_the_break_even():
    # ACT costs 30 (1 - p); ASK costs 0.5 when the right label is offered (95%) and 0.5 + 4 when not.
    p = 1 - (0.95 * 0.5 + 0.05 * 4.5) / 30
    costs = {"act_wrong": 30.0, "ask": 0.5, "hand_over": 4.0}
    # the library's cost model agrees: at the break-even, acting and asking cost the same on average
    correct = np.array([True] * 2930 + [False] * 70)          # right 2930 / 3000 = p of the time
    offered = np.array([True] * 2850 + [False] * 150)         # right label offered 95% of the time
    act_cost = mean_cost(["act"] * 3000, correct, costs, offered)
    ask_cost = mean_cost(["ask"] * 3000, correct, costs, offered)
    assert math.isclose(ask_cost, 0.7) and math.isclose(act_cost, ask_cost)
    assert math.isclose(30 * (1 - p), ask_cost)
    assert is_correct("nb17-ex3", round(p, 3))[0]
    assert not is_correct("nb17-ex3", 0.98)[0]          # ASK costed on the top answer alone would give another p
    assert not is_correct("nb17-ex3", 1 - 4.5 / 30)[0]
    assert not is_correct("nb17-ex3", "hand_over")[0]
