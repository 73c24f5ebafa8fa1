"""Runtime drift, measured: the same requests under other runtime settings, and how far the answers move.

A probability the workbook prints comes from one runtime setting: one thread, llama.cpp's
default batch of 512 prompt tokens, the system prompt kept in the KV cache between requests.
Change the setting and the arithmetic may change with it, so a confidence near a threshold,
or a near-tie between two answers, may come out differently. This module runs one fixed set
of requests (`drift_requests`: a seeded sample of BANKING77 test messages decided by the
full-list decider, and the grounded handbook answers whose confidence notebook 07 measures)
under each of `SETTINGS`, saves per request the chosen answer and its probability, and
compares each pair of `PAIRS`: the largest and the 99th-percentile change of the chosen
answer's probability, and the requests whose answer flips.

Each setting is a saved run, data/results/drift-{setting}.jsonl, written through
`lib.saved_runs.store` (a header naming model, setting, versions and command; one line per
request, keyed "d<message index>" or "a<question id>"; resumable).
`python setup/run_saved.py --run drift-{setting}` runs one (`drift_producer` builds the backend
the setting asks for: the embedded model with its threads and batch, or `llama_cpp.server` on
127.0.0.1); `drift_table` reads them for notebooks 07 and 21.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from lib.backends.common import library_versions
from lib.backends.factory import BackendConfig, create_backend
from lib.backends.openai_compatible import ServerUnavailableError
from lib.backends.protocol import LLM
from lib.backends.server import running_server
from lib.datasets import load_label_groups
from lib.decisions import Decider, FullListDecider
from lib.embeddings import embed
from lib.hashing import fingerprint
from lib.intervals import binomial_interval
from lib.logprobs import sequence_confidence
from lib.saved_runs.decisions import MAX_FAILURES_IN_A_ROW, load_split, processing_order
from lib.saved_runs.items import Producer, RunOptions, progress_bar
from lib.saved_runs.store import RESULTS_DIR, ResultsStore, Row, run_command
from lib.semantic_entropy import (GREEDY_TOP_LOGPROBS, SHORT_ANSWER_MAX_TOKENS, SHORT_ANSWER_SYSTEM, greedy_answer,
                                  short_answer_items)
from lib.text import matches_gold

__all__ = [
    "TASK", "SPLIT", "N_DECISIONS", "DECISIONS_PER_ANSWER", "DECISION", "ANSWER", "Setting", "SETTINGS", "Pair",
    "PAIRS", "setting_named", "Request", "drift_requests", "drift_name", "drift_path", "run_setting", "drift_producer",
    "load_setting", "PairChange", "compare", "drift_table",
]

TASK, SPLIT = "banking77", "test"
N_DECISIONS = 300
"""Messages decided under every setting: the first 300 of the test run's seeded order (`lib.saved_runs.decisions.processing_order`)."""
DECISIONS_PER_ANSWER = 5
"""Requests are run in one fixed order, a grounded answer after every five decisions, so any
prefix of a run (one stopped early) holds both kinds in proportion."""
DECISION, ANSWER = "decision", "answer"
_ROW_FIELDS = ("request", "type", "choice", "probability", "correct", "seconds")
_FAILURE_FIELDS = ("request", "type", "error")
_HEADER_CHECKED = ("run", "setting", "model", "backend", "threads", "batch", "cold", "exact", "requests", "decider",
                   "answers")


@dataclass(frozen=True)
class Setting:
    """One runtime setting the requests run under.

    threads: CPU threads of the model. batch: llama.cpp's `n_batch` (None: the context size,
    as `lib.backends.embedded.EmbeddedLLM` uses by default; either way the physical batch is at most 512).
    cold: the prompt cache is cleared before every request, so the shared prefix (the system
    prompt) is computed again each time. exact: full-list decisions read from the whole
    vocabulary (the embedded default) rather than from a reply's top 20 candidates, as a server
    reports them. server: the model behind `python -m llama_cpp.server` on 127.0.0.1. kinds:
    which requests it runs (`DECISION`, `ANSWER`).
    """

    name: str
    description: str
    threads: int = 1
    batch: int | None = None
    cold: bool = False
    exact: bool = True
    server: bool = False
    kinds: tuple[str, ...] = (DECISION, ANSWER)


SETTINGS = (
    Setting("base", "embedded, 1 thread, batch 512, prompt cache warm (the workbook's setting)"),
    Setting("threads-2", "as base, 2 threads", threads=2),
    Setting("batch-64", "as base, batch 64", batch=64),
    Setting("cold", "as base, prompt cache cleared before every request", cold=True),
    Setting("reply", "as base, decisions read from a grammar-constrained reply's top 20 candidates", exact=False,
            kinds=(DECISION,)),
    Setting("server", "llama_cpp.server on 127.0.0.1, 1 thread, batch 512, decisions read as in reply",
            exact=False, server=True),
)
"""The settings measured. `reply` is the embedded model read the way a server's answer must be
read (it only changes the decisions), so the server is compared with the same arithmetic, and
base against reply measures what that way of reading changes by itself."""


@dataclass(frozen=True)
class Pair:
    """Two settings compared: `reference` against `other`; grounded answers against
    `answer_reference` when given (a setting that runs no answers of its own)."""

    name: str
    reference: str
    other: str
    answer_reference: str | None = None

    def reference_for(self, kind: str) -> str:
        """The setting `other` is compared with for requests of `kind`."""
        return self.answer_reference if kind == ANSWER and self.answer_reference else self.reference


PAIRS = (
    Pair("threads 1 vs 2", "base", "threads-2"),
    Pair("batch 512 vs 64", "base", "batch-64"),
    Pair("prompt cache warm vs cold", "base", "cold"),
    Pair("whole vocabulary vs top 20", "base", "reply"),
    Pair("embedded vs llama_cpp.server", "reply", "server", answer_reference="base"),
)


def setting_named(name: str) -> Setting:
    """The setting of `SETTINGS` called `name`, or ValueError listing them."""
    for setting in SETTINGS:
        if setting.name == name:
            return setting
    raise ValueError(f"no drift setting {name!r}; choose from {[s.name for s in SETTINGS]}")


@dataclass(frozen=True)
class Request:
    """One request every setting runs: a message to decide or a question to answer from `context`."""

    key: str
    kind: str
    text: str
    gold: str
    context: str = ""


def drift_requests(n_decisions: int = N_DECISIONS) -> list[Request]:
    """The requests in their fixed order: `n_decisions` BANKING77 test messages (the first of the
    test run's seeded order) and the 60 grounded handbook questions of notebook 07 with their
    retrieved sections, an answer after every `DECISIONS_PER_ANSWER` decisions."""
    frame = load_split(TASK, SPLIT)
    decisions = [Request(f"d{i}", DECISION, frame.at[i, "text"], frame.at[i, "label"])
                 for i in processing_order(len(frame))[:n_decisions]]
    answers = [Request(f"a{item['id']}", ANSWER, item["question"], item["gold"], item["context"])
               for item in short_answer_items(embed)]
    ordered: list[Request] = []
    for start in range(0, max(len(decisions), DECISIONS_PER_ANSWER * len(answers)), DECISIONS_PER_ANSWER):
        ordered += decisions[start: start + DECISIONS_PER_ANSWER]
        ordered += answers[start // DECISIONS_PER_ANSWER: start // DECISIONS_PER_ANSWER + 1]
    return ordered


def drift_name(setting: str) -> str:
    """The saved run of a setting: drift-{setting}."""
    return f"drift-{setting_named(setting).name}"


def drift_path(setting: str, results_dir: Path = RESULTS_DIR) -> Path:
    """The file of a setting's saved run: data/results/drift-{setting}.jsonl."""
    return Path(results_dir) / f"{drift_name(setting)}.jsonl"


def _store(setting: str, results_dir: Path = RESULTS_DIR) -> ResultsStore:
    return ResultsStore(drift_path(setting, results_dir), run_command(drift_name(setting), Path(results_dir)),
                        {"row": _ROW_FIELDS, "failure": _FAILURE_FIELDS}, key="request", key_type=str,
                        names={"setting": setting})


def _answer_row(request: Request, setting: Setting, llm: LLM, decider: Decider) -> Row:
    """The chosen answer of `request` and its probability: the decision's confidence, or the grounded
    answer's geometric-mean token probability (notebook 07's sequence confidence)."""
    if setting.cold:
        llm.clear_cache()
    if request.kind == DECISION:
        decision = decider.decide(request.text)
        return {"choice": decision.label, "probability": decision.confidence,
                "correct": decision.label == request.gold, "seconds": round(decision.seconds, 3)}
    answer = greedy_answer(llm, request.text, request.context)
    text = answer.text.strip()
    return {"choice": text, "probability": sequence_confidence(answer.token_logprobs, "geometric"),
            "correct": matches_gold(text, request.gold), "seconds": round(answer.seconds, 3)}


def run_setting(setting: Setting, llm: LLM, *, limit: int | None = None, kinds: Sequence[str] | None = None,
                results_dir: Path = RESULTS_DIR, progress: bool = True) -> Path:
    """Run the requests of `setting.kinds` on `llm` (built for `setting` by the caller), appending
    to the setting's file; requests already saved are skipped, so calling it again resumes (and
    tries the failed ones again: a failure is a server that timed out, not an answer).

    `limit`: run at most this many of the requests still missing (in the fixed order); `kinds`:
    run only the missing requests of these kinds this time (a slow setting can finish its
    grounded answers before its decisions). A request
    whose model call raises ValueError or RuntimeError is saved as a failure row with the error;
    `lib.saved_runs.decisions.MAX_FAILURES_IN_A_ROW` in a row stop the run. Returns the path of the file.
    """
    if setting.cold and not hasattr(llm, "clear_cache"):
        raise ValueError(f"setting {setting.name!r} clears the prompt cache, which only the embedded backend has")
    requests = [r for r in drift_requests() if r.kind in setting.kinds]
    decider = FullListDecider(llm, load_label_groups(TASK), exact=setting.exact)
    store = _store(setting.name, results_dir)
    header = {"run": "drift", "setting": setting.name, "description": setting.description,
              "model": _model_identity(), "backend": llm.backend_name, "threads": setting.threads,
              "batch": getattr(llm, "physical_batch", 512), "cold": setting.cold, "exact": setting.exact,
              "requests": fingerprint([[r.key, r.text, r.context] for r in requests]),
              "decider": decider.fingerprint,
              "answers": fingerprint([SHORT_ANSWER_SYSTEM, SHORT_ANSWER_MAX_TOKENS, GREEDY_TOP_LOGPROBS]),
              "n_requests": len(requests), "versions": library_versions(),
              "date": datetime.date.today().isoformat(), "command": store.command}
    with store.writing(header, checked=_HEADER_CHECKED) as (content, append):
        todo = [r for r in requests if r.key not in content.rows and (kinds is None or r.kind in kinds)][:limit]
        # the decisions share one system prompt, which stays in the KV cache; each answer has its own section,
        # so answering between decisions would make the next decision compute its 1,700-token prompt again
        todo.sort(key=lambda request: request.kind != DECISION)
        bar = progress_bar(len(todo), 0, f"drift {setting.name}", progress)
        failed_in_a_row = 0
        try:
            for request in todo:
                try:
                    row = {"kind": "row", "request": request.key, "type": request.kind,
                           **_answer_row(request, setting, llm, decider)}
                    failed_in_a_row = 0
                except ServerUnavailableError:
                    raise
                except (ValueError, RuntimeError) as error:
                    row = {"kind": "failure", "request": request.key, "type": request.kind,
                           "error": f"{type(error).__name__}: {error}"}
                    failed_in_a_row += 1
                append(row)
                bar.update(1)
                if failed_in_a_row >= MAX_FAILURES_IN_A_ROW:
                    raise RuntimeError(f"{MAX_FAILURES_IN_A_ROW} requests in a row failed, the last with "
                                       f"{row['error']}; fix the cause and run `{store.command}` again")
        finally:
            bar.close()
    return store.path


def _model_identity() -> str:
    """The model file both backends load, as the embedded backend names it."""
    return BackendConfig("embedded").identity()


def drift_producer(name: str) -> Producer:
    """The producer of the setting `name`'s saved run: it builds the backend the setting asks for (the
    embedded model with the setting's threads and batch, or `llama_cpp.server` on 127.0.0.1, stopped
    afterwards; never the options' model) and runs the options' `limit` and `kinds` of the requests."""
    setting = setting_named(name)

    def produce(options: RunOptions) -> Path:
        run = dict(limit=options.limit, kinds=options.kinds, results_dir=options.results_dir,
                   progress=options.progress)
        if setting.server:
            with running_server(threads=setting.threads) as server:
                return run_setting(setting, create_backend(BackendConfig("openai", server.base_url, server.model)), **run)
        return run_setting(setting, create_backend(BackendConfig("embedded"), n_threads=setting.threads,
                                                   n_batch=setting.batch), **run)

    return produce


def load_setting(name: str, results_dir: Path = RESULTS_DIR) -> tuple[Row, pd.DataFrame]:
    """The header and the rows (request, type, choice, probability, correct, seconds) of one setting's
    saved run; FileNotFoundError naming the command when there is none."""
    store = _store(name, results_dir)
    content = store.read()
    if content.header is None:
        raise FileNotFoundError(f"{store.path} does not exist; run `{store.command}`")
    rows = pd.DataFrame(list(content.rows.values()), columns=["request", *_ROW_FIELDS[1:]])
    return content.header, rows


@dataclass(frozen=True)
class PairChange:
    """How one kind of request moved between two settings.

    compared: requests both settings answered. changed, largest, p99: among the requests whose
    chosen answer is the same under both, how many moved at all, and the largest and the
    99th-percentile (linear interpolation) absolute change of its probability (NaN when every
    request flipped); a flip would compare two different answers' probabilities, so it is
    counted only in flips. flips: requests whose chosen answer differs;
    flip_low, flip_high: the exact binomial 95% interval of the flip share. right_reference,
    right_other: right answers under each setting, on the compared requests.
    """

    compared: int
    changed: int
    largest: float
    p99: float
    flips: int
    flip_low: float
    flip_high: float
    right_reference: int
    right_other: int


def compare(reference: Iterable[Row], other: Iterable[Row]) -> PairChange:
    """Compare two settings' rows (each with request, choice, probability, correct) on the requests both hold.

    Changes are measured where the chosen answer stayed the same; flips are counted apart.
    ValueError when no request is in both.
    """
    theirs = {row["request"]: row for row in other}
    matched = [(row, theirs[row["request"]]) for row in reference if row["request"] in theirs]
    if not matched:
        raise ValueError(f"the two settings have no request in common; run both (`{run_command('drift-NAME')}`)")
    changes = np.array([abs(float(a["probability"]) - float(b["probability"])) for a, b in matched
                        if a["choice"] == b["choice"]])
    flips = len(matched) - changes.size
    _, low, high = binomial_interval(flips, len(matched))
    largest, p99 = (float(changes.max()), float(np.percentile(changes, 99))) if changes.size else (np.nan, np.nan)
    return PairChange(compared=len(matched), changed=int((changes > 0).sum()), largest=largest,
                      p99=p99, flips=int(flips), flip_low=low, flip_high=high,
                      right_reference=sum(bool(a["correct"]) for a, _ in matched),
                      right_other=sum(bool(b["correct"]) for _, b in matched))


def drift_table(pairs: Sequence[Pair] = PAIRS, results_dir: Path = RESULTS_DIR) -> pd.DataFrame:
    """One row per pair of settings and kind of request (decisions, grounded answers): the fields of
    `PairChange`, with the settings compared. A pair whose settings are not both saved is left out."""
    loaded: dict[str, pd.DataFrame] = {}
    for setting in SETTINGS:
        if drift_path(setting.name, results_dir).is_file():
            loaded[setting.name] = load_setting(setting.name, results_dir)[1]
    rows = []
    for pair in pairs:
        for kind, label in ((DECISION, "decisions"), (ANSWER, "grounded answers")):
            reference, other = pair.reference_for(kind), pair.other
            if reference not in loaded or other not in loaded:
                continue
            mine = loaded[reference][loaded[reference]["type"] == kind].to_dict("records")
            theirs = loaded[other][loaded[other]["type"] == kind].to_dict("records")
            if not mine or not theirs:
                continue
            rows.append({"pair": pair.name, "requests": label, "settings": f"{reference} / {other}",
                         **vars(compare(mine, theirs))})
    return pd.DataFrame(rows)
