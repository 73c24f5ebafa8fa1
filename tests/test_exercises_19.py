"""The notebook 19 exercise checkers accept the right answer and reject wrong ones, and the answers hold in lib."""
from lib.exercises import is_correct
from lib.fallback_answers import states_invented_policy
from lib.model_citations import Claim, ClaimedAnswer, check_claims


def test_ex1_valid_markers_are_counted_as_check_claims_counts_them():
    shown = {"a": "Theses are due on 1 May.", "b": "Late theses cost a fee of 80."}
    claims = ClaimedAnswer(claims=[Claim(sentence="A late thesis costs 80.", source=2, quote="a fee of 80"),
                                   Claim(sentence="Extensions need a form.", source=3, quote="an extension form"),
                                   Claim(sentence="Theses are due in May.", source=1, quote="due on 1 May"),
                                   Claim(sentence="Ask your advisor.", source=None, quote="")])
    valid = sum(v.valid for v in check_claims(claims, shown))
    assert valid == 2 and is_correct("nb19-ex1", valid)[0]
    assert not is_correct("nb19-ex1", 3)[0] and not is_correct("nb19-ex1", True)[0]


def test_ex2_a_quote_with_a_changed_word_is_not_valid():
    shown = {"exam": "The exam must be passed by the end of the fourth semester."}
    claim = ClaimedAnswer(claims=[Claim(sentence="The exam is due in the fourth semester.", source=1,
                                        quote="at the end of the fourth semester")])
    assert not check_claims(claim, shown)[0].valid
    assert is_correct("nb19-ex2", "no")[0] and is_correct("nb19-ex2", " No ")[0]
    assert not is_correct("nb19-ex2", "yes")[0]


def test_ex3_the_rule_flags_a_permission_granted_as_fact():
    sentence = "Graduate students may park for free after 6 pm."
    assert states_invented_policy(sentence)
    assert is_correct("nb19-ex3", "yes")[0] and not is_correct("nb19-ex3", "no")[0]
