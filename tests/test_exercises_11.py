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


@pytest.mark.parametrize("answer, expected", [("similarity", True), (" Similarity ", True), ("margin", False), (3, False)])
def test_ex3_answer_forms(answer, expected):
    assert is_correct("nb11-ex3", answer)[0] is expected


def test_ex3_matches_the_saved_results():
    frame = load_results("clinc150", "test", "knn")
    in_scope = (frame["label"] != "oos").to_numpy()
    assert auroc(frame["similarity"], in_scope) > auroc(frame["margin"], in_scope)
