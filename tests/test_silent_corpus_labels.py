"""The hand labels of the silent-corpus run cover exactly its questions, one allowed label each."""
from __future__ import annotations

from conftest import hand_labels

from lib.datasets import CORPUS_DIR, load_questions
from lib.saved_runs.items import load_run
from lib.saved_runs.questions import SILENT_CORPUS

LABELS_PATH = CORPUS_DIR / "silent_corpus_labels.jsonl"
ALLOWED = {"declined", "invented", "other"}


def _labels() -> list[dict]:
    return hand_labels(LABELS_PATH)


def test_labels_cover_exactly_the_runs_questions():
    header, rows = load_run(SILENT_CORPUS)
    ids = [row["id"] for row in _labels()]
    assert len(ids) == len(set(ids)), "a question is labelled twice"
    assert sorted(ids) == sorted(rows["id"]) == sorted(header["settings"]["questions"])


def test_every_label_is_allowed_and_has_a_reason():
    for row in _labels():
        assert set(row) == {"id", "label", "reason"}, row
        assert row["label"] in ALLOWED, row
        assert row["reason"].strip(), row


def test_the_labelled_questions_are_the_unanswerable_dev_and_test_ones():
    questions = load_questions()
    unanswerable = questions[(questions["type"] == "unanswerable") & questions["split"].isin(["dev", "test"])]
    assert sorted(row["id"] for row in _labels()) == sorted(unanswerable["id"])
