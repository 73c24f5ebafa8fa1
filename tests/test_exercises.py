"""The exercise mechanism: correct answers pass, wrong or malformed ones get a hint, never the solution."""
from __future__ import annotations

import pytest

from lib.exercises import check, exercise_ids, is_correct


def test_notebook00_exercises() -> None:
    assert is_correct("nb00-ex1", "WORKBOOK_MODE")[0]
    assert is_correct("nb00-ex1", " workbook_mode ")[0]
    assert not is_correct("nb00-ex1", "WORKBOOK_BACKEND")[0]
    assert is_correct("nb00-ex2", "length")[0]
    assert not is_correct("nb00-ex2", "stop")[0]
    assert is_correct("nb00-ex3", 5)[0]
    assert not is_correct("nb00-ex3", 4)[0]
    assert not is_correct("nb00-ex3", 5.5)[0]


def test_check_prints_hint_not_solution(capsys) -> None:
    check("nb00-ex1", None)
    printed = capsys.readouterr().out
    assert "not yet" in printed and "expected" in printed and "WORKBOOK_MODE" not in printed
    check("nb00-ex2", "length")
    assert "correct" in capsys.readouterr().out


def test_unknown_exercise() -> None:
    with pytest.raises(KeyError, match="nb00-ex1"):
        check("nb99-ex9", 1)
    assert "nb00-ex1" in exercise_ids()
