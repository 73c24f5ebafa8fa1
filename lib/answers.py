"""Judging a learner's answer to an exercise, without ever printing the solution.

An exercise is a checker function registered under its id (`exercise`) with the hint a learner
sees on a wrong answer; `check` prints "correct" or that hint, and `is_correct` judges without
printing. A malformed answer (wrong type, unparsable) counts as wrong, with a note on what was
expected; numbers and strings are read strictly (`real_number`, `normalized_answer`), so an object
that compares equal to anything, or a string of digits, never passes. The comparisons checkers share (`normalized_answer`, `real_number`, `whole_number`, `close_to`,
`all_close_to`) live here too; the exercises themselves are registered by `lib.exercises`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from lib.text import normalize_text

__all__ = ["Exercise", "exercise", "exercise_ids", "plain_answer", "is_correct", "check", "normalized_answer",
           "real_number", "whole_number", "close_to", "all_close_to"]


@dataclass(frozen=True)
class Exercise:
    """One exercise: how to judge an answer and what to tell a learner who is not there yet."""

    exercise_id: str
    is_correct: Callable[[Any], bool]
    hint: str
    expects: str


_REGISTRY: dict[str, Exercise] = {}


def exercise(exercise_id: str, *, hint: str, expects: str) -> Callable[[Callable[[Any], bool]], Callable[[Any], bool]]:
    """Register a checker function under `exercise_id` (decorator)."""

    def register(is_correct: Callable[[Any], bool]) -> Callable[[Any], bool]:
        if exercise_id in _REGISTRY:
            raise ValueError(f"exercise {exercise_id!r} is registered twice")
        _REGISTRY[exercise_id] = Exercise(exercise_id, is_correct, hint, expects)
        return is_correct

    return register


def exercise_ids() -> list[str]:
    return sorted(_REGISTRY)


def plain_answer(answer: Any) -> Any:
    """`answer` as the Python value a checker compares: a numpy scalar or 0-d array becomes its
    Python `int`, `float`, `bool` or `str` (`np.int64(18)` is `18`, `np.True_` is `True`);
    anything else is returned unchanged.

    A learner who computes an answer with numpy or pandas gets numpy scalars, and a checker that
    asks `isinstance(answer, bool)` or `isinstance(answer, int)` would call a right answer wrong.
    """
    if isinstance(answer, (np.generic, np.ndarray)) and np.ndim(answer) == 0:
        return answer.item()
    return answer


def is_correct(exercise_id: str, answer: Any) -> tuple[bool, str]:
    """Judge `answer` without printing: (correct, note on what was expected if it was malformed).

    Every checker sees `plain_answer(answer)`. Any answer gets a verdict, never a traceback: a
    checker that cannot read it (a string where a number belongs, `10**400` or `inf` where a whole
    number belongs, `None`, a list, any object) raises, and that counts as wrong with the note.
    """
    if exercise_id not in _REGISTRY:
        raise KeyError(f"no exercise {exercise_id!r}; known: {', '.join(exercise_ids())}")
    item = _REGISTRY[exercise_id]
    try:
        return bool(item.is_correct(plain_answer(answer))), ""
    except Exception:  # whatever a malformed answer makes a checker raise; a learner gets the hint
        return False, f" (expected {item.expects})"


def check(exercise_id: str, answer: Any) -> None:
    """Print "correct" or a hint for `answer`; never the solution."""
    correct, note = is_correct(exercise_id, answer)
    item = _REGISTRY[exercise_id]
    if correct:
        print(f"✅ {exercise_id}: correct")
    else:
        print(f"❌ {exercise_id}: not yet{note}. Hint: {item.hint}")


def normalized_answer(text: Any) -> str:
    """A typed answer as it is compared: `lib.text.normalize_text`, without surrounding quote marks.

    Only a `str` itself is read (TypeError otherwise): a subclass could compare equal to anything.
    """
    if type(text) is not str:
        raise TypeError("expected a string")
    return normalize_text(text).strip("'\"` ")


_NUMPY_REALS = frozenset(np.dtype(code).type for code in np.typecodes["AllInteger"] + np.typecodes["Float"])


def real_number(answer: Any) -> float:
    """`answer` as a finite float, read strictly: TypeError unless it is an `int`, a `float` or a numpy
    integer or floating scalar (bools, strings, arrays, Series, subclasses and other objects refused),
    ValueError when it is not finite.

    An object of another type decides for itself what it converts to or compares equal to, so it
    could pass a check without holding the right number; a string such as "0.5" is a number typed
    in, not one computed.
    """
    if type(answer) not in (int, float) and type(answer) not in _NUMPY_REALS:
        raise TypeError(f"expected a number, got {type(answer).__name__}")
    try:
        number = float(answer)
    except OverflowError:  # an int past the largest float
        raise ValueError("expected a finite number") from None
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    return number


def whole_number(answer: Any) -> int:
    """`answer` as an int; ValueError or TypeError when it is not a whole `real_number` (True, 2.5, "two" and "3" are not)."""
    number = real_number(answer)
    if number != int(number):
        raise ValueError("expected a whole number")
    return int(answer)


def close_to(value: Any, expected: float, *, tolerance: float) -> bool:
    """Whether `value` is a `real_number` within `tolerance` of `expected` (raises for what is not one)."""
    return abs(real_number(value) - expected) <= tolerance


def all_close_to(values: Any, expected: Sequence[float], *, tolerance: float) -> bool:
    """Whether `values` is a sequence of numbers as long as `expected` and each within `tolerance`."""
    if isinstance(values, (str, bytes)):
        return False
    if not isinstance(values, (list, tuple, np.ndarray)):
        raise TypeError(f"expected a sequence of numbers, got {type(values).__name__}")
    if len(values) != len(expected):
        return False
    return all(close_to(v, e, tolerance=tolerance) for v, e in zip(list(values), expected))
