"""The notebook 15 exercise checkers accept the right answer and reject wrong ones."""
import math

from lib.exercises import is_correct
from lib.guarantees import conformal_threshold, precision_lower_bound


def test_ex1_lower_bound():
    expected = precision_lower_bound(48, 50, 0.05)
    assert is_correct("nb15-ex1", round(expected, 3))[0]
    assert not is_correct("nb15-ex1", 48 / 50)[0]  # the observed precision, not its bound
    assert not is_correct("nb15-ex1", precision_lower_bound(48, 50, 0.025))[0]  # a two-sided 95% interval's end


def test_ex2_all_right_answers_needed():
    needed = next(n for n in range(1, 1000) if 0.05 ** (1 / n) >= 0.99)
    assert is_correct("nb15-ex2", needed)[0]
    assert not is_correct("nb15-ex2", needed - 1)[0]
    assert not is_correct("nb15-ex2", math.log(0.05) / math.log(0.99))[0]  # not rounded up
    assert not is_correct("nb15-ex2", "three hundred")[0]


def test_ex3_conformal_ranks():
    ranks = tuple(math.floor(0.1 * (n + 1)) for n in (49, 8))
    scores_49, scores_8 = [float(i) for i in range(1, 50)], [float(i) for i in range(1, 9)]
    assert conformal_threshold(scores_49, 0.1) == ranks[0] and conformal_threshold(scores_8, 0.1) == -math.inf
    assert is_correct("nb15-ex3", ranks)[0]
    assert is_correct("nb15-ex3", list(ranks))[0]
    assert not is_correct("nb15-ex3", (4, 0))[0]  # floor(0.1 * 49): n instead of n + 1
    assert not is_correct("nb15-ex3", (5, 1))[0]
    assert not is_correct("nb15-ex3", 5)[0]


def test_ex4_sgr_probes():
    probes = math.ceil(math.log2(3080 + 1))
    assert is_correct("nb15-ex4", (probes, 0.1 / probes))[0]
    assert is_correct("nb15-ex4", [12, 0.0083])[0]
    assert not is_correct("nb15-ex4", (math.ceil(math.log2(3080)), 0.1))[0]  # delta not shared
    assert not is_correct("nb15-ex4", (11, 0.1 / 11))[0]
    assert not is_correct("nb15-ex4", 12)[0]
