"""The notebook 13 exercise checkers accept the right answer and reject wrong ones."""
from lib.exercises import is_correct
from lib.runs import load_results


def test_ex1_share_of_out_of_scope_handed_over():
    frame = load_results("clinc150", "test", "embed-logreg")
    out_of_scope = (frame["label"] == "oos").to_numpy()
    share = float((frame["confidence"].to_numpy() < 0.5)[out_of_scope].mean())
    assert 0.0 < share < 1.0
    assert is_correct("nb13-ex1", share)[0]
    assert is_correct("nb13-ex1", round(share, 3))[0]
    in_scope_share = float((frame["confidence"].to_numpy() < 0.5)[~out_of_scope].mean())
    assert not is_correct("nb13-ex1", in_scope_share)[0]
    assert not is_correct("nb13-ex1", 1 - share)[0]
    assert not is_correct("nb13-ex1", "most")[0]


def test_ex2_right_group_share_of_the_wrong_answers():
    frame = load_results("banking77", "calibration", "full")
    wrong = ~frame["correct"]
    right_group_wrong_intent = int((frame["in_candidates"] & wrong).sum())
    share = right_group_wrong_intent / int(wrong.sum())
    assert 0.0 < share < 1.0
    assert is_correct("nb13-ex2", share)[0]
    assert is_correct("nb13-ex2", round(share, 3))[0]
    assert not is_correct("nb13-ex2", 1 - share)[0]  # the wrong-group share
    assert not is_correct("nb13-ex2", right_group_wrong_intent / len(frame))[0]  # a share of all answers
    assert not is_correct("nb13-ex2", "most")[0]
