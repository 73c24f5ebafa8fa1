"""Checkers of notebook 03's exercises: the right answer passes, wrong or malformed ones fail."""
from lib.exercises import is_correct


def test_nb03_ex1():
    from lib.datasets import load_corpus
    from lib.exercises import NB03_EX1_QUOTES
    from lib.quotes import verify_quote

    source = {section.id: section.text for section in load_corpus()}["handbook/stipends"]
    verdicts = {letter: verify_quote(quote, source) for letter, quote in NB03_EX1_QUOTES.items()}
    assert {letter: check.kind for letter, check in verdicts.items()} == {
        "a": "exact", "b": "not_found", "c": "normalized", "d": "normalized", "e": "elided", "f": "not_found"}
    assert is_correct("nb03-ex1", "acde")[0]
    assert is_correct("nb03-ex1", "A, C, D, E")[0]
    assert is_correct("nb03-ex1", ["e", "d", "c", "a"])[0]
    assert not is_correct("nb03-ex1", "ac")[0]  # the final full stop is forgiven, and so is the elision
    assert not is_correct("nb03-ex1", "abcde")[0]  # b starts inside the number 3,385
    assert not is_correct("nb03-ex1", "acdef")[0]  # f leaves out "not"
    for malformed in (3, "xyz", None, ["ab"]):
        assert not is_correct("nb03-ex1", malformed)[0]


def test_nb03_ex2():
    assert is_correct("nb03-ex2", "THE STANDARD  STIPEND is 3,140 per month")[0]
    assert not is_correct("nb03-ex2", "the standard stipend is 3,140 per month")[0]  # exact, not normalised
    assert not is_correct("nb03-ex2", "the standard stipend is 3,410 per month")[0]
    assert not is_correct("nb03-ex2", None)[0]


def test_nb03_ex3():
    import pandas as pd

    from lib.datasets import CORPUS_DIR, load_corpus
    from lib.quotes import verify_quote

    row = pd.read_json(CORPUS_DIR / "quotes_labelled.jsonl", lines=True).set_index("id").loc["v31"]
    quote, source = row["quote"], {section.id: section.text for section in load_corpus()}[row["section_id"]]
    (_, first_end), (second_start, _) = verify_quote(quote, source).spans
    assert second_start - first_end == 128
    assert is_correct("nb03-ex3", 128)[0]
    assert not is_correct("nb03-ex3", 127)[0]
    assert not is_correct("nb03-ex3", 80)[0]  # v23's gap, printed in the notebook
    assert not is_correct("nb03-ex3", 400)[0]
    assert not is_correct("nb03-ex3", "eighty")[0]
