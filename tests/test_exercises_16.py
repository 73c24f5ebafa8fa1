"""The notebook 16 exercise checkers accept the right answer and reject wrong ones."""
from lib.exercises import is_correct
from lib.saved_runs.decisions import load_results


def test_ex1_share_of_out_of_scope_handed_over():
    frame = load_results("clinc150", "test", "embed-logreg")
    out_of_scope = (frame["label"] == "oos").to_numpy()
    share = float((frame["confidence"].to_numpy() < 0.5)[out_of_scope].mean())
    assert 0.0 < share < 1.0
    assert is_correct("nb16-ex1", share)[0]
    assert is_correct("nb16-ex1", round(share, 3))[0]
    in_scope_share = float((frame["confidence"].to_numpy() < 0.5)[~out_of_scope].mean())
    assert not is_correct("nb16-ex1", in_scope_share)[0]
    assert not is_correct("nb16-ex1", 1 - share)[0]
    assert not is_correct("nb16-ex1", "most")[0]


def test_ex2_share_of_second_step_errors_with_a_confident_group():
    frame = load_results("banking77", "test", "full")
    second_step_error = (frame["in_candidates"] & ~frame["correct"]).to_numpy(bool)
    confident_group = (frame["p_group"] >= 0.5).to_numpy(bool)
    share = float(confident_group[second_step_error].mean())
    assert 0.0 < share < 1.0
    assert is_correct("nb16-ex2", share)[0]
    assert is_correct("nb16-ex2", round(share, 3))[0]
    assert not is_correct("nb16-ex2", 1 - share)[0]  # the share with p_group below 0.5
    assert not is_correct("nb16-ex2", float(confident_group[~frame["correct"].to_numpy(bool)].mean()))[0]  # all wrong answers
    calibration = load_results("banking77", "calibration", "full")
    old_answer = int((calibration["in_candidates"] & ~calibration["correct"]).sum()) / int((~calibration["correct"]).sum())
    assert not is_correct("nb16-ex2", old_answer)[0]  # the share printed by the notebook's own cells
    assert not is_correct("nb16-ex2", "most")[0]
