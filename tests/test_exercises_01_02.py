"""Checkers of notebooks 01 and 02: the right answer passes, a wrong or malformed one does not."""
import re

import pytest

from lib.exercises import is_correct
from lib.text import normalize_text


@pytest.mark.parametrize("exercise_id, right, wrong", [
    ("nb01-ex1", "helpdesk/passwords/account-lockout", "helpdesk/passwords/password-rules"),
    ("nb01-ex2", "bd", "abd"),
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


def test_strict_match_key_is_what_the_notebooks_rule_counts():
    # The rule of notebook 01's mentions(): gold as whole words after normalize_text.
    replies = {"a": "It takes 60 calendar days.", "b": "Within 60 days.", "c": "It is 160 days.",
               "d": "60 Days, counted from the request.", "e": "Sixty days."}
    pattern = rf"(?<!\w){re.escape(normalize_text('60 days'))}(?!\w)"
    counted = "".join(letter for letter, reply in replies.items() if re.search(pattern, normalize_text(reply)))
    assert is_correct("nb01-ex2", counted)[0]
    assert is_correct("nb01-ex2", "d, b")[0]
    for near in ("b", "d", "bde", "abcde"):
        assert not is_correct("nb01-ex2", near)[0]
    assert is_correct("nb01-ex2", "bz")[1]  # a letter that is not a reply gets a note
