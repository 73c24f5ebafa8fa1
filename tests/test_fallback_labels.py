"""The hand labels of the fallback run cover exactly its answers, one allowed label and a reason each."""
from __future__ import annotations

from conftest import hand_labels

from lib.datasets import CORPUS_DIR
from lib.fallback_answers import FALLBACK_LABELS, states_invented_policy
from lib.saved_runs.items import load_run
from lib.saved_runs.questions import FALLBACK_ANSWERS

LABELS_PATH = CORPUS_DIR / "fallback_labels.jsonl"


def _labels() -> list[dict]:
    return hand_labels(LABELS_PATH)


def test_labels_cover_exactly_the_runs_answers():
    header, rows = load_run(FALLBACK_ANSWERS)
    ids = [row["id"] for row in _labels()]
    assert len(ids) == len(set(ids)), "an answer is labelled twice"
    assert len(rows) == header["items"], f"{FALLBACK_ANSWERS} is unfinished: {header['command']}"
    assert sorted(ids) == sorted(rows["id"]) == sorted(header["settings"]["questions"])


def test_every_label_is_allowed_and_has_a_reason():
    for row in _labels():
        assert set(row) == {"id", "label", "reason"}, row
        assert row["label"] in FALLBACK_LABELS, row
        assert row["reason"].strip(), row


def test_the_saved_flags_are_the_rules_flags_on_the_saved_answers():
    _, rows = load_run(FALLBACK_ANSWERS)
    assert [states_invented_policy(answer) for answer in rows["answer"]] == list(rows["invented_policy"])
