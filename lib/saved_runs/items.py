"""Saved runs over a list of items (questions, messages, cases), and what every producer of a saved run takes.

Most saved runs compute one JSON row per item: `run_items` appends them to
data/results/{name}.jsonl after a header (run name, model, backend, the settings and their
fingerprint, the mode that produced the answers, library versions, the command that makes it),
skipping the items already there, so calling it again resumes; `load_item_run` and `load_run`
read them back. A family of runs (`lib.saved_runs.questions`, `asking`, `tools`) says per run how
to `prepare` it, its items, the function that computes a row and the settings its header keeps,
and `item_producer` turns that into the producer the registry (`lib.saved_runs.registry`) names.

Every producer takes `RunOptions`: where the model comes from (`model`, built on the first call,
or the recordings in replay mode), where the files go and how far a run goes this time. What the
families share lives here too: `CallTimer` (the model seconds of each answer), `encode_tokens` /
`decode_tokens` (tokens as compact JSON) and `progress_bar`.
"""
from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pandas as pd
from tqdm.auto import tqdm

from lib.backends.common import library_versions
from lib.backends.protocol import LLM, Completion, Message, NextTokenLogprobs, TokenLogprob
from lib.hashing import fingerprint
from lib.saved_runs.store import RESULTS_DIR, ResultsStore, Row, run_command

__all__ = [
    "RunOptions", "Producer", "progress_bar", "CallTimer", "encode_tokens", "decode_tokens", "ITEM_RUN_MODES",
    "item_run_path", "run_items", "load_item_run", "load_run", "Prepared", "Prepare", "item_producer",
]

_Item = TypeVar("_Item")


@dataclass(frozen=True)
class RunOptions:
    """How a saved run is made this time (`setup/run_saved.py` sets them from its options).

    model: the model the run asks, built on the first call (the live backend, or the run's
    recordings in replay mode); a run that asks no model, or builds its own (drift), never calls
    it. mode: "live" or "replay", written in the header of an item run. results_dir: where the
    files go (a second model's under `lib.saved_runs.store.results_dir_for`). limit: at most
    this many items this time (decision and drift runs). workers: concurrent requests (decision
    runs on a server backend). retry_failures: decide again the items saved as failures.
    kinds: only the drift requests of these kinds this time. progress: show a progress bar.
    """

    model: Callable[[], LLM]
    mode: str = "live"
    results_dir: Path = RESULTS_DIR
    limit: int | None = None
    workers: int = 1
    retry_failures: bool = False
    kinds: tuple[str, ...] | None = None
    progress: bool = True


Producer = Callable[[RunOptions], Path]
"""What makes (or resumes) one saved run and returns the path of its file."""


def progress_bar(total: int, initial: int, description: str, enabled: bool) -> tqdm:
    """The progress bar every saved run shows while it computes (`enabled` False: none)."""
    return tqdm(total=total, initial=initial, desc=description, disable=not enabled, smoothing=0.05)


class CallTimer:
    """Passes `chat` and `next_token_logprobs` through to `llm` and adds up the model seconds of each answer.

    It shows a decider only these two methods, so a `ShortlistDecider` over it asks for the
    top candidates as it would on a server, whatever the backend behind it.
    """

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.seconds = 0.0

    def chat(self, messages: Sequence[Message], **options: object) -> Completion:
        answer = self.llm.chat(messages, **options)
        self.seconds += answer.seconds
        return answer

    def next_token_logprobs(self, messages: Sequence[Message], **options: object) -> NextTokenLogprobs:
        answer = self.llm.next_token_logprobs(messages, **options)
        self.seconds += answer.seconds
        return answer


def encode_tokens(tokens: Sequence[TokenLogprob]) -> list[list[object]]:
    """Tokens as compact JSON: [token, logprob, [[candidate, logprob], ...]] each."""
    return [[t.token, t.logprob, [[c, lp] for c, lp in t.top]] for t in tokens]


def decode_tokens(rows: Sequence[Sequence[object]]) -> tuple[TokenLogprob, ...]:
    """The `TokenLogprob`s that `encode_tokens` saved."""
    return tuple(TokenLogprob(str(token), float(logprob), tuple((str(c), float(lp)) for c, lp in top))
                 for token, logprob, top in rows)


ITEM_RUN_MODES = ("live", "replay")
"""Where an item run's model answers come from: the model itself, or the notebooks' recordings."""
_HEADER_CHECKED = ("run", "model", "fingerprint")
"""The header fields an item run must share with the file it resumes."""


def item_run_path(name: str, results_dir: Path = RESULTS_DIR) -> Path:
    """The file of the saved item run `name`: data/results/{name}.jsonl."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"run name {name!r} must be a plain file name such as 'handbook-short-answers'")
    return Path(results_dir) / f"{name}.jsonl"


def _store(name: str, results_dir: Path) -> ResultsStore:
    """The store of the item run `name`: rows by item position `i`."""
    return ResultsStore(item_run_path(name, results_dir), run_command(name, Path(results_dir)), {"row": ("i",)},
                        names={"run": name})


def run_items(name: str, items: Sequence[_Item], compute: Callable[[int, _Item], Row], *, model: str, backend: str,
              settings: Row, mode: str, results_dir: Path = RESULTS_DIR, progress: bool = True) -> Path:
    """Compute one JSON row per item (a question, a message) and append it to `item_run_path(name)`.

    The header names the run, `model` (its identity) and `backend`, `settings` and their
    fingerprint, the `mode` that produced the answers, library versions and the command that
    makes the file (`lib.saved_runs.store.run_command`); then one row per item with its position
    `i`. Rows already in the file are skipped, so calling it again resumes. A file written with
    another model or other settings raises instead of being mixed in; so does adding rows in
    another mode than the one the header names (an unfinished file is finished in the mode it
    was started in). `compute(i, item)` returns the row's fields. Returns the path of the file.
    """
    if mode not in ITEM_RUN_MODES:
        raise ValueError(f"mode must be one of {ITEM_RUN_MODES}, got {mode!r}")
    store = _store(name, results_dir)
    header = {"run": name, "model": model, "backend": backend, "fingerprint": fingerprint(settings),
              "settings": settings, "mode": mode, "items": len(items), "versions": library_versions(),
              "date": datetime.date.today().isoformat(), "command": store.command}
    with store.writing(header, checked=_HEADER_CHECKED) as (content, append):
        todo = [i for i in range(len(items)) if i not in content.rows]
        if todo and content.header is not None and content.header.get("mode") != mode:
            raise ValueError(f"{store.path} was started in {content.header.get('mode')} mode; finish it in that mode, "
                             f"or delete it to start again in {mode} mode")
        bar = progress_bar(len(items), len(items) - len(todo), name, progress)
        for i in todo:
            append({"kind": "row", "i": i, **compute(i, items[i])})
            bar.update(1)
    bar.close()
    return store.path


def load_item_run(name: str, results_dir: Path = RESULTS_DIR) -> tuple[Row, list[Row]]:
    """The header and the rows (in item order, without `kind`) of the saved item run `name`.

    Raises FileNotFoundError, naming the command that makes the file, when it does not exist.
    """
    store = _store(name, results_dir)
    content = store.read()
    header, rows = content.header, content.rows
    if header is None:
        raise FileNotFoundError(f"{store.path} does not exist; produce it with `{store.command}` (or `make results`)")
    return header, [{key: value for key, value in rows[i].items() if key != "kind"} for i in sorted(rows)]


def load_run(name: str, results_dir: Path = RESULTS_DIR) -> tuple[Row, pd.DataFrame]:
    """A saved item run's header and its rows as a DataFrame (one row per item, in item order)."""
    header, rows = load_item_run(name, results_dir)
    return header, pd.DataFrame.from_records(rows)


Prepared = tuple[Sequence[_Item], Callable[[int, _Item], Row], Row]
"""An item run ready to make: its items, the function that computes an item's row, and the settings its header keeps."""
Prepare = Callable[[LLM, Path], Prepared]
"""How a family prepares one item run on a model, reading the saved runs it needs from a results folder."""


def item_producer(name: str, prepare: Prepare) -> Producer:
    """The producer of the item run `name`: `prepare` it on the options' model, then `run_items`."""
    def produce(options: RunOptions) -> Path:
        llm = options.model()
        items, compute, settings = prepare(llm, Path(options.results_dir))
        return run_items(name, items, compute, model=llm.identity, backend=llm.backend_name, settings=settings,
                         mode=options.mode, results_dir=options.results_dir, progress=options.progress)

    return produce
