"""The saved runs of notebook 09: the model asked three ways how sure it is of the answers it gave.

For every saved answer (the full-list decider's BANKING77 calibration decisions, a stratified
sample of its test decisions, the 60 grounded handbook answers of notebooks 07 and 10) the model
is asked for a number from 0 to 100, a word from a closed list, and P(True) (`lib.asking.ask_all`).
Each run reads the run it asks about from the results folder (the registry names it as the run's
input), visits its items in a seeded random order, so an unfinished run holds a random subset,
and is live only: asking is a new model call the recordings do not hold. Each row: the saved
answer, whether it was right, its token confidence (`confidence`) and seconds, then
`lib.asking.AskedConfidence.as_row`.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lib.asking import (CATEGORY_GRAMMAR, CATEGORY_QUESTION, NUMBER_GRAMMAR, NUMBER_QUESTION, NUMBER_TOP_LOGPROBS,
                        TRUE_QUESTION, YES_NO_TOKENS, ask_all)
from lib.backends.protocol import LLM
from lib.datasets import load_corpus, load_label_groups
from lib.decisions import FullListDecider
from lib.hashing import fingerprint
from lib.indexes import DenseIndex, chunk_by_heading
from lib.saved_runs.decisions import load_results, results_header
from lib.saved_runs.items import Prepare, Prepared, decode_tokens, load_run
from lib.saved_runs.store import Row, run_command
from lib.semantic_entropy import short_answer_messages, short_answer_questions
from lib.text import matches_gold

__all__ = [
    "HANDBOOK_RUN", "CALIBRATION_RUN", "TEST_RUN", "TEST_SAMPLE", "TEST_SAMPLE_SEED", "ASKING_ORDER_SEED",
    "ASKING_SETTINGS", "stratified_sample", "asking_about_decisions", "asking_about_answers",
]
HANDBOOK_RUN = "asking-handbook"
CALIBRATION_RUN = "asking-banking77-calibration"
TEST_RUN = "asking-banking77-test"
TEST_SAMPLE, TEST_SAMPLE_SEED, ASKING_ORDER_SEED = 1000, 27, 2027
"""The test run asks about a stratified sample of `TEST_SAMPLE` test messages (seeded); every run
visits its items in a seeded random order, so an unfinished run holds a random subset."""
ASKING_SETTINGS = {"number_question": NUMBER_QUESTION, "number_grammar": NUMBER_GRAMMAR,
                   "category_question": CATEGORY_QUESTION, "category_grammar": CATEGORY_GRAMMAR,
                   "true_question": TRUE_QUESTION, "yes_no_tokens": list(YES_NO_TOKENS),
                   "number_top_logprobs": NUMBER_TOP_LOGPROBS}


def stratified_sample(labels: Sequence[str], size: int, seed: int) -> list[int]:
    """Positions of `size` items drawn so each label keeps its share (scikit-learn's stratified split), sorted."""
    from sklearn.model_selection import train_test_split

    positions = np.arange(len(labels))
    if size >= len(labels):
        return positions.tolist()
    chosen, _ = train_test_split(positions, train_size=size, stratify=list(labels), random_state=seed)
    return sorted(int(p) for p in chosen)


def _in_seeded_order(items: list[Row]) -> list[Row]:
    order = np.random.default_rng(ASKING_ORDER_SEED).permutation(len(items))
    return [items[i] for i in order]


def asking_about_decisions(split: str) -> Prepare:
    """The run that asks about the full-list decider's saved BANKING77 decisions on `split`: every
    calibration decision, or a stratified sample of `TEST_SAMPLE` test decisions."""
    def prepare(llm: LLM, results_dir: Path) -> Prepared:
        decider = FullListDecider(llm, load_label_groups("banking77"), exact=False)  # for its prompt only
        saved = load_results("banking77", split, "full", results_dir)
        positions = (stratified_sample(saved["label"].tolist(), TEST_SAMPLE, TEST_SAMPLE_SEED) if split == "test"
                     else list(range(len(saved))))
        items = _in_seeded_order([{"message": int(saved["i"].iloc[p]), "text": saved["text"].iloc[p],
                                   "label": saved["label"].iloc[p], "code": saved["code"].iloc[p],
                                   "correct": bool(saved["correct"].iloc[p]),
                                   "confidence": float(saved["confidence"].iloc[p]),
                                   "decision_seconds": float(saved["seconds"].iloc[p])} for p in positions])

        def compute(i: int, item: Row) -> Row:
            asked = ask_all(llm, decider.messages(item["text"]), item["code"], shown_as="Customer message")
            return {**item, **asked.as_row()}

        settings = {**ASKING_SETTINGS, "answers": results_header("banking77", split, "full", results_dir)["fingerprint"],
                    "system": fingerprint(decider.system_prompt),
                    "messages": fingerprint([item["message"] for item in items])}
        return items, compute, settings
    return prepare


def asking_about_answers(answers: str) -> Prepare:
    """The run that asks about the grounded answers of the saved run `answers` (the short-answer
    questions of `lib.semantic_entropy`, each answered from its retrieved section)."""
    return lambda llm, results_dir: _asking_about_answers(answers, llm, results_dir)


def _asking_about_answers(answers: str, llm: LLM, results_dir: Path) -> Prepared:
    header, saved = load_run(answers, results_dir)
    questions = short_answer_questions()
    if saved["id"].tolist() != questions["id"].tolist():
        raise ValueError(f"{results_dir / answers}.jsonl holds other questions than short_answer_questions(); "
                         f"remake it with `{run_command(answers, results_dir)}`")
    index = DenseIndex(chunk_by_heading(load_corpus()), llm.embed)
    hits = [found[0] for found in index.search_many(questions["question"].tolist(), k=1)]
    if [hit.chunk.section_id for hit in hits] != saved["section"].tolist():
        raise ValueError(f"retrieval now finds other sections than {results_dir / answers}.jsonl saved; remake it "
                         f"with `{run_command(answers, results_dir)}`")
    items = []
    for row, hit in zip(saved.itertuples(), hits):
        logprobs = [t.logprob for t in decode_tokens(row.tokens)]
        items.append({"id": row.id, "question": row.question, "gold": row.gold, "greedy": row.greedy,
                      "correct": matches_gold(row.greedy, row.gold),
                      "confidence": float(np.exp(np.mean(logprobs))), "decision_seconds": float(row.greedy_seconds),
                      "context": hit.chunk.text})

    def compute(i: int, item: Row) -> Row:
        messages = short_answer_messages(item["question"], item["context"])
        asked = ask_all(llm, messages, item["greedy"], shown_as="Question")
        return {**{k: v for k, v in item.items() if k != "context"}, **asked.as_row()}

    settings = {**ASKING_SETTINGS, "answers": header["fingerprint"], "questions": [item["id"] for item in items],
                "contexts": fingerprint([item["context"] for item in items])}
    return items, compute, settings
