"""The notebook 05 exercise checkers accept the right answer and reject wrong ones."""
import pytest

from lib.exercises import is_correct


def test_ex1_code_tokens(monkeypatch):
    monkeypatch.setenv("WORKBOOK_MODE", "replay")  # answered from notebook 05's recording, no model needed
    assert is_correct("nb05-ex1", 2)[0]
    assert not is_correct("nb05-ex1", 3)[0]
    assert not is_correct("nb05-ex1", "two")[0]


@pytest.mark.parametrize("answer, expected", [(1.0, True), (1, True), (0.9, False), ("all", False)])
def test_ex2_valid_share(answer, expected):
    assert is_correct("nb05-ex2", answer)[0] is expected


def test_ex3_intent_step():
    assert is_correct("nb05-ex3", 3)[0]
    assert not is_correct("nb05-ex3", 2)[0]
