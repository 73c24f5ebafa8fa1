"""The notebook 08 exercise checkers accept the right answer and reject wrong ones."""
import math

from lib.exercises import is_correct
from lib.logprobs import renormalize


def test_ex1_renormalised_group():
    candidates = [("A", math.log(0.6)), ("B", math.log(0.2)), ("Hello", math.log(0.15)), (" A", math.log(0.05))]
    probabilities, off_label = renormalize(candidates, ["A", "B"])
    assert is_correct("nb08-ex1", probabilities["A"])[0]
    assert not is_correct("nb08-ex1", 0.6)[0]
    assert not is_correct("nb08-ex1", 0.6 / 0.8)[0]
    assert off_label == 0.15 or math.isclose(off_label, 0.15)


def test_ex2_too_few_candidates():
    top_two, _ = renormalize([("B", math.log(0.5)), ("A", math.log(0.3))], ["A", "B", "C"])
    assert is_correct("nb08-ex2", top_two["B"])[0]
    assert not is_correct("nb08-ex2", 0.5 / 0.9)[0]
    assert not is_correct("nb08-ex2", None)[0]


def test_ex1_accepts_what_read_code_teaches():
    # notebooks 06 (read_code) and 08 (renormalize, FullListDecider) read ' A' the same way, so the
    # exercise's answer is the group probability read_code gives for the same step
    from lib.code_steps import read_code
    from lib.backends.protocol import TokenLogprob

    top = (("A", math.log(0.6)), ("B", math.log(0.2)), ("Hello", math.log(0.15)), (" A", math.log(0.05)))
    reading = read_code([TokenLogprob("A", math.log(0.6), top), TokenLogprob("-A", 0.0, (("-A", 0.0),))],
                        ["A-A", "B-A"])
    assert is_correct("nb08-ex1", reading.p_group)[0]
