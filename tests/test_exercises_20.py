"""The notebook 20 exercise checkers accept the right answer and reject wrong ones."""
from lib.assistant_fitting import FINALE_SETTINGS
from lib.exercises import is_correct

COSTS = FINALE_SETTINGS.costs


def test_ex1_break_even_of_answering_against_handing_over():
    assert is_correct("nb20-ex1", 1 - 5 / 20)[0] and is_correct("nb20-ex1", 0.75)[0]
    assert not is_correct("nb20-ex1", 5 / 20)[0]
    assert not is_correct("nb20-ex1", 1 - COSTS["hand_over"] / COSTS["act_wrong"])[0]  # the notebook's costs, printed there
    assert not is_correct("nb20-ex1", True)[0]


def test_ex2_expected_cost_of_a_question_back():
    assert is_correct("nb20-ex2", 0.7 * COSTS["ask"] + 0.3 * (COSTS["ask"] + COSTS["hand_over"]))[0]
    assert not is_correct("nb20-ex2", COSTS["ask"])[0]  # the hand-over after a miss forgotten
    assert not is_correct("nb20-ex2", "3.2 minutes")[0]


def test_ex3_the_cheapest_decision_is_to_ask():
    p_right, helps = 0.75, 0.7
    prices = {"act": COSTS["act_wrong"] * (1 - p_right),
              "ask": COSTS["ask"] + (1 - helps) * COSTS["hand_over"], "hand_over": COSTS["hand_over"]}
    cheapest = min(prices, key=prices.get)
    assert cheapest == "ask" and is_correct("nb20-ex3", cheapest)[0] and is_correct("nb20-ex3", "Ask")[0]
    assert not is_correct("nb20-ex3", "act")[0] and not is_correct("nb20-ex3", "hand_over")[0]
