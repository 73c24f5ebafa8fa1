"""The exercise mechanism: correct answers pass, wrong or malformed ones get a hint, never the solution."""
from __future__ import annotations

import pytest

from lib.exercises import check, exercise_ids, is_correct


def test_notebook00_exercises() -> None:
    assert is_correct("nb00-ex1", 20)[0]
    assert is_correct("nb00-ex1", 20.0)[0]
    assert not is_correct("nb00-ex1", 15)[0]  # the reading time forgotten
    assert not is_correct("nb00-ex1", "20 s")[0]
    assert is_correct("nb00-ex2", "length")[0]
    assert not is_correct("nb00-ex2", "stop")[0]
    assert is_correct("nb00-ex3", 0.857)[0]
    assert not is_correct("nb00-ex3", 0.30)[0]  # not renormalised
    assert not is_correct("nb00-ex3", 0.85 / 1.0)[0]  # both spellings counted


def test_check_prints_hint_not_solution(capsys) -> None:
    check("nb00-ex1", None)
    printed = capsys.readouterr().out
    assert "not yet" in printed and "expected" in printed and "20" not in printed
    check("nb00-ex2", "length")
    assert "correct" in capsys.readouterr().out


def test_unknown_exercise() -> None:
    with pytest.raises(KeyError, match="nb00-ex1"):
        check("nb99-ex9", 1)
    assert "nb00-ex1" in exercise_ids()
