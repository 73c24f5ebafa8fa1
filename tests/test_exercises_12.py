"""The notebook 11 exercise checkers accept the right answer and reject wrong ones."""
import numpy as np
import pytest

from lib.exercises import is_correct
from lib.runs import load_results
from lib.selective import aurc, auroc


def test_ex1_auroc_by_hand():
    expected = auroc([0.9, 0.8, 0.7, 0.6], [True, False, False, True])
    assert expected == 0.5
    assert is_correct("nb11-ex1", expected)[0]
    assert not is_correct("nb11-ex1", 0.75)[0]
    assert not is_correct("nb11-ex1", "half")[0]


def test_ex2_aurc_by_hand():
    expected = aurc([0.9, 0.8, 0.7], [True, False, True])
    assert is_correct("nb11-ex2", round(expected, 3))[0]
    assert not is_correct("nb11-ex2", 0.333)[0]


def test_ex3_share_of_out_of_scope_handed_over():
    frame = load_results("clinc150", "test", "embed-logreg")
    out_of_scope = (frame["label"] == "oos").to_numpy()
    share = float((frame["confidence"].to_numpy() < 0.5)[out_of_scope].mean())
    assert 0.0 < share < 1.0
    assert is_correct("nb11-ex3", share)[0]
    assert is_correct("nb11-ex3", round(share, 3))[0]
    in_scope_share = float((frame["confidence"].to_numpy() < 0.5)[~out_of_scope].mean())
    assert not is_correct("nb11-ex3", in_scope_share)[0]
    assert not is_correct("nb11-ex3", 1 - share)[0]
    assert not is_correct("nb11-ex3", "most")[0]
