"""Saved runs: resumable, independent of interruptions and workers, and readable as a DataFrame."""
from __future__ import annotations

import json
import threading

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from lib.calibration import brier, ece, nll
from lib.datasets import OUT_OF_SCOPE
from lib.decisions import IntentDecision, DecisionStep
from lib.saved_runs.decisions import (complete_methods, confidence_signals, load_results, load_split, METHODS,
                                      option_scores, processing_order, results_header, results_path,
                                      ResultsTemperatureScaling, run_is_complete, run_progress, run_split, run_table)


class FakeDecider:
    """Deterministic decisions from the text alone: fast, and the same in every run."""

    method = "full"
    fingerprint = "fake-1"
    thread_safe = True

    def __init__(self, fail_after: int | None = None) -> None:
        self.calls = 0
        self.fail_after = fail_after
        self._lock = threading.Lock()

    def decide(self, text: str) -> IntentDecision:
        with self._lock:
            self.calls += 1
            if self.fail_after is not None and self.calls > self.fail_after:
                raise KeyboardInterrupt("simulated kill")
        labels = ("card_arrival", "card_linking", "activate_my_card")
        first = len(text) % 3
        probs = (0.5, 0.3, 0.2)
        order = tuple(labels[(first + j) % 3] for j in range(3))
        step = DecisionStep("intent", ("A", "B", "C"), probs, 0.01)
        return IntentDecision(label=order[0], code="A-A", confidence=0.5, steps=(step,), off_label_mass=0.01,
                              candidates=order, candidate_probs=probs, seconds=0.0, details={"p_group": 1.0})


def _rows(path):
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    header = {k: v for k, v in lines[0].items() if k != "date"}
    return header, lines[1:]


def test_interrupted_then_resumed_run_equals_uninterrupted(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=60, results_dir=whole,
              progress=False)
    with pytest.raises(KeyboardInterrupt):
        run_split("banking77", "calibration", "full", decider=FakeDecider(fail_after=25), limit=60,
                  results_dir=parts, progress=False)
    path = results_path("banking77", "calibration", "full", parts)
    with open(path, "a", encoding="utf-8") as handle:  # a line cut short by the kill
        handle.write('{"kind": "row", "i": 25, "te')
    resumed = FakeDecider()
    run_split("banking77", "calibration", "full", decider=resumed, limit=60, results_dir=parts, progress=False)
    assert resumed.calls == 35  # only the rows not yet saved
    assert _rows(path) == _rows(results_path("banking77", "calibration", "full", whole))


def test_workers_write_the_same_file(tmp_path):
    one, many = tmp_path / "one", tmp_path / "many"
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=40, results_dir=one, progress=False)
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=40, results_dir=many,
              workers=4, progress=False)
    assert _rows(results_path("banking77", "calibration", "full", one)) == \
        _rows(results_path("banking77", "calibration", "full", many))


def test_resuming_with_another_prompt_raises(tmp_path):
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=3, results_dir=tmp_path,
              progress=False)
    changed = FakeDecider()
    changed.fingerprint = "fake-2"
    with pytest.raises(ValueError, match="other settings"):
        run_split("banking77", "calibration", "full", decider=changed, limit=5, results_dir=tmp_path,
                  progress=False)


def test_embedded_decider_refuses_workers(tmp_path):
    decider = FakeDecider()
    decider.thread_safe = False
    with pytest.raises(ValueError, match="one request at a time"):
        run_split("banking77", "calibration", "full", decider=decider, limit=3, workers=2, results_dir=tmp_path,
                  progress=False)


def test_load_results_columns(tmp_path):
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=10, results_dir=tmp_path,
              progress=False)
    frame = load_results("banking77", "calibration", "full", tmp_path)
    split = load_split("banking77", "calibration")
    chosen = sorted(processing_order(len(split))[:10])
    assert list(frame["i"]) == chosen  # rows come back in split order
    assert list(frame["text"]) == list(split["text"][chosen])
    assert list(frame["label"]) == list(split["label"][chosen])
    for column in ("pred", "confidence", "correct", "candidates", "candidate_probs", "intent_probs",
                   "intent_options", "p_group", "in_candidates", "off_label_mass"):
        assert column in frame.columns
    assert (frame["correct"] == (frame["pred"] == frame["label"])).all()
    assert np.allclose(frame["intent_probs"].iloc[0], [0.5, 0.3, 0.2])
    assert results_header("banking77", "calibration", "full", tmp_path)["fingerprint"] == "fake-1"


def test_missing_results_say_how_to_make_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="python setup/run_saved.py --run clinc150-knn-test"):
        load_results("clinc150", "test", "knn", tmp_path)


def test_shortlist_variants_from_saved_probabilities(tmp_path):
    class Shortlist(FakeDecider):
        method = "shortlist"

        def decide(self, text: str) -> IntentDecision:
            candidates = ("card_arrival", "card_linking")
            step = DecisionStep("option", candidates, (0.4, 0.6), 0.0)
            return IntentDecision(label="card_linking", code="B", confidence=0.6, steps=(step,), off_label_mass=0.0,
                            candidates=candidates, candidate_probs=(0.4, 0.6), seconds=0.0,
                            details={"orders": [[0, 1], [1, 0]], "order_probs": [[0.2, 0.8], [0.6, 0.4]],
                                     "content_free": [[0.1, 0.9], [0.5, 0.5]]})

    run_split("banking77", "calibration", "shortlist", decider=Shortlist(), limit=2, results_dir=tmp_path,
              progress=False)
    row = load_results("banking77", "calibration", "shortlist", tmp_path).iloc[0]
    assert row["pred_first"] == "card_linking"
    assert np.allclose(row["probs_permuted"], [0.4, 0.6])
    assert row["pred_calibrated"] == "card_arrival"  # the prior for B explained its lead away


def test_none_of_these_gets_a_variant_that_leaves_it_uncalibrated(tmp_path):
    class ShortlistWithNone(FakeDecider):
        method = "shortlist"

        def decide(self, text: str) -> IntentDecision:
            candidates = ("card_arrival", OUT_OF_SCOPE)
            step = DecisionStep("option", candidates, (0.3, 0.7), 0.0)
            return IntentDecision(label="card_arrival", code="A", confidence=0.8, steps=(step,), off_label_mass=0.0,
                            candidates=candidates, candidate_probs=(0.8, 0.2), seconds=0.0,
                            details={"orders": [[0, 1], [0, 1]], "order_probs": [[0.3, 0.7], [0.3, 0.7]],
                                     "content_free": [[0.1, 0.9], [0.1, 0.9]]})

    run_split("banking77", "calibration", "shortlist", decider=ShortlistWithNone(), limit=1, results_dir=tmp_path,
              progress=False)
    row = load_results("banking77", "calibration", "shortlist", tmp_path).iloc[0]
    assert row["pred_calibrated"] == "card_arrival"  # dividing by "N/A"'s 0.9 sinks "none of these"
    assert row["pred_calibrated_intents"] == OUT_OF_SCOPE
    assert np.allclose(row["probs_calibrated_intents"], [0.3, 0.7])


def test_batched_deciders_write_the_same_file(tmp_path):
    class Batched(FakeDecider):
        def decide_many(self, texts):
            return [self.decide(text) for text in texts]

    one, batched = tmp_path / "one", tmp_path / "batched"
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=70, results_dir=one, progress=False)
    run_split("banking77", "calibration", "full", decider=Batched(), limit=70, results_dir=batched, progress=False)
    assert _rows(results_path("banking77", "calibration", "full", one)) == \
        _rows(results_path("banking77", "calibration", "full", batched))


def test_a_limited_run_is_a_seeded_random_sample(tmp_path):
    run_split("banking77", "test", "full", decider=FakeDecider(), limit=40, results_dir=tmp_path, progress=False)
    frame = load_results("banking77", "test", "full", results_dir=tmp_path)
    assert sorted(frame["i"]) == sorted(processing_order(3080)[:40])
    assert frame["label"].nunique() > 20  # the test file is sorted by label: a prefix would hold one or two
    assert run_progress("banking77", "test", "full", results_dir=tmp_path) == (40, 3080)
    assert processing_order(3080) == processing_order(3080)


# --------------------------------------------------------------------------- reliability (issue 14)


def _path(tmp_path, split="calibration"):
    return results_path("banking77", split, "full", tmp_path)


def test_a_file_without_its_header_is_refused_not_wiped(tmp_path):
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=10, results_dir=tmp_path,
              progress=False)
    path = _path(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[1:]), encoding="utf-8")  # sed -i 1d
    before = path.read_bytes()
    decider = FakeDecider()
    with pytest.raises(ValueError, match=rf"{path.name}.*no header line.*10 rows"):
        run_split("banking77", "calibration", "full", decider=decider, limit=20, results_dir=tmp_path,
                  progress=False)
    assert path.read_bytes() == before and decider.calls == 0


def test_reading_never_writes_and_the_writer_says_what_it_repaired(tmp_path):
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=10, results_dir=tmp_path,
              progress=False)
    path = _path(tmp_path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"kind": "row", "i": 3, "te')  # a line cut short by a kill
    torn = path.read_bytes()
    assert len(load_results("banking77", "calibration", "full", tmp_path)) == 10
    assert results_header("banking77", "calibration", "full", tmp_path)["fingerprint"] == "fake-1"
    assert run_progress("banking77", "calibration", "full", tmp_path) == (10, 770)
    assert path.read_bytes() == torn  # a read leaves the file as it found it
    with pytest.warns(UserWarning, match=r"removed an unfinished last line \(27 bytes\)"):
        run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=12, results_dir=tmp_path,
                  progress=False)
    assert len(load_results("banking77", "calibration", "full", tmp_path)) == 12


def test_a_garbage_line_names_the_file_and_the_line(tmp_path):
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=6, results_dir=tmp_path,
              progress=False)
    path = _path(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = "not json at all\n"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}, line 4: not a JSON line"):
        load_results("banking77", "calibration", "full", tmp_path)
    with pytest.raises(ValueError, match=rf"{path}, line 4"):
        run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=8, results_dir=tmp_path,
                  progress=False)


def test_an_empty_file_or_a_folder_is_not_called_missing(tmp_path):
    path = _path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="is empty") as error:
        load_results("banking77", "calibration", "full", tmp_path)
    assert "does not exist" not in str(error.value)
    path.unlink()
    path.mkdir()
    with pytest.raises(ValueError, match="is a folder, not a results file"):
        load_results("banking77", "calibration", "full", tmp_path)
    with pytest.raises(ValueError, match="is a folder, not a results file"):
        run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=2, results_dir=tmp_path,
                  progress=False)


def test_a_header_without_rows_says_so(tmp_path):
    path = _path(tmp_path)
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=1, results_dir=tmp_path,
              progress=False)
    path.write_text(path.read_text(encoding="utf-8").splitlines(keepends=True)[0], encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="holds no decided rows yet"):
        load_results("banking77", "calibration", "full", tmp_path)


@pytest.mark.parametrize("limit", [0, -760, 2.5])
def test_limit_must_be_a_positive_integer(tmp_path, limit):
    decider = FakeDecider()
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        run_split("banking77", "calibration", "full", decider=decider, limit=limit, results_dir=tmp_path,
                  progress=False)
    assert decider.calls == 0 and not _path(tmp_path).exists()


@pytest.mark.parametrize("limit", ["0", "-760"])
def test_the_runner_refuses_a_limit_that_is_not_positive(limit):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "setup" / "run_saved.py"), "--run", "banking77-knn-test",
                           "--limit", limit], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--limit: must be a positive integer" in done.stderr


def test_resuming_with_other_library_versions_warns(tmp_path):
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=3, results_dir=tmp_path,
              progress=False)
    path = _path(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header["versions"]["llama-cpp-python"] = "0.0.1"
    lines[0] = json.dumps(header, sort_keys=True) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.warns(UserWarning, match=r"llama-cpp-python 0\.0\.1 .*now"):
        run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=5, results_dir=tmp_path,
                  progress=False)


class FailingDecider(FakeDecider):
    """Fails on long messages, as a server with a short context does."""

    def __init__(self, max_chars: int = 60, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_chars = max_chars

    def decide(self, text: str) -> IntentDecision:
        if len(text) > self.max_chars:
            with self._lock:
                self.calls += 1
            raise ValueError(f"the prompt has {len(text)} tokens but the context holds {self.max_chars}")
        return super().decide(text)


def test_a_failed_message_becomes_a_failure_row(tmp_path):
    failing = FailingDecider()
    with pytest.warns(UserWarning, match="could not be decided"):
        run_split("banking77", "calibration", "full", decider=failing, limit=30, results_dir=tmp_path,
                  progress=False)
    assert failing.calls == 30
    with pytest.warns(UserWarning, match=r"[1-9]\d* of \d+ messages could not be decided"):
        frame = load_results("banking77", "calibration", "full", tmp_path)
    failures = pd.DataFrame(frame.attrs["failures"])
    assert len(frame) + len(failures) == 30 and len(failures) > 0
    assert len(pd.concat([frame, frame])) == 2 * len(frame)  # attrs that pandas can compare
    assert (failures["text"].str.len() > 60).all() and (frame["text"].str.len() <= 60).all()
    assert failures["error"].str.contains("context holds 60").all()
    assert run_progress("banking77", "calibration", "full", tmp_path) == (len(frame), 770)

    resumed = FailingDecider()  # resuming does not try the failed messages again...
    run_split("banking77", "calibration", "full", decider=resumed, limit=30, results_dir=tmp_path,
              progress=False)
    assert resumed.calls == 0
    retried = FailingDecider(max_chars=10_000)  # ...unless asked to (e.g. after giving the server more context)
    run_split("banking77", "calibration", "full", decider=retried, limit=30, results_dir=tmp_path,
              progress=False, retry_failures=True)
    assert retried.calls == len(failures)
    complete = load_results("banking77", "calibration", "full", tmp_path)
    assert len(complete) == 30 and len(complete.attrs["failures"]) == 0


def test_failures_with_workers_are_rows_too(tmp_path):
    with pytest.warns(UserWarning, match="could not be decided"):
        run_split("banking77", "calibration", "full", decider=FailingDecider(), limit=30, results_dir=tmp_path / "one",
                  progress=False)
    with pytest.warns(UserWarning, match="could not be decided"):
        run_split("banking77", "calibration", "full", decider=FailingDecider(), limit=30, results_dir=tmp_path / "many",
                  workers=3, progress=False)
    assert _rows(_path(tmp_path / "one")) == _rows(_path(tmp_path / "many"))


def test_a_run_where_every_message_fails_stops(tmp_path):
    with pytest.raises(RuntimeError, match=r"5 messages in a row failed.*context holds 1"):
        run_split("banking77", "calibration", "full", decider=FailingDecider(max_chars=1), limit=30,
                  results_dir=tmp_path, progress=False)


def test_only_runs_that_reached_every_message_are_complete(tmp_path):
    run_split("banking77", "calibration", "full", decider=FakeDecider(), limit=60, results_dir=tmp_path,
              progress=False)
    assert not run_is_complete("banking77", "calibration", "full", tmp_path)
    assert complete_methods("banking77", results_dir=tmp_path) == []
    table = run_table("banking77", tmp_path)
    assert list(table.columns) == ["method", "split", "decided", "total", "share"]
    assert len(table) == len(METHODS) * 2
    full = table[(table["method"] == "full") & (table["split"] == "calibration")].iloc[0]
    assert (full["decided"], full["total"], full["share"]) == (60, 770, round(60 / 770, 3))
    run_split("banking77", "calibration", "full", decider=FakeDecider(), results_dir=tmp_path, progress=False)
    assert run_is_complete("banking77", "calibration", "full", tmp_path)
    assert complete_methods("banking77", ("calibration",), tmp_path) == ["full"]
    assert complete_methods("banking77", results_dir=tmp_path) == []  # no test split yet


def test_knn_confidence_is_a_margin_with_a_second_signal():
    frame = pd.DataFrame({"confidence": [0.1, 0.3], "similarity": [0.8, 0.9], "correct": [True, False]})
    assert list(confidence_signals(frame, "embed-logreg")) == ["embed-logreg"]
    signals = confidence_signals(frame, "knn")
    assert list(signals) == ["knn (margin)", "knn (similarity)"]
    assert signals["knn (similarity)"][0].tolist() == [0.8, 0.9]
    assert signals["knn (margin)"][1].tolist() == [True, False]
    with pytest.raises(ValueError, match="method must be one of"):
        confidence_signals(frame, "unknown")


def test_option_scores_at_temperature_one_give_the_saved_confidence():
    frame = pd.DataFrame({"label": ["a", "z"], "pred": ["a", "b"], "candidates": [["a", "b"], ["b", "a"]],
                          "candidate_probs": [np.array([0.6, 0.3]), np.array([0.5, 0.2])],
                          "confidence": [0.6, 0.5]})
    (step,) = option_scores(frame, "embed-logreg")
    assert step.step == "class" and step.labels.tolist() == [0, 2] and step.chosen.tolist() == [0, 0]
    chosen = [np.exp(scores[i]) / np.exp(scores).sum() for scores, i in zip(step.logprobs, step.chosen)]
    assert np.allclose(chosen, frame["confidence"])


# --------------------------------------------------------------------------- temperature scaling of saved results frames


def _full_frame():
    """Three two-step decisions over 2 groups: (A: x, y), (B: z)."""
    groups = type("Groups", (), {"groups": {"g1": ["x", "y"], "g2": ["z"]}})()
    frame = pd.DataFrame({
        "label": ["x", "y", "z"],
        "pred": ["x", "x", "x"],
        "code": ["A-A", "A-A", "A-A"],
        "candidates": [["x", "y"]] * 3,
        "group_options": [["A", "B"]] * 3,
        "group_probs": [np.array([0.8, 0.2]), np.array([0.6, 0.4]), np.array([0.7, 0.3])],
        "intent_probs": [np.array([0.9, 0.1]), np.array([0.55, 0.45]), np.array([0.5, 0.5])],
    })
    frame["confidence"] = [0.8 * 0.9, 0.6 * 0.55, 0.7 * 0.5]
    return frame, groups


def test_option_scores_full_labels_and_chosen():
    frame, groups = _full_frame()
    group, intent = option_scores(frame, "full", groups)
    assert group.labels.tolist() == [0, 0, 1] and group.chosen.tolist() == [0, 0, 0]
    assert intent.labels.tolist() == [0, 1, -1]  # z is not among group A's intents
    with pytest.raises(ValueError, match="label_groups is required"):
        option_scores(frame, "full")
    with pytest.raises(ValueError, match="method must be"):
        option_scores(frame, "magic", groups)


def test_results_temperature_at_one_reproduces_saved_confidence_and_keeps_choice():
    frame, groups = _full_frame()
    scaler = ResultsTemperatureScaling("full", groups).fit(frame)
    assert scaler.fitted_rows_ == {"group": 3, "intent": 2}
    unscaled = scaler.predict_confidence(frame, {"group": 1.0, "intent": 1.0})
    np.testing.assert_allclose(unscaled, frame["confidence"], atol=1e-12)
    hot = scaler.predict_confidence(frame, {"group": 50.0, "intent": 50.0})
    assert np.all(hot <= 0.5 + 1e-9)  # near-uniform over two options each, product of two <= 1/2


def test_results_temperature_logreg_lumps_the_rest_and_knn_uses_similarities():
    frame = pd.DataFrame({"label": ["a", "c"], "pred": ["a", "b"], "candidates": [["a", "b"], ["b", "a"]],
                          "candidate_probs": [np.array([0.6, 0.3]), np.array([0.5, 0.2])],
                          "confidence": [0.6, 0.5]})
    (step,) = option_scores(frame, "embed-logreg")
    assert step.labels.tolist() == [0, 2]  # "c" is outside the top candidates: the lumped option
    np.testing.assert_allclose(np.exp(step.logprobs[1]).sum(), 1.0)
    scaler = ResultsTemperatureScaling("embed-logreg").fit(frame)
    np.testing.assert_allclose(scaler.predict_confidence(frame, {"class": 1.0}), [0.6, 0.5])
    (knn,) = option_scores(frame, "knn")
    assert knn.labels.tolist() == [0, -1]
    with pytest.raises(NotFittedError):
        ResultsTemperatureScaling("knn").predict_confidence(frame)


def test_temperature_sweep_matches_predict_confidence_and_checks_arguments():
    frame, groups = _full_frame()
    frame["correct"] = [True, False, False]
    scaler = ResultsTemperatureScaling("full", groups).fit(frame)
    sweep = scaler.temperature_sweep(frame, [0.5, 1.0, 2.0], step="intent")
    assert sweep["temperature"].tolist() == [0.5, 1.0, 2.0]
    for row in sweep.itertuples():
        confidence = scaler.predict_confidence(frame, {"intent": row.temperature})
        assert row.NLL == pytest.approx(nll(confidence, frame["correct"]))
        assert row.ECE == pytest.approx(ece(confidence, frame["correct"]))
        assert row.Brier == pytest.approx(brier(confidence, frame["correct"]))
        assert row.mean_confidence == pytest.approx(confidence.mean())
    assert sweep["mean_confidence"].is_monotonic_decreasing  # hotter = flatter = less sure of the chosen option
    with pytest.raises(ValueError, match="say which step"):
        scaler.temperature_sweep(frame, [1.0])
    with pytest.raises(ValueError, match="step must be one of"):
        scaler.temperature_sweep(frame, [1.0], step="class")
    with pytest.raises(ValueError, match="> 0"):
        scaler.temperature_sweep(frame, [0.0, 1.0], step="group")
