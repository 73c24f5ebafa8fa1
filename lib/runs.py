"""Run a decider over a whole split once, save every decision, and read the results back.

Notebooks 06-12 analyse decisions on thousands of messages; making them live would take
hours, so `run_split` runs them once (setup/run_results.py) and saves one JSON line per
message in data/results/{task}-{method}-{split}.jsonl. The file starts with a header line
naming the model, backend, library versions, prompt fingerprint and settings that produced
it. A run is resumable: it appends, and skips the rows already in the file, so an
interrupted run continues where it stopped and ends with the same file as an uninterrupted
one. A file written with another model or prompt is never mixed in: resuming it raises.

`load_results` returns a DataFrame with text, label, pred, confidence, correct and the
per-option probabilities, one row per message in split order.
"""
from __future__ import annotations

import datetime
import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd

from lib.datasets import OUT_OF_SCOPE
from lib.decisions import (Debias, Decider, Decision, FullListDecider, IntentRetriever, LogRegDecider,
                           NearestNeighbourDecider, ShortlistDecider, shortlist_probabilities)
from lib.llm import library_versions

RESULTS_DIR = Path(__file__).resolve().parent.parent / "data" / "results"
TASKS = ("banking77", "clinc150")
SPLITS = ("calibration", "test")
METHODS = ("full", "shortlist", "knn", "embed-logreg")
ORDER_SEED = 2024
"""Seed of the order in which runs visit a split's messages (see `processing_order`)."""
BATCH = 64
"""Messages per batch for deciders that have `decide_many` (the baselines)."""
_HEADER_CHECKED = ("task", "split", "method", "model", "fingerprint")


def load_split(task: str, split: str) -> pd.DataFrame:
    """The messages of a split (`text`, `label`), in a fixed order: BANKING77 calibration (770) or
    test (3,080); CLINC150 calibration (850) or test (1,000), both with out-of-scope rows."""
    from lib import datasets

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
    from lib import datasets

    pools = {"banking77": datasets.banking77_pool, "clinc150": datasets.clinc150_pool}
    if task not in pools:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return pools[task]()


def make_decider(task: str, method: str, llm: Any = None, **options: Any) -> Decider:
    """The decider used for the saved results: `method` on `task`, with the live model for LLM methods.

    `options` go to the decider's constructor (e.g. n_orders=3 for the shortlist). CLINC150's
    shortlist gets a "none of these" option, answered as out-of-scope.
    """
    from lib.grammar import load_label_groups

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    pool = training_pool(task)
    if method == "embed-logreg":
        return LogRegDecider(pool, **options)
    retriever = IntentRetriever(pool)
    if method == "knn":
        return NearestNeighbourDecider(retriever, **options)
    if llm is None:
        from lib import get_llm
        llm = get_llm()
    if method == "full":
        return FullListDecider(llm, load_label_groups(task), **options)
    options.setdefault("none_option", task == "clinc150")
    return ShortlistDecider(llm, retriever, load_label_groups(task), **options)


def results_path(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> Path:
    return Path(results_dir) / f"{task}-{method}-{split}.jsonl"


def _model_identity(decider: Decider) -> dict[str, Any]:
    """Which model produced the decisions: the LLM's identity, or MiniLM for the baselines."""
    llm = getattr(decider, "llm", None)
    if llm is None:
        from lib.embeddings import EMBEDDING_MODEL
        return {"model": EMBEDDING_MODEL, "backend": "local"}
    config = getattr(llm, "config", None)
    return {"model": llm.identity, "backend": config.backend if config is not None else llm.backend}


class _ResultsFile(NamedTuple):
    """What a results file holds: its header, decided rows and failure rows by message index,
    and the size in bytes of an unfinished last line (a kill mid-write; 0 when none)."""

    header: dict[str, Any] | None
    rows: dict[int, dict[str, Any]]
    failures: dict[int, dict[str, Any]]
    unfinished_bytes: int


def _read_results(path: Path) -> _ResultsFile:
    """Read a results file without changing it.

    An unfinished last line (no newline: the writer was killed mid-line) is left out and
    reported in `unfinished_bytes`; `run_split`, the only writer, removes it. Any other line
    that is not a JSON object raises ValueError naming the file and the line. A message
    decided again after a failure (`retry_failures`) counts by its latest line.
    """
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a results file; move it away and run "
                         f"`python setup/run_results.py` again")
    if not path.is_file():
        return _ResultsFile(None, {}, {}, 0)
    raw = path.read_bytes()
    complete = raw[: raw.rfind(b"\n") + 1]
    header, rows, failures = None, {}, {}
    for number, line in enumerate(complete.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            kind, index = entry["kind"], entry.get("i")
        except (json.JSONDecodeError, TypeError, KeyError) as error:
            raise ValueError(f"{path}, line {number}: not a JSON line of a results file ({error}): "
                             f"{line[:80]!r}. Delete that line, or the file, and run again") from None
        if kind == "header":
            header = entry
        elif kind in ("row", "failure") and isinstance(index, int):
            rows.pop(index, None)
            failures.pop(index, None)
            (rows if kind == "row" else failures)[index] = entry
        else:
            raise ValueError(f"{path}, line {number}: a line of kind {kind!r} with index {index!r} is not "
                             "a header, row or failure line. Delete that line, or the file, and run again")
    return _ResultsFile(header, rows, failures, len(raw) - len(complete))


def _read_lines(path: Path) -> tuple[dict[str, Any] | None, dict[int, dict[str, Any]]]:
    """The header and the decided rows of a results file (see `_read_results`)."""
    content = _read_results(path)
    return content.header, content.rows


def decision_row(index: int, text: str, label: str, decision: Decision) -> dict[str, Any]:
    """One compact JSON-ready line: the message, its gold label and the decision (as `pred`)."""
    fields = asdict(decision)
    fields["pred"] = fields.pop("label")
    fields["seconds"] = round(decision.seconds, 4)
    return {"kind": "row", "i": index, "text": text, "label": label, **fields,
            "correct": decision.label == label}


def failure_row(index: int, text: str, label: str, error: Exception) -> dict[str, Any]:
    """The line saved for a message the decider could not decide: the message and the error."""
    return {"kind": "failure", "i": index, "text": text, "label": label,
            "error": f"{type(error).__name__}: {error}"}


MAX_FAILURES_IN_A_ROW = 5
"""`run_split` stops after this many consecutive failures: the model or server is broken, not a message."""


def _check_resumable(path: Path, content: _ResultsFile, header: dict[str, Any]) -> None:
    """Refuse to append to a file made with other settings or without a header; warn on other versions."""
    if content.header is None:
        if content.rows or content.failures:
            raise ValueError(
                f"{path} has no header line but holds {len(content.rows)} rows and {len(content.failures)} "
                "failure rows; refusing to write to it, since nothing says which model and prompt made them. "
                "Restore its first line (e.g. from git), or move the file away to start again")
        return
    changed = {key: (content.header.get(key), header[key]) for key in _HEADER_CHECKED
               if content.header.get(key) != header[key]}
    if changed:
        raise ValueError(f"{path} was written with other settings {changed}; delete it to start again")
    saved = content.header.get("versions") or {}
    differing = [f"{name} {saved.get(name, 'not recorded')} (now {version})"
                 for name, version in header["versions"].items() if saved.get(name) != version]
    if differing:
        warnings.warn(f"{path} was written with {', '.join(differing)}; the rows added now come from other "
                      "library versions than the rows already there. Delete the file to redo every row "
                      "with one set of versions", UserWarning, stacklevel=3)


def run_split(task: str, split: str, method: str, *, decider: Decider | None = None, llm: Any = None,
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
    server's context, a server error) is saved as a failure row with the error, and the run
    goes on; a resume skips it unless `retry_failures`. MAX_FAILURES_IN_A_ROW failures in a
    row stop the run, as does a server that does not answer. The file is only ever
    appended to: a file without its header is refused, and an unfinished last line left by
    a kill is the only thing removed (with a warning). Returns the path of the results file.
    """
    from lib.llm import ServerUnavailableError

    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ValueError(f"limit must be a positive integer (messages per split), got {limit!r}")
    frame = load_split(task, split)
    order = processing_order(len(frame))
    if limit is not None:
        order = order[:limit]
    decider = decider or make_decider(task, method, llm, **options)
    if workers > 1 and not decider.thread_safe:
        raise ValueError(f"the {method} decider drives the embedded model, which runs one request at a time; "
                         "use workers=1, or a server backend (WORKBOOK_BACKEND=openai) for concurrent requests")
    path = results_path(task, split, method, results_dir)
    header = {"kind": "header", "task": task, "split": split, "method": method, **_model_identity(decider),
              "fingerprint": decider.fingerprint, "versions": library_versions(),
              "date": datetime.date.today().isoformat(), "command":
              f"python setup/run_results.py --task {task} --method {method} --split {split}"}
    content = _read_results(path)
    _check_resumable(path, content, header)
    if content.unfinished_bytes:
        with open(path, "r+b") as handle:  # the writer repairs what a kill left, and says so
            handle.truncate(path.stat().st_size - content.unfinished_bytes)
        warnings.warn(f"{path}: removed an unfinished last line ({content.unfinished_bytes} bytes) left by an "
                      "interrupted run; that message is decided again", UserWarning, stacklevel=2)
    if content.header is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:  # new or empty file: nothing to lose
            handle.write(json.dumps(header, ensure_ascii=False, sort_keys=True) + "\n")
    settled = set(content.rows) if retry_failures else set(content.rows) | set(content.failures)
    todo = [i for i in order if i not in settled]
    texts, labels = frame["text"].tolist(), frame["label"].tolist()
    bar = _progress(len(order), len(order) - len(todo), f"{task} {method} {split}", progress)
    failed_in_a_row, failed = 0, 0

    def decide(i: int) -> Decision | Exception:
        try:
            return decider.decide(texts[i])
        except ServerUnavailableError:
            raise
        except (ValueError, RuntimeError) as error:
            return error

    with open(path, "a", encoding="utf-8") as handle:
        def write(i: int, outcome: Decision | Exception) -> None:
            nonlocal failed_in_a_row, failed
            if isinstance(outcome, Exception):
                row = failure_row(i, texts[i], labels[i], outcome)
                failed_in_a_row, failed = failed_in_a_row + 1, failed + 1
            else:
                row = decision_row(i, texts[i], labels[i], outcome)
                failed_in_a_row = 0
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n")
            handle.flush()
            bar.update(1)
            if failed_in_a_row >= MAX_FAILURES_IN_A_ROW:
                raise RuntimeError(f"{MAX_FAILURES_IN_A_ROW} messages in a row failed, the last with {row['error']}; "
                                   f"stopping the run. Fix the cause, then resume with retry_failures "
                                   f"(setup/run_results.py --retry-failures)")

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
            handle.flush()
            os.fsync(handle.fileno())
            bar.close()
    if failed:
        warnings.warn(f"{path}: {failed} of {len(todo)} messages could not be decided and were saved as failure "
                      "rows (see load_results(...).attrs['failures']); resume with retry_failures to try "
                      "them again", UserWarning, stacklevel=2)
    return path


def processing_order(n_messages: int, seed: int = ORDER_SEED) -> list[int]:
    """The order in which `run_split` decides a split's messages: a seeded permutation of
    range(n_messages), the same on every machine, so any prefix of it is a random sample."""
    return [int(i) for i in np.random.default_rng(seed).permutation(n_messages)]


def run_progress(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> tuple[int, int]:
    """(messages decided, messages in the split) for a results file; (0, n) when it does not exist."""
    _, rows = _read_lines(results_path(task, split, method, results_dir))
    return len(rows), len(load_split(task, split))


def _progress(total: int, initial: int, description: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=description, disable=not enabled, smoothing=0.05)


def results_header(task: str, split: str, method: str, results_dir: Path = RESULTS_DIR) -> dict[str, Any]:
    """The header of a results file: model, backend, versions, prompt fingerprint, date."""
    header, _ = _read_lines(results_path(task, split, method, results_dir))
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
    return f"{path} {what}; produce it with `python setup/run_results.py --task {task} --method {method} --split {split}`"


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
    path = results_path(task, split, method, results_dir)
    content = _read_results(path)
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
        if method == "shortlist":
            row.update(_shortlist_variants(row))
        records.append(row)
    frame = pd.DataFrame.from_records(records)
    failures = [{key: content.failures[i][key] for key in ("i", "text", "label", "error")}
                for i in sorted(content.failures)]
    frame.attrs["failures"] = failures  # plain dicts: pandas compares attrs when it concatenates frames
    if failures:
        warnings.warn(f"{path}: {len(failures)} of {len(rows) + len(failures)} messages could not be decided; "
                      "they are in .attrs['failures'], not in the frame", UserWarning, stacklevel=2)
    return frame


def _shortlist_variants(row: dict[str, Any]) -> dict[str, Any]:
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
    out: dict[str, Any] = {}
    for name, (debias, keep) in variants.items():
        if debias == "calibrate" and content_free is None:
            continue
        probs = shortlist_probabilities(orders, content_free, debias, keep)
        best = int(np.argmax(probs))
        out[f"probs_{name}"] = probs
        out[f"pred_{name}"] = row["candidates"][best]
        out[f"confidence_{name}"] = float(probs[best])
    return out
