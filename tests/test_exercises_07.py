"""The notebook 07 exercise checkers accept the right answer and reject wrong ones."""
import math

from lib.exercises import is_correct
from lib.logprobs import perplexity, sequence_confidence


def test_ex1_perplexity():
    assert is_correct("nb07-ex1", perplexity([math.log(0.5), math.log(0.5), 0.0]))[0]
    assert not is_correct("nb07-ex1", 2.0)[0]
    assert not is_correct("nb07-ex1", "low")[0]


def test_ex2_geometric_mean_gap():
    a = [math.log(0.9)] * 6 + [math.log(0.1)]
    b = [math.log(0.7)] * 2
    gap = sequence_confidence(a, "geometric") - sequence_confidence(b, "geometric")
    assert gap < 0 < sequence_confidence(a, "mean") - sequence_confidence(b, "mean"), "the two means must disagree here"
    assert is_correct("nb07-ex2", gap)[0]
    assert is_correct("nb07-ex2", round(gap, 3))[0]
    assert not is_correct("nb07-ex2", -gap)[0]
    assert not is_correct("nb07-ex2", sequence_confidence(a, "mean") - sequence_confidence(b, "mean"))[0]
    assert not is_correct("nb07-ex2", "B")[0]


def test_ex3_decisions_a_drift_could_flip():
    from lib.exercises import NB07_EX3_CONFIDENCES

    within = [c for c in NB07_EX3_CONFIDENCES if abs(c - 0.90) <= 0.04]
    assert len(within) == 2, "0.93 and 0.905 lie within 0.04 of 0.90; 0.85 lies 0.05 away"
    assert is_correct("nb07-ex3", 2)[0]
    assert is_correct("nb07-ex3", 2.0)[0]
    assert not is_correct("nb07-ex3", 3)[0]  # counting 0.85 too
    assert not is_correct("nb07-ex3", 5)[0]
    assert not is_correct("nb07-ex3", True)[0]
    assert not is_correct("nb07-ex3", 2.5)[0]
