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


def test_ex3_decisions_the_server_could_flip():
    from lib.saved_runs.drift import drift_table
    from lib.exercises import NB07_EX3_CONFIDENCES, NB07_EX3_LARGEST_CHANGE

    table = drift_table()
    server = table[(table["pair"] == "embedded vs llama_cpp.server") & (table["requests"] == "decisions")].iloc[0]
    assert round(server["largest"], 2) == NB07_EX3_LARGEST_CHANGE, "the exercise states the saved run's largest change"
    assert round(server["p99"], 2) == 0.04, "and its 99th percentile"
    assert sorted(c for c in NB07_EX3_CONFIDENCES if abs(c - 0.90) <= 0.11) == [0.85, 0.905, 0.93, 0.991]
    assert is_correct("nb07-ex3", 4)[0]
    assert is_correct("nb07-ex3", 4.0)[0]
    assert not is_correct("nb07-ex3", 2)[0]  # within the 99th percentile instead of the largest change
    assert not is_correct("nb07-ex3", 5)[0]
    assert not is_correct("nb07-ex3", True)[0]
    assert not is_correct("nb07-ex3", 4.5)[0]
