"""Exercises at the end of each notebook, checked without ever printing the solution.

A notebook calls `check("nb00-ex1", answer)`; it prints "correct" or a hint. Each exercise is a checker function registered here under its id with the hint a
learner sees on a wrong answer. Checkers compare with the expected answer in code, and a
malformed answer (wrong type, unparsable) counts as wrong with a note on what was expected.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


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


def is_correct(exercise_id: str, answer: Any) -> tuple[bool, str]:
    """Judge `answer` without printing: (correct, note on what was expected if it was malformed)."""
    if exercise_id not in _REGISTRY:
        raise KeyError(f"no exercise {exercise_id!r}; known: {', '.join(exercise_ids())}")
    item = _REGISTRY[exercise_id]
    try:
        return bool(item.is_correct(answer)), ""
    except (TypeError, ValueError, KeyError, AttributeError):
        return False, f" (expected {item.expects})"


def check(exercise_id: str, answer: Any) -> None:
    """Print "correct" or a hint for `answer`; never the solution."""
    correct, note = is_correct(exercise_id, answer)
    item = _REGISTRY[exercise_id]
    if correct:
        print(f"✅ {exercise_id}: correct")
    else:
        print(f"❌ {exercise_id}: not yet{note}. Hint: {item.hint}")


def _normalized(text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError("expected a string")
    return " ".join(text.strip().strip("'\"`").split()).lower()


def _close(value: Any, expected: float, *, tolerance: float) -> bool:
    number = float(value)
    return math.isfinite(number) and abs(number - expected) <= tolerance


# --------------------------------------------------------------------------- notebook 00


@exercise("nb00-ex1", hint="Look at the cell that explains the three modes: which variable does it set?",
          expects="the name of an environment variable, as a string")
def _mode_variable(answer: Any) -> bool:
    return _normalized(answer) == "workbook_mode"


@exercise("nb00-ex2", hint="max_tokens stops generation before the model ends its answer; print "
          "completion.finish_reason for a reply cut short.", expects="a finish reason, as a string")
def _cut_short_reason(answer: Any) -> bool:
    return _normalized(answer) == "length"


@exercise("nb00-ex3", hint="Call llm.tokenize(...) on the label and count the pieces.",
          expects="a whole number")
def _label_token_count(answer: Any) -> bool:
    from lib.llm import get_llm
    expected = len(get_llm(recording="00-setup").tokenize("card_payment_fee_charged"))
    return int(answer) == expected and float(answer) == int(answer)


# --------------------------------------------------------------------------- notebooks 01 and 02


@exercise("nb01-ex1", hint="The helpdesk documents hold staff and IT rules: look for the section about "
          "failed logins in helpdesk/passwords.", expects="a section id, as a string such as 'handbook/stipends'")
def _lockout_section(answer: Any) -> bool:
    return _normalized(answer) == "helpdesk/passwords/account-lockout"


@exercise("nb01-ex2", hint="mentions() needs the gold text as whole consecutive words in the reply; "
          "run it on the two strings.", expects="True or False")
def _strict_match(answer: Any) -> bool:
    if not isinstance(answer, bool):
        raise TypeError("expected a bool")
    return answer is False


@exercise("nb01-ex3", hint="Reading time is prompt tokens divided by prompt tokens per second.",
          expects="a number of seconds")
def _reading_seconds(answer: Any) -> bool:
    return _close(answer, 20_000 / 50, tolerance=0.5)


@exercise("nb02-ex1", hint="Divide the dot product by the product of the two lengths; "
          "both vectors here have length 5.", expects="a number between -1 and 1")
def _cosine_by_hand(answer: Any) -> bool:
    return _close(answer, 24 / 25, tolerance=0.005)


@exercise("nb02-ex2", hint="Look at the hybrid rows of the chunking table on dev and compare recall@1.",
          expects="one of 'heading', 'fixed', 'document'")
def _best_chunking(answer: Any) -> bool:
    return _normalized(answer) == "heading"


@exercise("nb02-ex3", hint="Compute the margin (best minus runner-up) and compare both numbers with "
          "the gate's two thresholds printed above.", expects="a route name, as a string")
def _route_for_tiny_margin(answer: Any) -> bool:
    return _normalized(answer).replace(" ", "_") == "low_confidence"
