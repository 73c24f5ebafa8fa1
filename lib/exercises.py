"""Exercises at the end of each notebook, checked without ever printing the solution.

A notebook calls `check("nb00-ex1", answer)`; it prints "correct" or a hint. Each exercise is a checker function registered here under its id with the hint a
learner sees on a wrong answer. Checkers compare with the expected answer in code, and a
malformed answer (wrong type, unparsable) counts as wrong with a note on what was expected.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from lib.text import normalize_text


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
    """A typed answer as it is compared: `lib.text.normalize_text`, without surrounding quote marks."""
    if not isinstance(text, str):
        raise TypeError("expected a string")
    return normalize_text(text).strip("'\"` ")


def _close(value: Any, expected: float, *, tolerance: float) -> bool:
    number = float(value)
    return math.isfinite(number) and abs(number - expected) <= tolerance


# --------------------------------------------------------------------------- notebook 00


@exercise("nb00-ex1", hint="Reading and writing take separate times: prompt tokens over the reading speed, plus "
          "reply tokens over the writing speed.", expects="a number of seconds")
def _reply_seconds(answer: Any) -> bool:
    return _close(answer, 300 / 60 + 120 / 8, tolerance=0.05)


@exercise("nb00-ex2", hint="max_tokens stops generation before the model ends its answer; print "
          "completion.finish_reason for a reply cut short.", expects="a finish reason, as a string")
def _cut_short_reason(answer: Any) -> bool:
    return _normalized(answer) == "length"


@exercise("nb00-ex3", hint="Only the lower-case spellings are allowed; divide the allowed token's probability "
          "by the total probability of the allowed tokens.", expects="a probability between 0 and 1")
def _renormalised_yes(answer: Any) -> bool:
    return _close(answer, 0.30 / (0.30 + 0.05), tolerance=0.005)


# --------------------------------------------------------------------------- notebooks 01 and 02


@exercise("nb01-ex1", hint="Print the id and heading of every section whose doc starts with 'helpdesk/' "
          "and look for the one about failed sign-ins.", expects="a section id, as a string such as 'handbook/stipends'")
def _lockout_section(answer: Any) -> bool:
    return _normalized(answer) == "helpdesk/passwords/account-lockout"


@exercise("nb01-ex2", hint="Go through the three parts of the rule one reply at a time: case and spacing are "
          "normalised away, the gold words must follow each other with nothing between them, and the "
          "character before and after them must not be a letter or a digit.",
          expects="the letters of the replies counted as right, as a string such as 'ace'")
def _strict_match(answer: Any) -> bool:
    letters = _normalized(answer).replace(",", "").replace(" ", "")
    if not letters or set(letters) - set("abcde"):
        raise ValueError("expected letters from a to e")
    return sorted(letters) == ["b", "d"]


@exercise("nb01-ex3", hint="Reading time is prompt tokens divided by prompt tokens per second.",
          expects="a number of seconds")
def _reading_seconds(answer: Any) -> bool:
    return _close(answer, 20_000 / 50, tolerance=0.5)


@exercise("nb02-ex1", hint="Divide the dot product by the product of the two lengths; "
          "both vectors here have length 5.", expects="a number between -1 and 1")
def _cosine_by_hand(answer: Any) -> bool:
    return _close(answer, 24 / 25, tolerance=0.005)


@exercise("nb02-ex2", hint="Each question contributes 1/rank of its first gold chunk, and 0 when it was never "
          "found; MRR is the mean over all four questions.", expects="a number between 0 and 1")
def _mrr_by_hand(answer: Any) -> bool:
    return _close(answer, (1 + 1 / 3 + 1 / 2 + 0) / 4, tolerance=0.005)


@exercise("nb02-ex3", hint="Compute the margin (best minus runner-up) and compare both numbers with "
          "the gate's two thresholds printed above.", expects='"act", "ask" or "out_of_scope"')
def _route_for_tiny_margin(answer: Any) -> bool:
    return _normalized(answer).replace(" ", "_") == "ask"


# ---- notebook 03


def _labelled_quote(quote_id: str) -> tuple[str, str]:
    """A labelled quote (data/corpus/quotes_labelled.jsonl) and the text of its section."""
    import json

    from lib.datasets import CORPUS_DIR, load_corpus

    lines = (CORPUS_DIR / "quotes_labelled.jsonl").read_text(encoding="utf-8").splitlines()
    row = next(json.loads(line) for line in lines if json.loads(line)["id"] == quote_id)
    return row["quote"], {section.id: section.text for section in load_corpus()}[row["section_id"]]


@exercise("nb03-ex1", hint="Compare the passed_strict and passed_full columns of the per-kind table for the "
          "kinds that should pass.", expects="a quote kind from quotes_labelled.jsonl, as a string")
def _strict_false_alarm_kind(answer: Any) -> bool:
    return _normalized(answer) == "elided"


@exercise("nb03-ex2", hint="Copy a sentence from the section and change only its formatting: capital letters, "
          "extra spaces, a curly apostrophe or an en dash.", expects="a quote, as a string")
def _normalized_only_quote(answer: Any) -> bool:
    from lib.datasets import load_corpus
    from lib.quotes import verify_quote

    if not isinstance(answer, str):
        raise TypeError("expected a string")
    source = {section.id: section.text for section in load_corpus()}["handbook/stipends"]
    return verify_quote(answer, source).kind == "normalized"


@exercise("nb03-ex3", hint="The gap is the number of source characters between the end of one fragment and the "
          "start of the next: subtract the offsets.", expects="a whole number of characters")
def _smallest_gap_for_v23(answer: Any) -> bool:
    from lib.quotes import verify_quote

    if isinstance(answer, bool) or float(answer) != int(answer):
        raise ValueError("expected a whole number")
    gap = int(answer)
    quote, source = _labelled_quote("v23")
    return gap >= 1 and verify_quote(quote, source, max_gap=gap).ok and not verify_quote(quote, source, max_gap=gap - 1).ok


# ---- notebook 04


NB04_EX1_COMMITTEE = (
    ("Tomás Ruiz", True, True, "Computer Science", False),
    ("Helen Okoye", False, True, "Chemistry", True),
    ("Wei Zhang", False, True, "Chemistry", False),
    ("Priya Raman", False, False, "Computer Science", False),
)
"""Exercise nb04-ex1's committee for a Computer Science student, as notebook 04 describes it in words:
(name, advisor, faculty appointment, primary department, tenured or emeritus) per member."""


def _committee_cases_and_pool() -> tuple[dict[str, Any], list[Any]]:
    """Notebook 04's committee cases by id and the faculty pool, read from data/corpus/."""
    import json

    from lib.datasets import CORPUS_DIR
    from lib.rules import CommitteeMember

    def lines(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (CORPUS_DIR / name).read_text(encoding="utf-8").splitlines()]

    return ({case["id"]: case for case in lines("committee_cases.jsonl")},
            [CommitteeMember(**member) for member in lines("faculty.jsonl")])


@exercise("nb04-ex1", hint="Go rule by rule and count: who holds a faculty appointment (a postdoc does not), who is "
          "in Computer Science *and* on the faculty, whose department differs from the advisor's, who is tenured.",
          expects="a list of rule names from lib.rules.RULE_NAMES, e.g. ['faculty']; [] for a valid committee")
def _predicted_violations(answer: Any) -> bool:
    from lib.rules import RULE_NAMES, CommitteeMember, check_committee

    if isinstance(answer, str) or not all(isinstance(name, str) for name in answer):
        raise TypeError("expected a list of rule names")
    predicted = {_normalized(name) for name in answer}
    if not predicted <= set(RULE_NAMES):
        raise ValueError(f"unknown rule names {sorted(predicted - set(RULE_NAMES))}")
    committee = [CommitteeMember(name=name, is_advisor=advisor, has_faculty_appointment=faculty,
                                 primary_department=department, is_tenured_or_emeritus=tenured)
                 for name, advisor, faculty, department, tenured in NB04_EX1_COMMITTEE]
    return predicted == set(check_committee(committee, "Computer Science").violated_rules)


@exercise("nb04-ex2", hint="Count what is missing rule by rule: how many more faculty members, how many more in "
          "Computer Science, how many tenured. One person can count for several rules at once; check your choice "
          "with check_committee before you submit it.",
          expects="a list of names of people in the faculty pool, e.g. ['Ada Lovelace']")
def _fewest_members_that_fix_the_committee(answer: Any) -> bool:
    from itertools import combinations

    from lib.extraction import normalized_name
    from lib.rules import CommitteeMember, check_committee

    if isinstance(answer, str) or not all(isinstance(name, str) for name in answer):
        raise TypeError("expected a list of names")
    cases, pool = _committee_cases_and_pool()
    case = cases["small-and-junior"]
    committee = [CommitteeMember(**member) for member in case["members"]]
    on_committee = {normalized_name(member.name) for member in committee}
    candidates = [member for member in pool if normalized_name(member.name) not in on_committee]
    by_name = {normalized_name(member.name): member for member in candidates}
    chosen = {normalized_name(name) for name in answer}
    if len(chosen) != len(answer) or not chosen <= set(by_name):
        return False

    def valid(added: Any) -> bool:
        return check_committee([*committee, *added], case["home_department"]).ok

    fewest = next(size for size in range(1, len(candidates) + 1) if any(map(valid, combinations(candidates, size))))
    return len(chosen) == fewest and valid([by_name[name] for name in chosen])


@exercise("nb04-ex3", hint="The outside-member rule needs a department that differs from every advisor's: here "
          "neither Computer Science nor Mathematics. Add your person to the case's gold members and run "
          "check_committee on the result.", expects="the name of one person in the faculty pool, as a string")
def _member_that_fixes_the_committee(answer: Any) -> bool:
    from lib.extraction import normalized_name
    from lib.rules import CommitteeMember, check_committee

    if not isinstance(answer, str):
        raise ValueError("expected a name")
    cases, pool = _committee_cases_and_pool()
    case = cases["co-advisors-no-outsider"]
    committee = [CommitteeMember(**member) for member in case["members"]]
    on_committee = {normalized_name(member.name) for member in committee}
    chosen = [member for member in pool if normalized_name(member.name) == normalized_name(answer)]
    if not chosen or normalized_name(answer) in on_committee:
        return False
    return check_committee([*committee, chosen[0]], case["home_department"]).ok


# --------------------------------------------------------------------------- notebook 07


@exercise("nb07-ex1", hint="Shares 2/5, 2/5 and 1/5; entropy is -sum p log p with the natural log.",
          expects="a number of nats, e.g. 0.5")
def _semantic_entropy_by_hand(answer: Any) -> bool:
    shares = (0.4, 0.4, 0.2)
    return _close(answer, -sum(p * math.log(p) for p in shares), tolerance=0.005)


@exercise("nb07-ex2", hint="The k-th answer is compared with one representative per existing cluster, and "
          "bidirectional() stops after the first direction says no.", expects="a whole number")
def _entailment_calls(answer: Any) -> bool:
    return float(answer) == sum(range(5))


@exercise("nb07-ex3", hint="Run matches_gold on the two strings, and read normalize_answer's docstring on number words.",
          expects="True or False")
def _number_words_match(answer: Any) -> bool:
    if not isinstance(answer, bool):
        raise TypeError("expected a bool")
    return answer is True


# --------------------------------------------------------------------------- notebook 05


@exercise("nb05-ex1", hint="Count every reply the lazy grammar allows (group letters times intent letters), then "
          "take away the replies that are real codes.", expects="a whole number of replies")
def _lazy_grammar_invalid_codes(answer: Any) -> bool:
    from lib.datasets import load_label_groups

    if isinstance(answer, bool) or float(answer) != int(answer):
        raise ValueError("expected a whole number")
    groups = load_label_groups("banking77").groups
    allowed = len(groups) * max(len(labels) for labels in groups.values())
    return int(answer) == allowed - sum(len(labels) for labels in groups.values())


@exercise("nb05-ex2", hint="The off-label mass is the probability the model gave to candidates the grammar "
          "forbids at that step: everything that is not a group letter.", expects="a number between 0 and 1")
def _off_label_by_hand(answer: Any) -> bool:
    return _close(answer, 0.15 + 0.10, tolerance=0.005)


@exercise("nb05-ex3", hint="In a three-token reply the intent letter is chosen at step 3; keep only the intent "
          "letters of group B at that step and renormalise.", expects="a probability between 0 and 1")
def _three_token_intent(answer: Any) -> bool:
    return _close(answer, 0.30 / (0.30 + 0.10), tolerance=0.005)


# --------------------------------------------------------------------------- notebook 08


@exercise("nb08-ex1", hint="The two 0.9s share a bin, and so do the two 0.6s; per bin take |accuracy - mean "
          "confidence| and weight it by the bin's share of the four answers.", expects="a number, e.g. 0.25")
def _ece_by_hand(answer: Any) -> bool:
    from lib.calibration import ece

    return _close(answer, ece([0.9, 0.9, 0.6, 0.6], [0, 1, 1, 1]), tolerance=0.005)


@exercise("nb08-ex2", hint="AUROC is the chance that a random right answer gets a higher confidence than a random "
          "wrong one, with ties counting one half.", expects="a number between 0 and 1")
def _constant_auroc(answer: Any) -> bool:
    return _close(answer, 0.5, tolerance=1e-9)


@exercise("nb08-ex3", hint="Compare the mean confidence with the share of answers that were right: which is larger?",
          expects='"over-confident" or "under-confident"')
def _anchor_direction(answer: Any) -> bool:
    return _normalized(answer).replace(" ", "-") == "under-confident"


# --------------------------------------------------------------------------- notebook 06


@exercise("nb06-ex1", hint="Perplexity is exp(-mean log-probability); the logs here are ln 0.5, ln 0.5 and ln 1.",
          expects="a number, e.g. 1.5")
def _perplexity_by_hand(answer: Any) -> bool:
    return _close(answer, math.exp(-(2 * math.log(0.5)) / 3), tolerance=0.005)


@exercise("nb06-ex2", hint="' A' counts as 'A'; 'Hello' is off-label. Divide A's total by the allowed total.",
          expects="a probability between 0 and 1")
def _renormalised_group(answer: Any) -> bool:
    return _close(answer, (0.6 + 0.05) / (0.6 + 0.05 + 0.2), tolerance=0.002)


@exercise("nb06-ex3", hint="Renormalise over the two candidates you were given, not over all three.",
          expects="a probability between 0 and 1")
def _too_few_candidates(answer: Any) -> bool:
    return _close(answer, 0.5 / (0.5 + 0.3), tolerance=0.002)


# --------------------------------------------------------------------------- notebook 11


@exercise("nb11-ex1", hint="List every (right, wrong) pair and count the pairs where the right answer has the "
          "higher confidence; divide by the number of pairs.", expects="a number between 0 and 1")
def _auroc_by_hand(answer: Any) -> bool:
    return _close(answer, 0.5, tolerance=1e-6)


@exercise("nb11-ex2", hint="Act on the top 1, 2, 3 answers in turn; the risk is the share of wrong answers among "
          "those acted on. AURC is the mean of the three risks.", expects="a number between 0 and 1")
def _aurc_by_hand(answer: Any) -> bool:
    return _close(answer, (0.0 + 0.5 + 1.0 / 3.0) / 3.0, tolerance=0.001)


@exercise("nb11-ex3", hint="Take the out-of-scope rows (~in_scope_test), compare their embed-logreg confidence with "
          "0.5, and take the mean of the comparison.", expects="a number between 0 and 1")
def _clinc_handed_over_share(answer: Any) -> bool:
    from lib.datasets import OUT_OF_SCOPE
    from lib.runs import load_results

    frame = load_results("clinc150", "test", "embed-logreg")
    out_of_scope = (frame["label"] == OUT_OF_SCOPE).to_numpy()
    handed_over = (frame["confidence"] < 0.5).to_numpy()
    return _close(answer, float(handed_over[out_of_scope].mean()), tolerance=0.002)


# --------------------------------------------------------------------------- notebook 09


@exercise("nb09-ex1", hint="Divide the log-probabilities by 2, i.e. take square roots of 0.8 and 0.2, then "
          "renormalise so they sum to 1.", expects="a number between 0 and 1")
def _temperature_two(answer: Any) -> bool:
    top = math.sqrt(0.8) / (math.sqrt(0.8) + math.sqrt(0.2))
    return _close(answer, top, tolerance=0.005)


@exercise("nb09-ex2", hint="T > 1 flattens the distributions: which kind of model needs its confidence lowered?",
          expects='"over-confident" or "under-confident"')
def _temperature_direction(answer: Any) -> bool:
    return _normalized(answer).replace(" ", "-") == "over-confident"


@exercise("nb09-ex3", hint="Write the top confidence of each message as a function of T (softmax of the logs divided "
          "by T), then try temperatures between 0.5 and 1, or let scipy.optimize.brentq find where the difference is 0.",
          expects="a temperature, e.g. 0.8")
def _temperature_where_ranking_flips(answer: Any) -> bool:
    import numpy as np
    from scipy.optimize import brentq
    from scipy.special import softmax

    message_a, message_b = np.log([0.7, 0.3]), np.log([0.6, 0.1, 0.1, 0.1, 0.1])
    crossing = brentq(lambda t: softmax(message_a / t).max() - softmax(message_b / t).max(), 0.5, 1.0)
    return _close(answer, crossing, tolerance=0.006)


# --------------------------------------------------------------------------- notebook 10


@exercise("nb10-ex1", hint="Isotonic means the fitted map never goes down as the raw confidence goes up.",
          expects="True or False")
def _isotonic_can_decrease(answer: Any) -> bool:
    if not isinstance(answer, bool):
        raise TypeError("expected a bool")
    return answer is False


@exercise("nb10-ex2", hint="Every raw confidence in one bin is replaced by the same number.", expects="a whole number")
def _histogram_distinct_values(answer: Any) -> bool:
    if isinstance(answer, bool) or float(answer) != int(answer):
        raise ValueError("expected a whole number")
    return int(answer) == 15


@exercise("nb10-ex3", hint="One of them is a logistic regression on a single feature: a slope and an intercept.",
          expects="a calibrator name, as a string")
def _two_parameter_calibrator(answer: Any) -> bool:
    return _normalized(answer).removesuffix(" scaling") == "platt"


# --------------------------------------------------------------------------- notebook 12


@exercise("nb12-ex1", hint="If the top answer is right with probability p, asking costs p * 1 + (1 - p) * (1 + 5); "
          "set that equal to the cost of handing over and solve for p.", expects="a probability between 0 and 1")
def _ask_break_even(answer: Any) -> bool:
    return _close(answer, 0.2, tolerance=0.005)


@exercise("nb12-ex2", hint="k = ceil((n + 1) * (1 - alpha)) with n calibration messages.", expects="a whole number")
def _conformal_rank(answer: Any) -> bool:
    return isinstance(answer, (int, float)) and not isinstance(answer, bool) and float(answer) == 18


@exercise("nb12-ex3", hint="An empty set means no intent is plausible enough; read set_router's docstring.",
          expects='"act", "ask" or "hand_over"')
def _empty_set_decision(answer: Any) -> bool:
    return _normalized(answer).replace(" ", "_").replace("-", "_") in ("hand_over", "handover")


# --------------------------------------------------------------------------- notebook 13


@exercise("nb13-ex1", hint="The boundary passed; compare the top score and the margin with their thresholds, "
          "then, if the retrieval gate fails, the top score with the ask threshold.",
          expects='"act", "ask", "out_of_scope" or "hand_over"')
def _assistant_decision(answer: Any) -> bool:
    return _normalized(answer).replace(" ", "_").replace("-", "_") == "ask"


@exercise("nb13-ex2", hint="Add exp(-0.7) and exp(-1.6) for yes, exp(-1.9) and exp(-3.0) for no, "
          "then divide yes by yes + no.", expects="a probability between 0 and 1")
def _answerability_from_logprobs(answer: Any) -> bool:
    return not isinstance(answer, bool) and _close(answer, 0.7779, tolerance=0.002)


@exercise("nb13-ex3", hint="Unjudged answers are left out: divide the answers judged right by the answers judged.",
          expects="a number between 0 and 1")
def _answer_precision(answer: Any) -> bool:
    return not isinstance(answer, bool) and _close(answer, 0.75, tolerance=0.005)
