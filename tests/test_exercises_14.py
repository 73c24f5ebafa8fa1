"""The notebook 14 exercise checkers accept the right answer and reject wrong ones."""
from lib.exercises import is_correct
from lib.selective import aurc, auroc


def test_ex1_auroc_by_hand():
    expected = auroc([0.9, 0.8, 0.7, 0.6], [True, False, False, True])
    assert expected == 0.5
    assert is_correct("nb14-ex1", expected)[0]
    assert not is_correct("nb14-ex1", 0.75)[0]
    assert not is_correct("nb14-ex1", "half")[0]


def test_ex2_aurc_by_hand():
    expected = aurc([0.9, 0.8, 0.7], [True, False, True])
    assert is_correct("nb14-ex2", round(expected, 3))[0]
    assert not is_correct("nb14-ex2", 0.333)[0]
