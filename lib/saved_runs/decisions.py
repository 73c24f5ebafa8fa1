"""The saved decision runs: a decider over a whole split, every decision saved, and what the notebooks read of them.

Notebooks 07-09 and 11-17 analyse decisions on thousands of messages; making them live would take
hours, so `run_split` runs them once (`python setup/run_saved.py --run banking77-full-test`, one
run per task, method and split: `decision_runs`) and saves one JSON line per message in
data/results/{task}-{method}-{split}.jsonl. The file starts with a header line naming the model,
backend, library versions, prompt fingerprint and settings that produced it. A run is resumable:
it appends, and skips the rows already in the file, so an interrupted run continues where it
stopped and ends with the same file as an uninterrupted one. A file written with another model
or prompt is never mixed in: resuming it raises.

`load_results` returns a DataFrame with text, label, pred, confidence, correct and the
per-option probabilities, one row per message in split order. What the notebooks need to
choose and read runs lives here too, so every notebook follows one rule: `run_table` (how far
each run got), `complete_methods` (the methods whose runs reached every message),
`confidence_signals` and `CONFIDENCE_KINDS` (knn's confidence is a margin, not a probability),
`option_scores` (each step's option scores) and `ResultsTemperatureScaling` (temperature
scaling of a saved run, step by step), and the method names once (`METHODS`, `LLM_METHODS`,
`BASELINE_METHODS`, taken from the deciders themselves). Files are read and written through
`lib.saved_runs.store`, the one owner of those rules.
"""
from __future__ import annotations

import datetime
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields as dataclass_fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from lib import datasets
from lib.backends.common import library_versions
from lib.backends.openai_compatible import ServerUnavailableError
from lib.backends.protocol import LLM
from lib.calibration import TemperatureScaling, brier, ece, nll, softmax_at_temperature
from lib.checks import check_positive_int, require_fitted
from lib.datasets import OUT_OF_SCOPE, LabelGroups, load_label_groups
from lib.decisions import (Debias, Decider, IntentDecision, FullListDecider, LogRegDecider, NearestNeighbourDecider,
                           ShortlistDecider, shortlist_probabilities)
from lib.embeddings import EMBEDDING_MODEL
from lib.indexes import IntentRetriever
from lib.saved_runs.items import Producer, RunOptions, progress_bar
from lib.saved_runs.store import RESULTS_DIR, ResultsStore, Row, run_command

__all__ = [
    "TASKS", "SPLITS", "LLM_METHODS", "BASELINE_METHODS", "METHODS", "CONFIDENCE_KINDS", "ORDER_SEED", "BATCH",
    "load_split", "training_pool", "make_decider", "results_name", "results_path", "decision_row", "failure_row",
    "MAX_FAILURES_IN_A_ROW", "run_split", "processing_order", "run_progress", "run_is_complete", "run_table",
    "complete_methods", "confidence_signals", "results_header", "load_results", "LOG_FLOOR", "OptionScores",
    "option_scores", "ResultsTemperatureScaling", "DECISION_RUNS", "decision_producer",
]

TASKS = ("banking77", "clinc150")
SPLITS = ("calibration", "test")
LLM_METHODS = (FullListDecider.method, ShortlistDecider.method)
"""The methods that ask the language model: "full" and "shortlist"."""
BASELINE_METHODS = (NearestNeighbourDecider.method, LogRegDecider.method)
"""The methods without a language model, on MiniLM embeddings: "knn" and "embed-logreg"."""
METHODS = LLM_METHODS + BASELINE_METHODS
CONFIDENCE_KINDS = {FullListDecider.method: "probability", ShortlistDecider.method: "probability",
                    NearestNeighbourDecider.method: "margin", LogRegDecider.method: "probability"}
"""What each method saves as `confidence`: a probability, or for knn the margin between the
similarities of the two nearest intents (in [0, 1], but not a probability)."""
ORDER_SEED = 2024
"""Seed of the order in which runs visit a split's messages (see `processing_order`)."""
BATCH = 64
"""Messages per batch for deciders that have `decide_many` (the baselines)."""
_HEADER_CHECKED = ("task", "split", "method", "model", "fingerprint")
"""The header fields a split run must share with the file it resumes: anything else would mix two runs."""


def load_split(task: str, split: str) -> pd.DataFrame:
    """The messages of a split (`text`, `label`), in a fixed order: BANKING77 calibration (770) or
    test (3,080); CLINC150 calibration (850) or test (1,000), both with out-of-scope rows."""
    loaders: dict[tuple[str, str], Callable[[], pd.DataFrame]] = {
        ("banking77", "calibration"): datasets.banking77_calibration_split,
        ("banking77", "test"): lambda: datasets.load_banking77("test"),
        ("clinc150", "calibration"): datasets.clinc150_calibration_split,
        ("clinc150", "test"): datasets.clinc150_test_split,
    }
    if (task, split) not in loaders:
        raise ValueError(f"task must be one of {TASKS} and split one of {SPLITS}, got {task!r}, {split!r}")
    return loaders[(task, split)]()[["text", "label"]].reset_index(drop=True)


def training_pool(task: str) -> pd.DataFrame:
    """Training messages outside the calibration split: what retrievers and baselines may use."""
    pools = {"banking77": datasets.banking77_pool, "clinc150": datasets.clinc150_pool}
    if task not in pools:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return pools[task]()


def make_decider(task: str, method: str, llm: LLM | None = None, **options: Any) -> Decider:
    """The decider used for the saved results: `method` on `task`, asking `llm` for the LLM methods.

    `options` go to the decider's constructor (e.g. n_orders=3 for the shortlist). CLINC150's
    shortlist gets a "none of these" option, answered as out-of-scope. The baselines need no `llm`;
    an LLM method without one raises ValueError.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    pool = training_pool(task)
    if method == LogRegDecider.method:
        return LogRegDecider(pool, **options)
    retriever = IntentRetriever(pool)
    if method == NearestNeighbourDecider.method:
        return NearestNeighbourDecider(retriever, **options)
    if llm is None:
        raise ValueError(f"the {method} decider asks a language model: pass llm (e.g. lib.get_llm())")
    if method == FullListDecider.method:
        return FullListDecider(llm, load_label_groups(task), **options)
    options.setdefault("none_option", task == "clinc150")
    return ShortlistDecider(llm, retriever, load_label_groups(task), **options)


def results_name(task: str, split: str, method: str) -> str:
    """The saved run of `method` on a split: {task}-{method}-{split}."""
    return f"{task}-{method}-{split}"


def results_path(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> Path:
    """The file of that saved run: data/results/{task}-{method}-{split}.jsonl."""
    return Path(results_dir) / f"{results_name(task, split, method)}.jsonl"


def _model_identity(decider: Decider) -> Row:
    """Which model produced the decisions: the LLM's identity, or MiniLM for the baselines."""
    llm = getattr(decider, "llm", None)
    if llm is None:
        return {"model": EMBEDDING_MODEL, "backend": "local"}
    return {"model": llm.identity, "backend": llm.backend_name}


_ROW_FIELDS = ("i", "text", "label", "pred", "correct",
               *(field.name for field in dataclass_fields(IntentDecision) if field.name != "label"))
"""The fields of a decided message's line (`decision_row`): the message, its gold label, the decision."""
_FAILURE_FIELDS = ("i", "text", "label", "error")
"""The fields of a failed message's line (`failure_row`)."""


def _store(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> ResultsStore:
    """The store of a split run's file: rows and failures by message index `i`."""
    return ResultsStore(results_path(task, split, method, results_dir), _command(task, split, method, results_dir),
                        {"row": _ROW_FIELDS, "failure": _FAILURE_FIELDS},
                        names={"task": task, "split": split, "method": method})


def _command(task: str, split: str, method: str, results_dir: Path) -> str:
    return run_command(results_name(task, split, method), Path(results_dir))


def decision_row(index: int, text: str, label: str, decision: IntentDecision) -> Row:
    """One compact JSON-ready line: the message, its gold label and the decision (as `pred`)."""
    fields = asdict(decision)
    fields["pred"] = fields.pop("label")
    fields["seconds"] = round(decision.seconds, 4)
    return {"kind": "row", "i": index, "text": text, "label": label, **fields,
            "correct": decision.label == label}


def failure_row(index: int, text: str, label: str, error: Exception) -> Row:
    """The line saved for a message the decider could not decide: the message and the error."""
    return {"kind": "failure", "i": index, "text": text, "label": label,
            "error": f"{type(error).__name__}: {error}"}


MAX_FAILURES_IN_A_ROW = 5
"""`run_split` stops after this many consecutive failures: the model or server is broken, not a message."""


def run_split(task: str, split: str, method: str, *, decider: Decider | None = None, llm: LLM | None = None,
              limit: int | None = None, workers: int = 1, results_dir: Path = RESULTS_DIR,
              progress: bool = True, retry_failures: bool = False, **options: Any) -> Path:
    """Decide every message of a split (or `limit` of them), appending to the results file.

    Messages are decided in a fixed random order (`processing_order`), so a run stopped
    early, or one given a `limit`, holds a uniform random sample of the split rather than
    its first labels (the BANKING77 test file is sorted by label). Rows already in the file
    are skipped, so calling it again resumes. Deciders with a
    `decide_many` method (the baselines) get BATCH messages at a time. `workers` > 1 sends
    that many requests at once (for a server backend; the embedded model runs one at a
    time); rows are still written in processing order, so the file does not depend on it.

    A message whose decision raises ValueError or RuntimeError (a prompt too long for a
    server's context, a server error, a server that gives no probabilities to decide on) is
    saved as a failure row with the error, never as a made-up confidence, and the run goes on; a resume skips it unless `retry_failures`. MAX_FAILURES_IN_A_ROW failures in a
    row stop the run, as does a server that does not answer. The file is written by its
    `lib.saved_runs.store.ResultsStore`: only ever appended to, a file without its header or with
    other settings refused, and an unfinished last line left by a kill the only thing removed
    (with a warning). Returns the path of the results file.
    """
    if limit is not None:
        check_positive_int(limit, "limit")
    frame = load_split(task, split)
    order = processing_order(len(frame))
    if limit is not None:
        order = order[:limit]
    decider = decider or make_decider(task, method, llm, **options)
    if workers > 1 and not decider.thread_safe:
        raise ValueError(f"the {method} decider drives the embedded model, which runs one request at a time; "
                         "use workers=1, or a server backend (WORKBOOK_BACKEND=openai) for concurrent requests")
    store = _store(task, split, method, results_dir)
    header = {"task": task, "split": split, "method": method, **_model_identity(decider),
              "fingerprint": decider.fingerprint, "versions": library_versions(),
              "date": datetime.date.today().isoformat(), "command": store.command}
    with store.writing(header, checked=_HEADER_CHECKED) as (content, append):
        settled = set(content.rows) if retry_failures else set(content.rows) | set(content.failures)
        todo = [i for i in order if i not in settled]
        texts, labels = frame["text"].tolist(), frame["label"].tolist()
        bar = progress_bar(len(order), len(order) - len(todo), f"{task} {method} {split}", progress)
        failed_in_a_row, failed = 0, 0

        def decide(i: int) -> IntentDecision | Exception:
            try:
                return decider.decide(texts[i])
            except ServerUnavailableError:
                raise
            except (ValueError, RuntimeError) as error:
                return error

        def write(i: int, outcome: IntentDecision | Exception) -> None:
            nonlocal failed_in_a_row, failed
            if isinstance(outcome, Exception):
                row = failure_row(i, texts[i], labels[i], outcome)
                failed_in_a_row, failed = failed_in_a_row + 1, failed + 1
            else:
                row = decision_row(i, texts[i], labels[i], outcome)
                failed_in_a_row = 0
            append(row)
            bar.update(1)
            if failed_in_a_row >= MAX_FAILURES_IN_A_ROW:
                raise RuntimeError(f"{MAX_FAILURES_IN_A_ROW} messages in a row failed, the last with {row['error']}; "
                                   f"stopping the run. Fix the cause, then resume with retry_failures "
                                   f"(`{store.command} --retry-failures`)")

        try:
            if hasattr(decider, "decide_many"):  # baselines: embed a batch at a time, save after each batch
                for start in range(0, len(todo), BATCH):
                    batch = todo[start: start + BATCH]
                    for i, decision in zip(batch, decider.decide_many([texts[j] for j in batch])):
                        write(i, decision)
            elif workers <= 1:
                for i in todo:
                    write(i, decide(i))
            else:
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    for i, outcome in zip(todo, pool.map(decide, todo)):
                        write(i, outcome)  # map yields in submission order
        finally:
            bar.close()
    if failed:
        warnings.warn(f"{store.path}: {failed} of {len(todo)} messages could not be decided and were saved as failure "
                      "rows (see load_results(...).attrs['failures']); resume with retry_failures to try "
                      "them again", UserWarning, stacklevel=2)
    return store.path


def processing_order(n_messages: int, seed: int = ORDER_SEED) -> list[int]:
    """The order in which `run_split` decides a split's messages: a seeded permutation of
    range(n_messages), the same on every machine, so any prefix of it is a random sample."""
    return [int(i) for i in np.random.default_rng(seed).permutation(n_messages)]


def run_progress(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> tuple[int, int]:
    """(messages decided, messages in the split) for a results file; (0, n) when it does not exist."""
    return len(_store(task, split, method, results_dir).read().rows), len(load_split(task, split))


def run_is_complete(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> bool:
    """Whether the run of `method` reached every message of the split (decided, or saved as a failure)."""
    content = _store(task, split, method, results_dir).read()
    return len(set(content.rows) | set(content.failures)) == len(load_split(task, split))


def run_table(task: str, results_dir: Path = RESULTS_DIR) -> pd.DataFrame:
    """How far each saved run got: one row per method and split, with decided, total and share (3 decimals)."""
    return pd.DataFrame([{"method": method, "split": split, "decided": decided, "total": total,
                          "share": round(decided / total, 3)}
                         for method in METHODS for split in SPLITS
                         for decided, total in [run_progress(task, split, method, results_dir)]])


def complete_methods(task: str, splits: Sequence[str] = SPLITS, results_dir: Path = RESULTS_DIR) -> list[str]:
    """The methods (in `METHODS` order) whose runs on every split in `splits` are complete.

    The one rule every notebook uses to choose what it compares: a method counts once its
    run has reached every message, so no table mixes a sample with a whole split.
    """
    return [method for method in METHODS
            if all(run_is_complete(task, split, method, results_dir) for split in splits)]


def confidence_signals(frame: pd.DataFrame, method: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The confidence signals of one method's saved results, each as (confidence, correct), shape (n,) each.

    A probability is named by its method. knn's saved confidence is a margin (see
    `CONFIDENCE_KINDS`), so it is named "knn (margin)", and knn has a second signal, the
    similarity of the nearest intent, "knn (similarity)".
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    correct = frame["correct"].to_numpy(bool)
    confidence = frame["confidence"].to_numpy(float)
    if CONFIDENCE_KINDS[method] == "probability":
        return {method: (confidence, correct)}
    return {f"{method} (margin)": (confidence, correct),
            f"{method} (similarity)": (frame["similarity"].to_numpy(float), correct)}


def results_header(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> Row:
    """The header of a results file: model, backend, versions, prompt fingerprint, date."""
    header = _store(task, split, method, results_dir).read().header
    if header is None:
        raise FileNotFoundError(_missing(task, split, method, results_dir))
    return header


def _missing(task: str, split: str, method: str, results_dir: Path) -> str:
    """Why there is nothing to read (no file, an empty file, a header only) and the command that makes it."""
    path = results_path(task, split, method, results_dir)
    if not path.exists():
        what = "does not exist"
    elif path.stat().st_size == 0:
        what = "is empty (not even a header line)"
    else:
        what = "holds no decided rows yet"
    return f"{path} {what}; produce it with `{_command(task, split, method, results_dir)}`"


def load_results(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> pd.DataFrame:
    """The saved decisions as a DataFrame, one row per message in split order.

    Columns for every method: i, text, label, pred, code, confidence, correct,
    off_label_mass, candidates, candidate_probs (np arrays), in_candidates (the gold label
    was offered), seconds. Per step (full: group and intent; shortlist: option):
    {step}_options and {step}_probs. Method details become columns too: full: p_group,
    p_intent, three_token_share; shortlist: orders, order_probs, content_free,
    letters_chosen, similarities, and probs_first, probs_permuted, probs_calibrated (each
    aligned with candidates) with pred_/confidence_ for each, plus the same for
    calibrated_intents where "none of these" was offered; knn: similarity, margin.

    Messages the run could not decide (failure rows, see `run_split`) are not rows of the
    frame: they are in `frame.attrs["failures"]`, a list of {i, text, label, error} dicts
    (`pd.DataFrame(frame.attrs["failures"])` shows them), with a warning. A failed message is not a correct answer, so an accuracy over the whole sample
    counts it as wrong: `frame["correct"].sum() / (len(frame) + len(frame.attrs["failures"]))`;
    confidence-based measures (calibration, coverage) are over the decided rows only and
    should say how many failed.
    """
    store = _store(task, split, method, results_dir)
    content = store.read()
    rows = content.rows
    if not rows:
        raise FileNotFoundError(_missing(task, split, method, results_dir))
    records = []
    for i in sorted(rows):
        row = dict(rows[i])
        row.pop("kind")
        for step in row.pop("steps"):
            row[f"{step['name']}_options"] = list(step["options"])
            row[f"{step['name']}_probs"] = np.asarray(step["probs"])
        row.update(row.pop("details"))
        row["candidate_probs"] = np.asarray(row["candidate_probs"])
        row["in_candidates"] = row["label"] in row["candidates"]
        if method == ShortlistDecider.method:
            row.update(_shortlist_variants(row))
        records.append(row)
    frame = pd.DataFrame.from_records(records)
    failures = [{key: content.failures[i][key] for key in ("i", "text", "label", "error")}
                for i in sorted(content.failures)]
    frame.attrs["failures"] = failures  # plain dicts: pandas compares attrs when it concatenates frames
    if failures:
        warnings.warn(f"{store.path}: {len(failures)} of {len(rows) + len(failures)} messages could not be decided; "
                      "they are in .attrs['failures'], not in the frame", UserWarning, stacklevel=2)
    return frame


def _shortlist_variants(row: Row) -> Row:
    """The shortlist decision before and after each position-bias correction.

    With a "none of these" option there is a fourth variant, "calibrated_intents": contextual
    calibration of the intent options only, leaving "none of these" as the orderings gave it.
    """
    orders = np.asarray(row["order_probs"])
    content_free = np.asarray(row["content_free"]) if row["content_free"] else None
    none_offered = np.asarray(row["candidates"]) == OUT_OF_SCOPE
    variants: dict[str, tuple[Debias, np.ndarray | None]] = {
        "first": ("none", None), "permuted": ("permute", None), "calibrated": ("calibrate", None)}
    if none_offered.any():
        variants["calibrated_intents"] = ("calibrate", none_offered)
    out: Row = {}
    for name, (debias, keep) in variants.items():
        if debias == "calibrate" and content_free is None:
            continue
        probs = shortlist_probabilities(orders, content_free, debias, keep)
        best = int(np.argmax(probs))
        out[f"probs_{name}"] = probs
        out[f"pred_{name}"] = row["candidates"][best]
        out[f"confidence_{name}"] = float(probs[best])
    return out


LOG_FLOOR = 1e-12
"""Smallest probability `option_scores` takes to a log: an option given probability 0 stays finite."""


@dataclass(frozen=True)
class OptionScores:
    """One decision step of a saved results frame, ready for temperature scaling.

    logprobs: per message, the scores of the options offered at this step, shape (n_options,)
    each (log-probabilities; for knn the cosine similarities, which a softmax treats the same
    way). labels: shape (n,), the index of the right option per message, -1 where the right
    answer was not among the options (such rows cannot be used to fit). chosen: shape (n,),
    the index of the option the decider chose per message.
    """

    step: str
    logprobs: list[np.ndarray]
    labels: np.ndarray
    chosen: np.ndarray


def _index_or_minus_one(options: Sequence[str], item: str) -> int:
    return list(options).index(item) if item in options else -1


def option_scores(results: pd.DataFrame, method: str, label_groups: LabelGroups | None = None) -> list[OptionScores]:
    """The per-step option scores of a saved results frame (`load_results`), one `OptionScores` per step.

    - full: two steps. "group": `group_probs` over the group letters, right option = the
      gold label's group (`label_groups`, a `LabelGroups`, gives the group order; required).
      "intent": `intent_probs` over the chosen group's intents (`candidates`), right option
      defined only when the chosen group holds the gold label.
    - shortlist: one step "option": `option_probs` over `candidates`.
    - embed-logreg: one step "class": the top-8 class probabilities plus one option "all
      other intents" holding the remaining mass, so that temperature 1 reproduces the saved
      confidence and every message has a right option. (Under another temperature the lumped
      option is an approximation: the remaining classes' own logits were not saved.)
    - knn: one step "similarity": the cosine similarities of the 8 nearest intents as
      scores, so `softmax(similarity / T)` turns them into probabilities. At T = 1 this is
      not the saved confidence (the margin); temperature scaling gives knn a probability.

    Probabilities are floored at `LOG_FLOOR` before the log.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if len(results) == 0:
        raise ValueError("results is empty: need at least one saved decision")
    gold = results["label"].tolist()
    candidates = results["candidates"].tolist()
    pred = results["pred"].tolist()

    def logs(column: str) -> list[np.ndarray]:
        return [np.log(np.clip(np.asarray(p, dtype=float), LOG_FLOOR, None)) for p in results[column]]

    in_candidates = np.array([_index_or_minus_one(c, g) for c, g in zip(candidates, gold)])
    chosen = np.array([_index_or_minus_one(c, p) for c, p in zip(candidates, pred)])
    if method == FullListDecider.method:
        if label_groups is None:
            raise ValueError("label_groups is required for method 'full': it says which group holds each label")
        group_of = {label: i for i, labels in enumerate(label_groups.groups.values()) for label in labels}
        group_labels = np.array([group_of.get(g, -1) for g in gold])
        group_chosen = np.array([list(options).index(code.split("-")[0])
                                 for options, code in zip(results["group_options"], results["code"])])
        return [OptionScores("group", logs("group_probs"), group_labels, group_chosen),
                OptionScores("intent", logs("intent_probs"), in_candidates, chosen)]
    if method == ShortlistDecider.method:
        return [OptionScores("option", logs("option_probs"), in_candidates, chosen)]
    if method == LogRegDecider.method:
        rows = []
        for probs in results["candidate_probs"]:
            probs = np.asarray(probs, dtype=float)
            rest = max(1.0 - float(probs.sum()), LOG_FLOOR)
            rows.append(np.log(np.clip(np.append(probs, rest), LOG_FLOOR, None)))
        labels = np.array([i if i >= 0 else len(c) for i, c in zip(in_candidates, candidates)])
        return [OptionScores("class", rows, labels, chosen)]
    similarities = [np.asarray(s, dtype=float) for s in results["candidate_probs"]]
    return [OptionScores("similarity", similarities, in_candidates, chosen)]


# --------------------------------------------------------------------------- temperature scaling of saved runs

class ResultsTemperatureScaling:
    """Temperature scaling of a saved results frame: one temperature per step of the method.

    `fit(calibration_results)` fits a `lib.calibration.TemperatureScaling` per step of `option_scores` on
    the rows whose right option was offered; `predict_confidence(results)` returns, per
    message, the product over steps of the rescaled probability of the option the decider
    *chose* (so the decision never changes, only its confidence).
    At temperature 1 this equals the saved confidence for `full`, `shortlist` and
    `embed-logreg` (up to the 6 significant digits saved).

    Attributes (after fit): `temperatures_` (step name -> T), `fitted_rows_` (step name
    -> rows used), `fitted_on_` (messages in the calibration frame).
    """

    def __init__(self, method: str, label_groups: LabelGroups | None = None,
                 bounds: tuple[float, float] = (0.01, 100.0)) -> None:
        self.method = method
        self.label_groups = label_groups
        self.bounds = bounds

    def fit(self, results: pd.DataFrame) -> "ResultsTemperatureScaling":
        """Fit one temperature per step on calibration results; return self.

        `bounds` is checked here, by each step's `TemperatureScaling.fit`.
        """
        self.scalers_: dict[str, TemperatureScaling] = {}
        self.fitted_rows_: dict[str, int] = {}
        for step in option_scores(results, self.method, self.label_groups):
            usable = np.flatnonzero(step.labels >= 0)
            if usable.size == 0:
                raise ValueError(f"step {step.step!r}: no calibration row offers the right option; cannot fit")
            self.scalers_[step.step] = TemperatureScaling(self.bounds).fit(
                [step.logprobs[i] for i in usable], step.labels[usable])
            self.fitted_rows_[step.step] = int(usable.size)
        self.temperatures_ = {name: scaler.temperature_ for name, scaler in self.scalers_.items()}
        self.fitted_on_ = len(results)
        return self

    def predict_confidence(self, results: pd.DataFrame, temperatures: dict[str, float] | None = None) -> np.ndarray:
        """Confidence in each saved decision after rescaling, shape (n,), values in [0, 1].

        `temperatures` overrides the fitted ones (e.g. `{"group": 1.0, "intent": 1.0}` for
        the unscaled probabilities); steps it does not name keep their fitted temperature.
        """
        require_fitted(self, "temperatures_", "predict_confidence")
        return self._chosen_probability(option_scores(results, self.method, self.label_groups), temperatures)

    def _chosen_probability(self, steps: list[OptionScores], temperatures: dict[str, float] | None) -> np.ndarray:
        """Product over steps of the rescaled probability of the chosen option, shape (n,)."""
        confidence = np.ones(len(steps[0].chosen))
        for step in steps:
            temperature = (temperatures or {}).get(step.step, self.temperatures_[step.step])
            probs = softmax_at_temperature(step.logprobs, float(temperature))
            confidence *= probs[np.arange(confidence.size), step.chosen]
        return np.clip(confidence, 0.0, 1.0)

    def temperature_sweep(
        self, results: pd.DataFrame, temperatures: Sequence[float] | np.ndarray, step: str | None = None
    ) -> pd.DataFrame:
        """How calibration scores on `results` change as one step's temperature moves.

        Every other step keeps its fitted temperature. This is what a learner wants to see
        while moving a temperature slider: the fitted T should sit at (or near) the lowest
        NLL of the right option's step, and ECE, NLL and Brier of the chosen answers say
        how the confidences behave on the data passed (e.g. the test split).

        Args:
            results: saved results of this method (e.g. the test split).
            temperatures: the temperatures to evaluate, each > 0.
            step: which step moves; required when the method has more than one step.

        Returns:
            DataFrame with one row per temperature: `temperature`, `ECE` (15 equal-width
            bins), `NLL` and `Brier` of the chosen answers' confidence against whether
            they were right, and `mean_confidence`.
        """
        require_fitted(self, "temperatures_", "temperature_sweep")
        if step is None:
            if len(self.temperatures_) != 1:
                raise ValueError(f"method {self.method!r} has steps {sorted(self.temperatures_)}; say which step moves")
            step = next(iter(self.temperatures_))
        if step not in self.temperatures_:
            raise ValueError(f"step must be one of {sorted(self.temperatures_)}, got {step!r}")
        values = np.asarray(temperatures, dtype=float)
        if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError("temperatures must be a non-empty 1-D sequence of finite numbers > 0")
        steps = option_scores(results, self.method, self.label_groups)
        correct = results["correct"].to_numpy(bool)
        rows = []
        for temperature in values:
            confidence = self._chosen_probability(steps, {step: float(temperature)})
            rows.append({"temperature": float(temperature), "ECE": ece(confidence, correct),
                         "NLL": nll(confidence, correct), "Brier": brier(confidence, correct),
                         "mean_confidence": float(confidence.mean())})
        return pd.DataFrame(rows)


# --------------------------------------------------------------------------- the runs, for the registry

DECISION_RUNS: tuple[tuple[str, str, str], ...] = (
    *[(task, method, split) for method in BASELINE_METHODS for task in TASKS for split in SPLITS],
    *[("banking77", FullListDecider.method, split) for split in SPLITS],
    *[(task, ShortlistDecider.method, split) for task in TASKS for split in SPLITS],
)
"""The shipped decision runs as (task, method, split), cheapest first: the baselines on both tasks,
the full list on BANKING77 only, the shortlist on both."""


def decision_producer(task: str, split: str, method: str) -> Producer:
    """The producer of one decision run: `run_split` with the options' model (LLM methods only),
    limit, workers and failures to retry."""
    def produce(options: RunOptions) -> Path:
        llm = options.model() if method in LLM_METHODS else None
        return run_split(task, split, method, llm=llm, limit=options.limit, workers=options.workers,
                         results_dir=options.results_dir, progress=options.progress,
                         retry_failures=options.retry_failures)

    return produce
