"""Every exercise answers any input with "correct" or a hint, and takes numpy values as the Python ones."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import softmax

from lib.exercises import check, exercise_ids, is_correct
from lib.logprobs import sequence_confidence
from lib.saved_runs.decisions import load_results
from lib.selective import aurc

BAD_ANSWERS = {"10**400": 10**400, "-10**400": -10**400, "inf": math.inf, "-inf": -math.inf, "nan": math.nan,
               "np.nan": np.nan, "1e308": 1e308, "-1": -1, "0": 0, "1j": 1j, "'abc'": "abc", "''": "",
               "b'18'": b"18", "[]": [], "[1, 2]": [1, 2], "(1,)": (1,), "None": None, "{}": {}, "{'a': 1}": {"a": 1},
               "object()": object(), "np.array([1.0, 2.0])": np.array([1.0, 2.0])}


@pytest.mark.parametrize("exercise_id", exercise_ids())
@pytest.mark.parametrize("answer", list(BAD_ANSWERS.values()), ids=list(BAD_ANSWERS))
def test_a_bad_answer_gets_a_hint_not_a_traceback(exercise_id, answer, capsys):
    correct, _ = is_correct(exercise_id, answer)
    assert not correct
    check(exercise_id, answer)
    printed = capsys.readouterr().out
    assert printed.startswith(f"❌ {exercise_id}: not yet") and "Hint:" in printed


def _temperature_where_ranking_flips() -> float:
    message_a, message_b = np.log([0.7, 0.3]), np.log([0.6, 0.1, 0.1, 0.1, 0.1])
    return brentq(lambda t: softmax(message_a / t).max() - softmax(message_b / t).max(), 0.5, 1.0)


def _clinc_handed_over_share() -> float:
    frame = load_results("clinc150", "test", "embed-logreg")
    return float((frame["confidence"].to_numpy() < 0.5)[(frame["label"] == "oos").to_numpy()].mean())


def _confident_group_share_of_second_step_errors() -> float:
    frame = load_results("banking77", "test", "full")
    second_step_error = (frame["in_candidates"] & ~frame["correct"]).to_numpy(bool)
    return float((frame["p_group"].to_numpy() >= 0.5)[second_step_error].mean())


def _geometric_mean_gap() -> float:
    return (sequence_confidence([math.log(0.9)] * 6 + [math.log(0.1)], "geometric")
            - sequence_confidence([math.log(0.7)] * 2, "geometric"))


RIGHT_ANSWERS = {
    "nb00-ex1": 20, "nb00-ex2": "length", "nb00-ex3": 0.857,
    "nb01-ex1": "helpdesk/passwords/account-lockout", "nb01-ex2": "bd", "nb01-ex3": 400,
    "nb02-ex1": 0.96, "nb02-ex2": 0.4583, "nb02-ex3": "ask",
    "nb03-ex1": "acde", "nb03-ex2": "THE STANDARD  STIPEND is 3,140 per month", "nb03-ex3": 128,
    "nb06-ex1": 27, "nb06-ex2": 0.25, "nb06-ex3": 0.75,
    "nb07-ex1": 2 ** (2 / 3), "nb07-ex2": _geometric_mean_gap, "nb07-ex3": 4,
    "nb08-ex1": 0.65 / 0.85, "nb08-ex2": 0.625,
    "nb09-ex1": (0.62, 0.525), "nb09-ex2": (0.875, 0.75), "nb09-ex3": 0.9926,
    "nb10-ex1": -(0.8 * math.log(0.4) + 0.2 * math.log(0.2)), "nb10-ex2": 10, "nb10-ex3": 0.55,
    "nb11-ex1": 0.4, "nb11-ex2": 0.285, "nb11-ex3": 0.1875,
    "nb12-ex1": 2 / 3, "nb12-ex2": 1.72, "nb12-ex3": _temperature_where_ranking_flips,
    "nb13-ex1": [0, 0.5, 0.5, 0.5, 0.5, 1], "nb13-ex2": 0.875, "nb13-ex3": (1.0, 0.5),
    "nb14-ex1": 0.5, "nb14-ex2": lambda: aurc([0.9, 0.8, 0.7], [True, False, True]),
    "nb15-ex1": 0.879, "nb15-ex2": 299, "nb15-ex3": (5, 0), "nb15-ex4": (12, 0.1 / 12),
    "nb16-ex1": _clinc_handed_over_share, "nb16-ex2": _confident_group_share_of_second_step_errors,
    "nb17-ex1": 0.2, "nb17-ex2": 18, "nb17-ex3": 0.977,
    "nb18-ex1": "ask", "nb18-ex2": 0.778, "nb18-ex3": 0.75,
    "nb19-ex1": 2, "nb19-ex2": "no", "nb19-ex3": "yes",
    "nb20-ex1": 0.75, "nb20-ex2": 3.2, "nb20-ex3": "ask",
    "nb21-ex1": 30, "nb21-ex2": (0.0, 0.5), "nb21-ex3": "large", "nb21-ex4": 0.5029,
}
"""A right answer per exercise whose answer numpy can hold (not nb04's lists of rule names, records and names, nor nb05's pairs)."""


def _numpy_versions(answer):
    """The values numpy and pandas hand a learner for `answer`: numpy scalars of each width and a 0-d array."""
    if isinstance(answer, bool):
        return [np.bool_(answer), np.array(answer)]
    if isinstance(answer, int):
        return [np.int64(answer), np.int32(answer), np.uint16(answer), np.float64(answer), np.array(answer)]
    if isinstance(answer, float):
        return [np.float64(answer), np.float32(answer), np.array(answer)]
    if isinstance(answer, (list, tuple)):
        return [np.array(answer, dtype=float), [np.float64(value) for value in answer]]
    return [np.str_(answer), np.array(answer)]


def test_every_exercise_but_the_record_ones_has_a_right_answer_here():
    assert set(exercise_ids()) - set(RIGHT_ANSWERS) == {"nb04-ex1", "nb04-ex2", "nb04-ex3", "nb05-ex1", "nb05-ex2",
                                                         "nb05-ex3"}


@pytest.mark.parametrize("exercise_id", sorted(RIGHT_ANSWERS))
def test_a_right_answer_as_a_numpy_value_is_right(exercise_id):
    answer = RIGHT_ANSWERS[exercise_id]
    answer = answer() if callable(answer) else answer
    assert is_correct(exercise_id, answer) == (True, "")
    for version in _numpy_versions(answer):
        assert is_correct(exercise_id, version) == (True, ""), f"{type(version).__name__} {version!r}"


@pytest.mark.parametrize("answer, expected", [(3, 3), (3.0, 3), (np.int64(3), 3), (np.float32(3), 3)])
def test_whole_number_reads_a_whole_number_in_any_numeric_form(answer, expected):
    from lib.answers import whole_number

    assert whole_number(answer) == expected


@pytest.mark.parametrize("answer", [True, 2.5, "two", "3", np.array([3]), math.inf])
def test_whole_number_refuses_what_is_not_one(answer):
    from lib.answers import whole_number

    with pytest.raises((TypeError, ValueError)):
        whole_number(answer)
