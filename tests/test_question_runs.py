"""Saved item runs (lib.saved_runs.items.run_items, lib.saved_runs.questions): resumable, never mixed, read back as written."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lib.citations import GENERAL_ANSWER_BANNER
from lib.decisions import ShortlistDecider
from lib.datasets import banking77_pool, load_label_groups, load_questions
from lib.indexes import IntentRetriever
from lib.backends.protocol import CapabilityError, TokenLogprob
from lib.saved_runs.items import CallTimer, decode_tokens, encode_tokens, load_item_run, load_run, run_items
from lib.saved_runs.questions import FALLBACK_ANSWERS, INJECTION, QUESTION_RUNS, code_routing_prompt, injection_items
from lib.saved_runs.registry import RUNS, produce, saved_run
from lib.selective import auroc
from lib.semantic_entropy import auroc_difference, sample_answers, short_answer_questions

ITEMS = [f"item {n}" for n in range(6)]
IDENTITY = dict(model="fake-model", backend="fake")


def _run(tmp_path, compute, *, settings=None, mode="replay", items=ITEMS):
    return run_items("demo", items, compute, settings=settings or {"prompt": "p"}, mode=mode,
                     results_dir=tmp_path, progress=False, **IDENTITY)


def test_an_interrupted_run_resumes_and_ends_as_an_uninterrupted_one(tmp_path):
    calls, stop_at = [], {"n": None}

    def compute(i, item):
        calls.append(i)
        if len(calls) == stop_at["n"]:
            raise RuntimeError("killed")
        return {"text": item.upper(), "seconds": 0.5}

    whole = _run(tmp_path, compute)
    stopped_dir = tmp_path / "stopped"
    calls.clear()
    stop_at["n"] = 4
    with pytest.raises(RuntimeError, match="killed"):
        _run(stopped_dir, compute)
    stop_at["n"] = None
    assert len(load_item_run("demo", stopped_dir)[1]) == 3
    calls.clear()
    _run(stopped_dir, compute)
    assert calls == [3, 4, 5]  # only the missing items are computed
    header, rows = load_item_run("demo", stopped_dir)
    assert rows == load_item_run("demo", tmp_path)[1]
    assert [row["i"] for row in rows] == list(range(6)) and rows[2]["text"] == "ITEM 2"
    assert header["mode"] == "replay" and header["items"] == 6 and header["settings"] == {"prompt": "p"}
    first_line = json.loads(whole.read_text(encoding="utf-8").splitlines()[0])
    assert first_line["kind"] == "header" and first_line["command"] == "python setup/run_saved.py --run demo"


def test_other_settings_are_never_mixed_in(tmp_path):
    _run(tmp_path, lambda i, item: {"x": i}, items=ITEMS[:2])
    with pytest.raises(ValueError, match="other settings"):
        _run(tmp_path, lambda i, item: {"x": i}, settings={"prompt": "changed"})


def test_an_unfinished_file_is_finished_in_its_own_mode(tmp_path):
    _run(tmp_path, lambda i, item: {"x": i}, items=ITEMS[:2])
    with pytest.raises(ValueError, match="started in replay mode"):
        _run(tmp_path, lambda i, item: {"x": i}, mode="live")
    _run(tmp_path, lambda i, item: {"x": i}, items=ITEMS[:2], mode="live")  # complete: nothing to add, no error
    with pytest.raises(ValueError, match="mode must be one of"):
        _run(tmp_path, lambda i, item: {"x": i}, mode="record")


def test_a_missing_run_names_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"`python setup/run_saved.py --run handbook-short-answers`"):
        load_item_run("handbook-short-answers", tmp_path)


def test_tokens_survive_the_round_trip():
    tokens = (TokenLogprob("F", -0.6, (("F", -0.6), ("D", -1.9))), TokenLogprob("-J", -1.5, ()))
    assert decode_tokens(json.loads(json.dumps(encode_tokens(tokens)))) == tokens


def test_every_question_run_has_a_recording_to_replay_and_the_shared_questions_are_stable():
    names = [run.name for run in RUNS if run.family == "questions"]
    assert names == list(QUESTION_RUNS)
    assert names.index("assistant-dev-fit") < min(names.index("assistant-test"), names.index("assistant-test-past-boundary"))
    assert all(saved_run(name).recordings for name in names)
    questions = short_answer_questions()
    assert len(questions) == 60 and questions["id"].is_monotonic_increasing
    assert (questions["answer"].str.len() <= 20).all() and (questions["type"] == "answerable").all()


def test_sample_answers_draws_seeded_samples_after_one_greedy_answer(fake_llm):
    llm = fake_llm([f"answer {i}" for i in range(1, 5)], seconds=0.25)
    timer = CallTimer(llm)
    greedy, samples = sample_answers(timer, "When?", "Section text.", n_samples=3)
    assert [r["temperature"] for r in llm.requests] == [0.0, 0.7, 0.7, 0.7]
    assert [r.get("seed") for r in llm.requests[1:]] == [0, 1, 2] and llm.requests[0]["top_logprobs"] == 5
    assert greedy.text == "answer 1" and len(samples) == 3 and timer.seconds == pytest.approx(1.0)
    with pytest.raises(ValueError, match="temperature above 0"):
        sample_answers(llm, "When?", "Section text.", temperature=0.0)


def test_paired_auroc_difference():
    rng = np.random.default_rng(1)
    correct = rng.random(80) < 0.6
    good = 1 / (1 + np.exp(-(2 * correct - 1 + rng.normal(0, 0.8, 80))))  # confidences in [0, 1]
    noise = rng.random(80)
    difference, low, high = auroc_difference(good, noise, correct, n=500)
    assert difference == pytest.approx(auroc(good, correct) - auroc(noise, correct))
    assert 0 < low < difference < high
    assert auroc_difference(good, good, correct, n=200) == (0.0, 0.0, 0.0)  # the same signal: no difference at all
    with pytest.raises(ValueError, match="only one class"):
        auroc_difference(good, noise, np.ones(80, dtype=bool))
    with pytest.raises(ValueError, match="same length"):
        auroc_difference(good[:10], noise, correct)


def test_a_names_shortlist_writes_its_prompt_anywhere_but_decides_only_embedded(fake_llm, minilm):
    pool = banking77_pool().groupby("label", sort=True).head(2).reset_index(drop=True)
    decider = ShortlistDecider(CallTimer(fake_llm()), IntentRetriever(pool, minilm), load_label_groups("banking77"),
                               answer="names", n_orders=1, calibrate=False, debias="none")
    prompt = decider.messages(["card_arrival", "lost_or_stolen_card"], "Where is my card?")[-1]["content"]
    assert "- card_arrival:" in prompt and prompt.endswith("Customer message: Where is my card?")
    with pytest.raises(CapabilityError, match="embedded backend"):
        decider.decide("Where is my card?")


def test_an_item_run_without_its_header_is_refused_not_wiped(tmp_path):
    path = _run(tmp_path, lambda i, item: {"x": i}, items=ITEMS[:3])
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[1:]), encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(ValueError, match="no header line but holds 3 rows"):
        _run(tmp_path, lambda i, item: {"x": i})
    assert path.read_bytes() == before


def test_an_item_run_killed_mid_line_is_repaired_by_the_writer_only(tmp_path):
    path = _run(tmp_path, lambda i, item: {"x": i}, items=ITEMS[:3])
    text = path.read_text(encoding="utf-8")
    path.write_text(text + '{"kind": "row", "i": 3, "x"', encoding="utf-8")
    before = path.read_bytes()
    assert len(load_item_run("demo", tmp_path)[1]) == 3
    assert path.read_bytes() == before  # a read never writes
    with pytest.warns(UserWarning, match="unfinished last line"):
        _run(tmp_path, lambda i, item: {"x": i})
    assert [row["x"] for row in load_item_run("demo", tmp_path)[1]] == list(range(6))


def test_reply_kind_tells_listed_labels_from_invented_ones():
    from lib.saved_runs.questions import reply_kind

    codes = {"A-A": "card_arrival", "B-C": "top_up_failed"}
    assert reply_kind(" B-C\n", codes) == ("listed code", "top_up_failed")
    assert reply_kind("card_arrival", codes) == ("listed name", "card_arrival")
    assert reply_kind("H-Z", codes) == ("invented code", None)
    assert reply_kind("card_lost_abroad", codes) == ("invented name", None)
    for reply in ("B-C.", "The code is B-C", "b-c", "Hello", "", "arrival"):
        assert reply_kind(reply, codes) == ("not a label", None)


def test_every_saved_run_names_the_notebooks_it_serves():
    assert saved_run("banking77-grammar-vs-free").recordings == ("06-grammars",)
    assert saved_run("banking77-grammar-vs-free").notebooks == ("06",)


def test_notebook_05_runs_replay_its_recordings_and_decide_each_message_both_ways():
    for name in ("banking77-routed-codes", "banking77-injection", "clinc150-injection"):
        assert saved_run(name).recordings == ("06-grammars",)
    for task, n in (("banking77", 6), ("clinc150", 5)):
        items = injection_items(task)
        assert len(items) == 2 * n and [item["version"] for item in items[:2]] == ["as sent", "injected"]
        assert all(b["message"] == f"{a['text']} {INJECTION}" and a["message"] == a["text"] == b["text"]
                   for a, b in zip(items[::2], items[1::2]))
        assert not any("exchange" in item["label"] or item["label"] == "oos" for item in items)
    prompt = code_routing_prompt(load_label_groups("banking77"))
    assert prompt.count("\n  ") == 77 and "\n  C-F top_up_by_card_charge\n" in prompt


def test_the_fallback_run_answers_every_unanswerable_question_behind_the_banner_with_the_rules_flag(tmp_path, fake_llm):
    questions = load_questions()
    unanswerable = questions[(questions["type"] == "unanswerable") & questions["split"].isin(["dev", "test"])]
    general = "Such rules usually vary; ask the graduate office."
    llm = fake_llm(["The fee is 40 per month."] + [general] * (len(unanswerable) - 1), seconds=2.0)
    llm.identity = "scripted-model"
    produce(FALLBACK_ANSWERS, mode="replay", llm=llm, results_dir=tmp_path, progress=False)
    header, rows = load_run(FALLBACK_ANSWERS, tmp_path)
    assert list(rows["id"]) == sorted(unanswerable["id"]) == header["settings"]["questions"]
    assert set(rows["split"]) == {"dev", "test"} and (rows["seconds"] == 2.0).all()
    assert rows["reply"].str.startswith(GENERAL_ANSWER_BANNER).all()
    assert list(rows["invented_policy"]) == [True] + [False] * (len(rows) - 1)
    assert rows["flagged"][0] == ["The fee is 40 per month."]
    assert llm.requests[0]["messages"][1]["content"] == rows["question"][0]
