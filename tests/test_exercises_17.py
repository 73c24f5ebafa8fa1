"""The notebook 17 exercise checkers accept the right answer and reject wrong ones, and the answers hold in lib."""
from lib.exercises import is_correct
from lib.fallback_answers import states_invented_policy
from lib.model_citations import Claim, ClaimedAnswer, check_claims


def test_ex1_valid_markers_are_counted_as_check_claims_counts_them():
    shown = {"a": "Theses are due on 1 May.", "b": "Late theses cost a fee of 80."}
    claims = ClaimedAnswer(claims=[Claim(sentence="Theses are due on 1 May.", source=1, quote="due on 1 May"),
                                   Claim(sentence="The late fee is 80.", source=1, quote="a fee of 80"),
                                   Claim(sentence="Ask your advisor.", source=None, quote="")])
    valid = sum(v.valid for v in check_claims(claims, shown))
    assert valid == 1 and is_correct("nb17-ex1", valid)[0]
    assert not is_correct("nb17-ex1", 2)[0] and not is_correct("nb17-ex1", True)[0]


def test_ex2_a_quote_in_another_section_is_not_a_valid_citation():
    assert is_correct("nb17-ex2", "no")[0] and is_correct("nb17-ex2", " No ")[0]
    assert not is_correct("nb17-ex2", "yes")[0]


def test_ex3_the_rule_does_not_flag_general_framing():
    sentence = "Most universities charge a late fee; contact the Registrar's Office."
    assert not states_invented_policy(sentence)
    assert is_correct("nb17-ex3", "no")[0] and not is_correct("nb17-ex3", "yes")[0]
