"""Checkers of notebooks 01 and 02: the right answer passes, a wrong or malformed one does not."""
import pytest

from lib.exercises import is_correct


@pytest.mark.parametrize("exercise_id, right, wrong", [
    ("nb01-ex1", "helpdesk/passwords/account-lockout", "helpdesk/passwords/password-rules"),
    ("nb01-ex2", False, True),
    ("nb01-ex3", 400, 40),
    ("nb02-ex1", 0.96, 0.5),
    ("nb02-ex2", 0.4583, 0.6111),
    ("nb02-ex3", "ask", "act"),
])
def test_right_passes_wrong_fails(exercise_id, right, wrong):
    assert is_correct(exercise_id, right)[0]
    assert not is_correct(exercise_id, wrong)[0]


@pytest.mark.parametrize("exercise_id", ["nb01-ex1", "nb01-ex2", "nb01-ex3", "nb02-ex1", "nb02-ex2", "nb02-ex3"])
def test_placeholder_none_is_wrong_with_a_note(exercise_id):
    correct, note = is_correct(exercise_id, None)
    assert not correct and note


def test_strict_match_wants_a_bool():
    assert not is_correct("nb01-ex2", "False")[0]
