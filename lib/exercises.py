"""The exercises at the end of each notebook, each a checker registered under its id.

A notebook calls `check("nb00-ex1", answer)` from here; it prints "correct" or a hint, never the
solution (`lib.answers` judges; this module holds what is judged). Checkers compare with the
expected answer in code.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from lib.answers import (all_close_to, check, close_to, exercise, exercise_ids, is_correct, normalized_answer,
                         whole_number)
from lib.calibration import HistogramBinningCalibrator, IsotonicCalibrator, TemperatureScaling, brier, ece
from lib.datasets import CORPUS_DIR, OUT_OF_SCOPE, load_corpus, load_label_groups
from lib.extraction import normalized_name
from lib.guarantees import precision_lower_bound
from lib.quotes import verify_quote
from lib.rules import RULE_NAMES, CommitteeMember, check_committee
from lib.saved_runs.decisions import load_results
from lib.selective import auroc
from lib.semantic_entropy import cascade_confidence, discrete_semantic_entropy, max_entropy

__all__ = ["check", "is_correct", "exercise_ids", "NB03_EX1_QUOTES", "NB04_EX1_COMMITTEE", "NB05_EX1_MISREAD",
           "NB07_EX3_CONFIDENCES", "NB07_EX3_LARGEST_CHANGE"]
"""`check`, `is_correct` and `exercise_ids` are `lib.answers`'s, imported from here so that the
exercises are registered first."""


# --------------------------------------------------------------------------- notebook 00


@exercise("nb00-ex1", hint="Reading and writing take separate times: prompt tokens over the reading speed, plus "
          "reply tokens over the writing speed.", expects="a number of seconds")
def _reply_seconds(answer: Any) -> bool:
    return close_to(answer, 300 / 60 + 120 / 8, tolerance=0.05)


@exercise("nb00-ex2", hint="max_tokens stops generation before the model ends its answer; print "
          "completion.finish_reason for a reply cut short.", expects="a finish reason, as a string")
def _cut_short_reason(answer: Any) -> bool:
    return normalized_answer(answer) == "length"


@exercise("nb00-ex3", hint="Only the lower-case spellings are allowed; divide the allowed token's probability "
          "by the total probability of the allowed tokens.", expects="a probability between 0 and 1")
def _renormalised_yes(answer: Any) -> bool:
    return close_to(answer, 0.30 / (0.30 + 0.05), tolerance=0.005)


# --------------------------------------------------------------------------- notebooks 01 and 02


@exercise("nb01-ex1", hint="Print the id and heading of every section whose doc starts with 'helpdesk/' "
          "and look for the one about failed sign-ins.", expects="a section id, as a string such as 'handbook/stipends'")
def _lockout_section(answer: Any) -> bool:
    return normalized_answer(answer) == "helpdesk/passwords/account-lockout"


@exercise("nb01-ex2", hint="Go through the three parts of the rule one reply at a time: case and spacing are "
          "normalised away, the gold words must follow each other with nothing between them, and the "
          "character before and after them must not be a letter or a digit.",
          expects="the letters of the replies counted as right, as a string such as 'ace'")
def _strict_match(answer: Any) -> bool:
    letters = normalized_answer(answer).replace(",", "").replace(" ", "")
    if not letters or set(letters) - set("abcde"):
        raise ValueError("expected letters from a to e")
    return sorted(letters) == ["b", "d"]


@exercise("nb01-ex3", hint="Reading time is prompt tokens divided by prompt tokens per second.",
          expects="a number of seconds")
def _reading_seconds(answer: Any) -> bool:
    return close_to(answer, 20_000 / 50, tolerance=0.5)


@exercise("nb02-ex1", hint="Divide the dot product by the product of the two lengths; "
          "both vectors here have length 5.", expects="a number between -1 and 1")
def _cosine_by_hand(answer: Any) -> bool:
    return close_to(answer, 24 / 25, tolerance=0.005)


@exercise("nb02-ex2", hint="Each question contributes 1/rank of its first gold chunk, and 0 when it was never "
          "found; MRR is the mean over all four questions.", expects="a number between 0 and 1")
def _mrr_by_hand(answer: Any) -> bool:
    return close_to(answer, (1 + 1 / 3 + 1 / 2 + 0) / 4, tolerance=0.005)


@exercise("nb02-ex3", hint="Compute the margin (best minus runner-up) and compare both numbers with "
          "the gate's two thresholds printed above.", expects='"act", "ask" or "out_of_scope"')
def _route_for_tiny_margin(answer: Any) -> bool:
    return normalized_answer(answer).replace(" ", "_") == "ask"


# ---- notebook 03


def _labelled_quote(quote_id: str) -> tuple[str, str]:
    """A labelled quote (data/corpus/quotes_labelled.jsonl) and the text of its section."""
    import json

    lines = (CORPUS_DIR / "quotes_labelled.jsonl").read_text(encoding="utf-8").splitlines()
    row = next(json.loads(line) for line in lines if json.loads(line)["id"] == quote_id)
    return row["quote"], {section.id: section.text for section in load_corpus()}[row["section_id"]]


NB03_EX1_QUOTES = {
    "a": "the candidate rate of 3,385 per month",
    "b": "385 per month from the first full month",
    "c": "The Standard Stipend is 3,140 per month",
    "d": "the standard stipend is 3,140 per month.",
    "e": "Stipends are guaranteed for five years ... MSc students are not guaranteed a stipend.",
    "f": "MSc students are guaranteed a stipend",
}
"""The quotes of exercise nb03-ex1, each to be judged against the section `handbook/stipends`."""


@exercise("nb03-ex1", hint="Read the section, then go through the rules: formatting and a final full stop are "
          "forgiven; a quote that starts inside a number, or leaves out a word, is not. Then run verify_quote "
          "on each quote to see where your prediction went wrong.",
          expects='the letters of the accepted quotes, as a string such as "ab"')
def _predicted_verdicts(answer: Any) -> bool:
    if isinstance(answer, str):
        chosen = set(normalized_answer(answer).replace(",", " ").replace(" ", ""))
    elif isinstance(answer, (list, tuple, set, frozenset)) and all(isinstance(letter, str) for letter in answer):
        chosen = {normalized_answer(letter) for letter in answer}
    else:
        raise TypeError("expected a string of letters")
    if not chosen <= set(NB03_EX1_QUOTES):
        raise ValueError("expected letters a to f")
    source = {section.id: section.text for section in load_corpus()}["handbook/stipends"]
    return chosen == {letter for letter, quote in NB03_EX1_QUOTES.items() if verify_quote(quote, source).ok}


@exercise("nb03-ex2", hint="Copy a sentence from the section and change only its formatting: capital letters, "
          "extra spaces, a curly apostrophe or an en dash.", expects="a quote, as a string")
def _normalized_only_quote(answer: Any) -> bool:
    if type(answer) is not str:  # a subclass decides for itself what it contains and equals
        raise TypeError("expected a string")
    source = {section.id: section.text for section in load_corpus()}["handbook/stipends"]
    return verify_quote(answer, source).kind == "normalized"


@exercise("nb03-ex3", hint="Run verify_quote on v31 against its own section and read its spans: the gap is the "
          "number of source characters between the end of one fragment and the start of the next.",
          expects="a whole number of characters")
def _smallest_gap_for_v31(answer: Any) -> bool:
    gap = whole_number(answer)
    quote, source = _labelled_quote("v31")
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

    def lines(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (CORPUS_DIR / name).read_text(encoding="utf-8").splitlines()]

    return ({case["id"]: case for case in lines("committee_cases.jsonl")},
            [CommitteeMember(**member) for member in lines("faculty.jsonl")])


@exercise("nb04-ex1", hint="Go rule by rule and count: who holds a faculty appointment (a postdoc does not), who is "
          "in Computer Science *and* on the faculty, whose department differs from the advisor's, who is tenured.",
          expects="a list of rule names from lib.rules.RULE_NAMES, e.g. ['faculty']; [] for a valid committee")
def _predicted_violations(answer: Any) -> bool:
    if isinstance(answer, str) or not all(isinstance(name, str) for name in answer):
        raise TypeError("expected a list of rule names")
    predicted = {normalized_answer(name) for name in answer}
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
    if type(answer) is not str:  # a subclass decides for itself what it contains and equals
        raise ValueError("expected a name")
    cases, pool = _committee_cases_and_pool()
    case = cases["co-advisors-no-outsider"]
    committee = [CommitteeMember(**member) for member in case["members"]]
    on_committee = {normalized_name(member.name) for member in committee}
    chosen = [member for member in pool if normalized_name(member.name) == normalized_name(answer)]
    if not chosen or normalized_name(answer) in on_committee:
        return False
    return check_committee([*committee, chosen[0]], case["home_department"]).ok


# ---- notebook 05


NB05_EX1_MISREAD = ("Hannah Whitcombe", "is_advisor")
"""The member and the field the model misread in the saved conversation of `coadvised-chemistry-valid`,
which notebook 05 prints for nb05-ex1."""


def _name_and_field(answer: Any, name: str, field: str) -> bool:
    """Whether `answer` is the pair (member's name, CommitteeMember field) `(name, field)`."""
    if isinstance(answer, str) or len(answer) != 2 or not all(isinstance(part, str) for part in answer):
        raise TypeError("expected a pair (name, field)")
    return normalized_name(answer[0]) == normalized_name(name) and normalized_answer(answer[1]) == field


@exercise("nb05-ex1", hint="Go through the check_committee call member by member and field by field, and find the "
          "fact the message states otherwise.", expects='a pair (name, field), e.g. ("Ada Lovelace", "is_advisor")')
def _misread_fact(answer: Any) -> bool:
    return _name_and_field(answer, *NB05_EX1_MISREAD)


@exercise("nb05-ex2", hint="Code copies the checker, not the model: count the faculty appointments, the members in "
          "Computer Science and the outside members.", expects='a pair (verdict, list of rule names)')
def _code_written_verdict(answer: Any) -> bool:
    verdict, rules = answer
    if isinstance(rules, str):
        raise TypeError("expected a list of rule names")
    return normalized_answer(verdict) == "invalid" and sorted(normalized_answer(rule) for rule in rules) == ["faculty"]


@exercise("nb05-ex3", hint="Try both values of each unstated fact with check_committee: only one changes the "
          "verdict.", expects='a pair (name, field), e.g. ("Ada Lovelace", "is_advisor")')
def _fact_to_ask(answer: Any) -> bool:
    return _name_and_field(answer, "Ana Ruiz", "has_faculty_appointment")


# --------------------------------------------------------------------------- notebook 10


@exercise("nb10-ex1", hint="Shares 2/5, 2/5 and 1/5; entropy is -sum p log p with the natural log.",
          expects="a number of nats, e.g. 0.5")
def _semantic_entropy_by_hand(answer: Any) -> bool:
    shares = (0.4, 0.4, 0.2)
    return close_to(answer, -sum(p * math.log(p) for p in shares), tolerance=0.005)


@exercise("nb10-ex2", hint="The k-th answer is compared with one representative per existing cluster, and "
          "bidirectional() stops after the first direction says no.", expects="a whole number")
def _entailment_calls(answer: Any) -> bool:
    return whole_number(answer) == sum(range(5))


@exercise("nb10-ex3", hint="Entropy of the shares 2/4 and 2/4, divided by log 4, taken from 1, gives the samples' "
          "confidence; then threshold * (calibrated / threshold + that confidence) / 2.", expects="a number between 0 and 1")
def _cascade_by_hand(answer: Any) -> bool:
    semantic = 1 - discrete_semantic_entropy([0, 0, 1, 1]) / max_entropy(4)
    expected = float(cascade_confidence([0.70], [semantic], 0.8)[0])
    return not isinstance(answer, bool) and close_to(answer, expected, tolerance=0.005)


# --------------------------------------------------------------------------- notebook 06


@exercise("nb06-ex1", hint="Count every reply the lazy grammar allows (group letters times intent letters), then "
          "take away the replies that are real codes.", expects="a whole number of replies")
def _lazy_grammar_invalid_codes(answer: Any) -> bool:
    groups = load_label_groups("banking77").groups
    allowed = len(groups) * max(len(labels) for labels in groups.values())
    return whole_number(answer) == allowed - sum(len(labels) for labels in groups.values())


@exercise("nb06-ex2", hint="The off-label mass is the probability the model gave to candidates the grammar "
          "forbids at that step: everything that is not a group letter.", expects="a number between 0 and 1")
def _off_label_by_hand(answer: Any) -> bool:
    return close_to(answer, 0.15 + 0.10, tolerance=0.005)


@exercise("nb06-ex3", hint="In a three-token reply the intent letter is chosen at step 3; keep only the intent "
          "letters of group B at that step and renormalise.", expects="a probability between 0 and 1")
def _three_token_intent(answer: Any) -> bool:
    return close_to(answer, 0.30 / (0.30 + 0.10), tolerance=0.005)


# --------------------------------------------------------------------------- notebook 11


@exercise("nb11-ex1", hint="The two 0.9s share a bin, and so do the two 0.6s; per bin take |accuracy - mean "
          "confidence| and weight it by the bin's share of the four answers.", expects="a number, e.g. 0.25")
def _ece_by_hand(answer: Any) -> bool:
    return close_to(answer, ece([0.9, 0.9, 0.6, 0.6], [0, 1, 1, 1]), tolerance=0.005)


@exercise("nb11-ex2", hint="Square (confidence - outcome) for each answer, outcome 1 if right and 0 if wrong, and "
          "average the four squares.", expects="a number between 0 and 1")
def _brier_by_hand(answer: Any) -> bool:
    return not isinstance(answer, bool) and close_to(answer, brier([0.9, 0.9, 0.6, 0.6], [0, 1, 1, 1]), tolerance=0.002)


@exercise("nb11-ex3", hint="Three of the four are right, so every answer gets 0.75; square (0.75 - outcome) for each "
          "and average.", expects="a number between 0 and 1")
def _constant_brier_by_hand(answer: Any) -> bool:
    return not isinstance(answer, bool) and close_to(answer, brier([0.75] * 4, [0, 1, 1, 1]), tolerance=0.002)


# --------------------------------------------------------------------------- notebooks 07 and 08


@exercise("nb07-ex1", hint="Perplexity is exp(-mean log-probability); the logs here are ln 0.5, ln 0.5 and ln 1.",
          expects="a number, e.g. 1.5")
def _perplexity_by_hand(answer: Any) -> bool:
    return close_to(answer, math.exp(-(2 * math.log(0.5)) / 3), tolerance=0.005)


@exercise("nb07-ex2", hint="The geometric mean is exp(mean log-probability): for A, the mean of six ln 0.9 and one "
          "ln 0.1; for B, ln 0.7. Subtract B's from A's.", expects="a number, e.g. 0.25")
def _geometric_mean_gap(answer: Any) -> bool:
    a_geometric = math.exp((6 * math.log(0.9) + math.log(0.1)) / 7)
    return close_to(answer, a_geometric - 0.7, tolerance=0.0015)


NB07_EX3_CONFIDENCES = (0.85, 0.93, 0.991, 0.78, 0.905)
"""Five messages' confidences against a router threshold of 0.90, for nb07-ex3."""
NB07_EX3_LARGEST_CHANGE = 0.11
"""The largest change nb07-ex3 states for a server (its 99th percentile, 0.04, is the distractor)."""


@exercise("nb07-ex3", hint="A decision can change side only if its confidence lies within the drift of the threshold, "
          "and the most the table measured is the largest change, not a percentile.",
          expects="a whole number of messages")
def _decisions_the_server_could_flip(answer: Any) -> bool:
    return whole_number(answer) == sum(abs(confidence - 0.90) <= NB07_EX3_LARGEST_CHANGE
                                       for confidence in NB07_EX3_CONFIDENCES)


@exercise("nb08-ex1", hint="' A' counts as 'A'; 'Hello' is off-label. Divide A's total by the allowed total.",
          expects="a probability between 0 and 1")
def _renormalised_group(answer: Any) -> bool:
    return close_to(answer, (0.6 + 0.05) / (0.6 + 0.05 + 0.2), tolerance=0.002)


@exercise("nb08-ex2", hint="Renormalise over the two candidates you were given, not over all three.",
          expects="a probability between 0 and 1")
def _too_few_candidates(answer: Any) -> bool:
    return close_to(answer, 0.5 / (0.5 + 0.3), tolerance=0.002)


# --------------------------------------------------------------------------- notebook 14


@exercise("nb14-ex1", hint="List every (right, wrong) pair and count the pairs where the right answer has the "
          "higher confidence; divide by the number of pairs.", expects="a number between 0 and 1")
def _auroc_by_hand(answer: Any) -> bool:
    return close_to(answer, 0.5, tolerance=1e-6)


@exercise("nb14-ex2", hint="Act on the top 1, 2, 3 answers in turn; the risk is the share of wrong answers among "
          "those acted on. AURC is the mean of the three risks.", expects="a number between 0 and 1")
def _aurc_by_hand(answer: Any) -> bool:
    return close_to(answer, (0.0 + 0.5 + 1.0 / 3.0) / 3.0, tolerance=0.001)


# --------------------------------------------------------------------------- notebook 15


@exercise("nb15-ex1", hint="The bound is the delta quantile of Beta(right, accepted - right + 1) (scipy.stats.beta.ppf), "
          "or what lower_bound_by_hand gives.", expects="a number between 0 and 1")
def _lower_bound_48_of_50(answer: Any) -> bool:
    return close_to(answer, precision_lower_bound(48, 50, 0.05), tolerance=0.001)


@exercise("nb15-ex2", hint="With every accepted answer right the bound is delta ** (1 / n): find the smallest whole n "
          "for which it reaches the target (take logarithms, then round up).", expects="a whole number")
def _all_right_answers_needed(answer: Any) -> bool:
    return whole_number(answer) == math.ceil(math.log(0.05) / math.log(0.99))


@exercise("nb15-ex3", hint="The cut is the floor(alpha * (n + 1))-th smallest score: compute that rank for n = 49 "
          "and for n = 8.", expects="two whole numbers, as (j_49, j_8)")
def _conformal_ranks(answer: Any) -> bool:
    return len(answer) == 2 and [whole_number(rank) for rank in answer] == [5, 0]


@exercise("nb15-ex4", hint="A binary search over m candidates makes at most ceil(log2(m + 1)) probes; delta is "
          "shared equally among them.", expects="two numbers, as (probes, level)")
def _sgr_probes(answer: Any) -> bool:
    return len(answer) == 2 and whole_number(answer[0]) == 12 and close_to(answer[1], 0.1 / 12, tolerance=1e-4)


# --------------------------------------------------------------------------- notebook 16


@exercise("nb16-ex1", hint="Take the out-of-scope rows (~in_scope_test), compare their embed-logreg confidence with "
          "0.5, and take the mean of the comparison.", expects="a number between 0 and 1")
def _clinc_handed_over_share(answer: Any) -> bool:
    return close_to(answer, _clinc_out_of_scope_handed_over(), tolerance=0.002)


@exercise("nb16-ex2", hint="Keep the test rows with the right group and the wrong intent (in_candidates & ~correct); "
          "among them, take the mean of p_group >= 0.5.", expects="a number between 0 and 1")
def _confident_group_share_of_second_step_errors(answer: Any) -> bool:
    return close_to(answer, _confident_group_among_second_step_errors(), tolerance=0.001)


@lru_cache(maxsize=1)
def _clinc_out_of_scope_handed_over() -> float:
    """Share of CLINC150's out-of-scope test messages that embed-logreg hands over (confidence < 0.5).

    Read from the saved run once per process: a checker may be called many times."""
    frame = load_results("clinc150", "test", "embed-logreg")
    out_of_scope = (frame["label"] == OUT_OF_SCOPE).to_numpy()
    return float((frame["confidence"] < 0.5).to_numpy()[out_of_scope].mean())


@lru_cache(maxsize=1)
def _confident_group_among_second_step_errors() -> float:
    """Among BANKING77 test decisions with the right group and the wrong intent, the share with P(group) >= 0.5.

    Read from the saved run once per process: a checker may be called many times."""
    frame = load_results("banking77", "test", "full")
    second_step_error = (frame["in_candidates"] & ~frame["correct"]).to_numpy(bool)
    return float((frame["p_group"] >= 0.5).to_numpy(bool)[second_step_error].mean())


# --------------------------------------------------------------------------- notebook 12


@exercise("nb12-ex1", hint="Divide the log-probabilities by 2, i.e. take square roots of 0.8 and 0.2, then "
          "renormalise so they sum to 1.", expects="a number between 0 and 1")
def _temperature_two(answer: Any) -> bool:
    top = math.sqrt(0.8) / (math.sqrt(0.8) + math.sqrt(0.2))
    return close_to(answer, top, tolerance=0.005)


@exercise("nb12-ex2", hint="Put the three rows of log-probabilities in an array, right option first, and reuse "
          "mean_nll and minimize_scalar from the fit by hand above.", expects="a temperature, e.g. 1.25")
def _temperature_fit_by_hand(answer: Any) -> bool:
    import numpy as np

    logprobs = np.log([[0.9, 0.1], [0.9, 0.1], [0.2, 0.8]])
    fitted = TemperatureScaling().fit(logprobs, np.zeros(3, dtype=int)).temperature_
    return not isinstance(answer, bool) and close_to(answer, fitted, tolerance=0.01)


@exercise("nb12-ex3", hint="Write the top confidence of each message as a function of T (softmax of the logs divided "
          "by T), then try temperatures between 0.5 and 1, or let scipy.optimize.brentq find where the difference is 0.",
          expects="a temperature, e.g. 0.8")
def _temperature_where_ranking_flips(answer: Any) -> bool:
    import numpy as np
    from scipy.optimize import brentq
    from scipy.special import softmax

    message_a, message_b = np.log([0.7, 0.3]), np.log([0.6, 0.1, 0.1, 0.1, 0.1])
    crossing = brentq(lambda t: softmax(message_a / t).max() - softmax(message_b / t).max(), 0.5, 1.0)
    return close_to(answer, crossing, tolerance=0.006)


# --------------------------------------------------------------------------- notebook 13


@exercise("nb13-ex1", hint="Walk left to right keeping blocks with their means; when a block's mean falls below the "
          "one before it, merge the two and check again backwards.", expects="a list of six numbers")
def _pav_by_hand(answer: Any) -> bool:
    confidence, outcome = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0, 1, 1, 0, 0, 1]
    staircase = IsotonicCalibrator().fit(confidence, outcome).predict(confidence)
    return all_close_to(answer, staircase, tolerance=0.005)


@exercise("nb13-ex2", hint="Fit the staircase by hand (pool the 0.4 right and the 0.6 wrong), then count the "
          "(right, wrong) pairs again: a tie earns half a pair.", expects="a number between 0 and 1")
def _isotonic_auroc_on_its_own_data(answer: Any) -> bool:
    import numpy as np

    confidence, right = np.array([0.2, 0.4, 0.6, 0.8]), np.array([False, True, False, True])
    staircase = IsotonicCalibrator().fit(confidence, right).predict(confidence)
    return not isinstance(answer, bool) and close_to(answer, auroc(staircase, right), tolerance=0.001)


@exercise("nb13-ex3", hint="Bins [0, 1/3), [1/3, 2/3), [2/3, 1]: each raw value gets the share right among the "
          "calibration answers in its bin.", expects="a pair of numbers: (value for 0.55, value for 0.92)")
def _histogram_binning_by_hand(answer: Any) -> bool:
    import numpy as np

    fitted = HistogramBinningCalibrator(n_bins=3).fit(np.array([0.1, 0.2, 0.5, 0.6, 0.9, 0.95]),
                                                      np.array([0, 1, 1, 1, 0, 1]))
    return all_close_to(answer, fitted.predict(np.array([0.55, 0.92])), tolerance=0.005)


# --------------------------------------------------------------------------- notebook 17


@exercise("nb17-ex1", hint="If the right label is among the options with probability p, asking costs p * 1 + (1 - p) * (1 + 5); "
          "set that equal to the cost of handing over and solve for p.", expects="a probability between 0 and 1")
def _ask_break_even(answer: Any) -> bool:
    return close_to(answer, 0.2, tolerance=0.005)


@exercise("nb17-ex2", hint="k = ceil((n + 1) * (1 - alpha)) with n calibration messages.", expects="a whole number")
def _conformal_rank(answer: Any) -> bool:
    return whole_number(answer) == 18


@exercise("nb17-ex3", hint="Write both expected costs: ACT costs 30 minutes when the top answer is wrong; ASK costs "
          "0.5 or 0.5 + 4 depending only on whether the right label is among the options. Set them equal "
          "and solve for p.",
          expects="a probability between 0 and 1")
def _act_over_ask_threshold(answer: Any) -> bool:
    return close_to(answer, 1 - (0.95 * 0.5 + 0.05 * 4.5) / 30, tolerance=0.001)


# --------------------------------------------------------------------------- notebook 18


@exercise("nb18-ex1", hint="The boundary passed; compare the top score and the margin with their thresholds, "
          "then, if the retrieval gate fails, the top score with the ask threshold.",
          expects='"act", "ask", "out_of_scope" or "hand_over"')
def _assistant_decision(answer: Any) -> bool:
    return normalized_answer(answer).replace(" ", "_").replace("-", "_") == "ask"


@exercise("nb18-ex2", hint="Add exp(-0.7) and exp(-1.6) for yes, exp(-1.9) and exp(-3.0) for no, "
          "then divide yes by yes + no.", expects="a probability between 0 and 1")
def _answerability_from_logprobs(answer: Any) -> bool:
    return not isinstance(answer, bool) and close_to(answer, 0.7779, tolerance=0.002)


@exercise("nb18-ex3", hint="Unjudged answers are left out: divide the answers judged right by the answers judged.",
          expects="a number between 0 and 1")
def _answer_precision(answer: Any) -> bool:
    return not isinstance(answer, bool) and close_to(answer, 0.75, tolerance=0.005)


# --------------------------------------------------------------------------- notebook 19


@exercise("nb19-ex1", hint="A marker is valid when its number names a shown section and its quote is in that very "
          "section; a claim with no number has no marker at all.", expects="a whole number")
def _valid_model_markers(answer: Any) -> bool:
    return whole_number(answer) == 2


@exercise("nb19-ex2", hint="Compare the quote with the section word by word: is every word of the quote in the "
          "section, in that order?", expects='"yes" or "no"')
def _quote_with_a_changed_word(answer: Any) -> bool:
    return normalized_answer(answer) == "no"


@exercise("nb19-ex3", hint="Go through the clauses in order: a specific without general framing or advice, an "
          "obligation without a hedge, a permission granted as fact, an opening Yes or No.", expects='"yes" or "no"')
def _free_parking_flagged(answer: Any) -> bool:
    return normalized_answer(answer) == "yes"


# --------------------------------------------------------------------------- notebook 20


@exercise("nb20-ex1", hint="Answering costs 20 minutes times the chance the answer is wrong; handing over costs 5. "
          "Set the two equal and solve for P(right).", expects="a probability between 0 and 1")
def _act_over_hand_over_break_even(answer: Any) -> bool:
    return not isinstance(answer, bool) and close_to(answer, 1 - 5 / 20, tolerance=0.002)


@exercise("nb20-ex2", hint="With probability 0.7 the question back is all it costs; otherwise the hand-over "
          "follows it. Weight the two costs by their chances.", expects="minutes, a number")
def _expected_ask_cost(answer: Any) -> bool:
    return not isinstance(answer, bool) and close_to(answer, 0.7 * 2 + 0.3 * (2 + 4), tolerance=0.01)


@exercise("nb20-ex3", hint="Price all three: answering costs 15 times P(wrong); asking costs 2, plus 4 when the "
          "heading is not the right one; handing over costs 4. Take the cheapest.",
          expects='"act", "ask" or "hand_over"')
def _cheapest_decision(answer: Any) -> bool:
    return normalized_answer(answer).replace(" ", "_").replace("-", "_") == "ask"


# --------------------------------------------------------------------------- notebook 09


@exercise("nb09-ex1", hint="Each word's probability is the share of right answers among the calibration answers "
          "that said it; a word nobody said gets the share right over all of them.",
          expects="a pair of probabilities: (certain, unsure)")
def _category_map_by_hand(answer: Any) -> bool:
    return all_close_to(answer, (31 / 50, (31 + 9 + 2) / 80), tolerance=0.005)


@exercise("nb09-ex2", hint="There are 2 x 2 (right, wrong) pairs; a pair in the right order counts 1, a tie one half. "
          "Count them before the map, then again with the mapped values.",
          expects="a pair of numbers between 0 and 1: (before, after)")
def _isotonic_ties_a_right_pair(answer: Any) -> bool:
    return all_close_to(answer, (3.5 / 4, 3 / 4), tolerance=0.001)


@exercise("nb09-ex3", hint="No was not among the candidates, so it has at most the lowest candidate's probability: "
          "count it at exp(-5.0) and renormalise exp(-0.1) over the two.", expects="a probability between 0 and 1")
def _bounded_p_true(answer: Any) -> bool:
    return not isinstance(answer, bool) and close_to(answer, math.exp(-0.1) / (math.exp(-0.1) + math.exp(-5.0)),
                                                   tolerance=0.0005)


# --------------------------------------------------------------------------- notebook 21


@exercise("nb21-ex1", hint="Right for both counts in both totals; subtract it from the smaller model's.", expects="a count")
def _only_the_smaller_model_right(answer: Any) -> bool:
    return whole_number(answer) == 820 - 790


@exercise("nb21-ex2", hint="ECE compares each bin's confidence with its accuracy, and here there is one bin; AUROC "
          "needs a right answer ranked above a wrong one, and every answer has the same score.",
          expects="a pair of numbers: (ECE, AUROC)")
def _calibrated_but_blind(answer: Any) -> bool:
    return all_close_to(answer, (0.0, 0.5), tolerance=0.001)


@exercise("nb21-ex3", hint="Staff minutes = messages not acted on x 4, for each model.", expects='"small" or "large"')
def _more_acted_saves_more(answer: Any) -> bool:
    return normalized_answer(answer) == "large"


@exercise("nb21-ex4", hint="Take one right and one wrong decision: the right one ranks higher only when it said 100 "
          "and the wrong one 50, and a tie counts one half.",
          expects="an AUROC between 0 and 1")
def _two_valued_number_auroc(answer: Any) -> bool:
    said_100_right, said_100_wrong = 29 / 42, 656 / 958
    ranked_above = said_100_right * (1 - said_100_wrong)
    tied = said_100_right * said_100_wrong + (1 - said_100_right) * (1 - said_100_wrong)
    return not isinstance(answer, bool) and close_to(answer, ranked_above + tied / 2, tolerance=0.0005)
