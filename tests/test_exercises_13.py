"""The notebook 13 exercise checkers accept the right answer and reject wrong ones."""
import numpy as np

from lib.exercises import is_correct


def test_ex1_pav_by_hand():
    # outcomes 0 1 1 0 0 1: the 0 at 0.4 pools with both 1s before it (2/3), the 0 at 0.5 pulls that block to 1/2
    assert is_correct("nb13-ex1", [0, 0.5, 0.5, 0.5, 0.5, 1])[0]
    assert is_correct("nb13-ex1", np.array([0.0, 0.5, 0.5, 0.5, 0.5, 1.0]))[0]
    assert not is_correct("nb13-ex1", [0, 1, 1, 0, 0, 1])[0]  # the outcomes themselves
    assert not is_correct("nb13-ex1", [0, 2 / 3, 2 / 3, 2 / 3, 0, 1])[0]  # stopped merging too early
    assert not is_correct("nb13-ex1", [0, 0.5, 0.5, 0.5, 0.5])[0]
    assert not is_correct("nb13-ex1", "0 .5 .5 .5 .5 1")[0]
    assert not is_correct("nb13-ex1", 0.5)[0]


def test_ex2_isotonic_auroc_on_its_own_data():
    # staircase 0, 1/2, 1/2, 1: the misordered (0.4 right, 0.6 wrong) pair becomes a tie worth half
    assert is_correct("nb13-ex2", 3.5 / 4)[0]
    assert not is_correct("nb13-ex2", 0.75)[0]  # the raw AUROC
    assert not is_correct("nb13-ex2", 1.0)[0]
    assert not is_correct("nb13-ex2", True)[0]


def test_ex3_histogram_binning_by_hand():
    assert is_correct("nb13-ex3", (1.0, 0.5))[0]
    assert is_correct("nb13-ex3", [1, 0.5])[0]
    assert not is_correct("nb13-ex3", (0.5, 1.0))[0]
    assert not is_correct("nb13-ex3", (0.75, 0.75))[0]
    assert not is_correct("nb13-ex3", 1.0)[0]
