"""The notebook 06 exercise checkers accept the right answer and reject wrong ones."""
import pytest

from lib.exercises import is_correct


@pytest.mark.parametrize("answer, expected", [(27, True), (27.0, True), (104, False), (77, False),
                                              (27.5, False), ("27", False), (True, False)])
def test_ex1_lazy_grammar(answer, expected):
    assert is_correct("nb06-ex1", answer)[0] is expected


@pytest.mark.parametrize("answer, expected", [(0.25, True), (0.75, False), (0.15, False), ("a quarter", False)])
def test_ex2_off_label_mass(answer, expected):
    assert is_correct("nb06-ex2", answer)[0] is expected


@pytest.mark.parametrize("answer, expected", [(0.75, True), (0.3, False), (0.25, False), (3, False)])
def test_ex3_intent_at_the_third_step(answer, expected):
    assert is_correct("nb06-ex3", answer)[0] is expected


@pytest.mark.parametrize("exercise_id", ["nb06-ex1", "nb06-ex2", "nb06-ex3"])
def test_placeholder_none_is_wrong_with_a_note(exercise_id):
    correct, note = is_correct(exercise_id, None)
    assert not correct and note
