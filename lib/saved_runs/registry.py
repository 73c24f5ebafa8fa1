"""Every saved run in one table: its name, the family that produces it, the notebooks that read it, its inputs and its command.

`RUNS` lists them in the order `make results` makes them (a run's inputs come before it). A run is
a file, data/results/{name}.jsonl (a second model's under data/results/models/<name>/), made or
resumed by one command, `python setup/run_saved.py --run NAME` (`SavedRun.command`; `--list`
prints this table). Each entry names:

- `family`: the module of `lib.saved_runs` that produces and reads it (`decisions`, `questions`,
  `asking`, `committees`, `tools`, `drift`; the item runs among them share `items`);
- `notebooks`: the notebooks that read it;
- `produce`: its producer, which takes `lib.saved_runs.items.RunOptions` and returns the file;
- `read`: its family's reader of it, given the results folder (`SavedRun.load`: what the notebooks read);
- `inputs`: the saved runs it reads, which must be complete first;
- `recordings`: the notebook recordings its replay mode answers from (none: it runs live only).

`produce(name, ...)` builds the options, the model first (the configured backend live, the run's
recordings in replay mode, or the embedded model with a thread count), and runs the producer.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lib.backends.factory import BackendConfig, create_backend
from lib.backends.protocol import LLM
from lib.recording import CombinedRecordings, RecordedLLM, get_llm
from lib.saved_runs import asking, committees, decisions, drift, questions, tools
from lib.saved_runs.items import Producer, RunOptions, item_producer, load_item_run
from lib.saved_runs.store import HEADER, RESULTS_DIR, RUN_SCRIPT, Row, run_command

__all__ = ["Reader", "SavedRun", "RUNS", "FAMILIES", "saved_run", "run_model", "produce", "saved_rows", "unregistered_files"]

Reader = Callable[[Path], object]
"""A family's reader of one saved run, given the results folder: what a notebook gets (a DataFrame,
a header and rows, a `CommitteeRun`), or the family's error for a missing or damaged file."""


@dataclass(frozen=True)
class SavedRun:
    """One saved run: its name (its file's, without .jsonl), family, notebooks, producer, reader, inputs and recordings."""

    name: str
    family: str
    notebooks: tuple[str, ...]
    produce: Producer
    read: Reader
    inputs: tuple[str, ...] = ()
    recordings: tuple[str, ...] = ()

    def path(self, results_dir: Path = RESULTS_DIR) -> Path:
        """The run's file in `results_dir`."""
        return Path(results_dir) / f"{self.name}.jsonl"

    def load(self, results_dir: Path = RESULTS_DIR) -> object:
        """The run read back by its family's reader, as a notebook reads it (`read`)."""
        return self.read(Path(results_dir))

    def command(self, results_dir: Path = RESULTS_DIR) -> str:
        """The command that makes (or resumes) it (`lib.saved_runs.store.run_command`)."""
        return run_command(self.name, Path(results_dir))

    @property
    def replayable(self) -> bool:
        """Whether its answers can come from notebook recordings instead of the model."""
        return bool(self.recordings)


def _decisions_reader(task: str, split: str, method: str, results_dir: Path) -> object:
    return decisions.load_results(task, split, method, results_dir)


def _item_reader(name: str, results_dir: Path) -> object:
    return load_item_run(name, results_dir)


def _committee_reader(method: str, results_dir: Path) -> object:
    return committees.load_committee_run(method, results_dir)


def _drift_reader(setting: str, results_dir: Path) -> object:
    return drift.load_setting(setting, results_dir)


def _decision_runs() -> list[SavedRun]:
    readers = {"banking77": ("07", "08", "09", "11", "12", "13", "14", "15", "16", "17", "21"),
               "clinc150": ("14", "15", "16")}
    return [SavedRun(decisions.results_name(task, split, method), "decisions", readers[task],
                     decisions.decision_producer(task, split, method),
                     functools.partial(_decisions_reader, task, split, method))
            for task, method, split in decisions.DECISION_RUNS]


def _question_run(name: str, notebooks: tuple[str, ...], recordings: tuple[str, ...],
                  inputs: tuple[str, ...] = ()) -> SavedRun:
    return SavedRun(name, "questions", notebooks, item_producer(name, questions.QUESTION_RUNS[name]),
                    functools.partial(_item_reader, name), inputs, recordings)


_COMMITTEE_RUNS = [SavedRun(committees.committee_run_name(method), "committees", ("04",),
                            committees.committee_producer(method), functools.partial(_committee_reader, method),
                            recordings=("04-symbolic-checks",))
                   for method in committees.COMMITTEE_METHODS]
_TOOL_RUNS = [SavedRun(name, "tools", ("05",), item_producer(name, prepare), functools.partial(_item_reader, name))
              for name, prepare in tools.TOOL_RUNS.items()]
_QUESTION_RUNS = [
    _question_run(questions.HANDBOOK, ("07", "08", "09", "10", "14", "21"), ("07-answer-confidence", "10-semantic-entropy")),
    _question_run(questions.FULL_LIST, ("08",), ("08-decision-probabilities",)),
    _question_run(questions.LETTERS_NAMES, ("08",), ("08-decision-probabilities",)),
    _question_run(questions.ROUTED_CODES, ("06",), ("06-grammars",)),
    _question_run(questions.BANKING_INJECTION, ("06",), ("06-grammars",)),
    _question_run(questions.CLINC_INJECTION, ("06",), ("06-grammars",)),
    _question_run(questions.GRAMMAR_VS_FREE, ("06",), ("06-grammars",)),
    _question_run(questions.SILENT_CORPUS, ("18",), ("18-assistant",)),
    _question_run(questions.ASSISTANT_DEV, ("18", "20"), ("18-assistant",)),
    _question_run(questions.ASSISTANT_TEST, ("18", "20"), ("18-assistant",), inputs=(questions.ASSISTANT_DEV,)),
    _question_run(questions.ASSISTANT_TEST_PAST_BOUNDARY, ("19", "20"), ("20-finale",)),
    _question_run(questions.MODEL_CITATIONS, ("19",), ("19-citations-and-fallback",)),
    _question_run(questions.FALLBACK_ANSWERS, ("19",), ("19-citations-and-fallback",)),
]
_ASKING_RUNS = [
    SavedRun(asking.HANDBOOK_RUN, "asking", ("09", "21"), item_producer(
        asking.HANDBOOK_RUN, asking.asking_about_answers(questions.HANDBOOK)),
        functools.partial(_item_reader, asking.HANDBOOK_RUN), inputs=(questions.HANDBOOK,)),
    *[SavedRun(name, "asking", ("09", "21"), item_producer(name, asking.asking_about_decisions(split)),
               functools.partial(_item_reader, name),
               inputs=(decisions.results_name("banking77", split, "full"),))
      for name, split in ((asking.CALIBRATION_RUN, "calibration"), (asking.TEST_RUN, "test"))],
]
_DRIFT_RUNS = [SavedRun(drift.drift_name(setting.name), "drift", ("07", "21"), drift.drift_producer(setting.name),
                       functools.partial(_drift_reader, setting.name))
               for setting in drift.SETTINGS]

RUNS: tuple[SavedRun, ...] = (*_COMMITTEE_RUNS, *_TOOL_RUNS, *_decision_runs(), *_QUESTION_RUNS, *_ASKING_RUNS,
                              *_DRIFT_RUNS)
"""Every saved run, in the order `make results` makes them: the committees (minutes), the tool
conversations (about an hour), the decision runs (hours on 2 cores), the questions, the asking runs
(which read the decisions and the handbook answers), and the drift measurement (hours)."""
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(run.family for run in RUNS))
"""The families of saved runs, in `RUNS` order; each is a module of `lib.saved_runs`."""
_BY_NAME = {run.name: run for run in RUNS}


def saved_run(name: str) -> SavedRun:
    """The saved run `name`, or ValueError listing the runs there are."""
    if name not in _BY_NAME:
        raise ValueError(f"no saved run {name!r}; the runs are {list(_BY_NAME)} (python {RUN_SCRIPT} --list)")
    return _BY_NAME[name]


@functools.cache
def _embedded(threads: int) -> LLM:
    return create_backend(BackendConfig("embedded"), n_threads=threads)


def _replayed(recordings: tuple[str, ...]) -> LLM:
    config = BackendConfig.from_environment()
    combined = CombinedRecordings(recordings)
    combined.check_model(config.identity())
    return RecordedLLM(config, lambda: create_backend(config), combined, "replay")


def run_model(run: SavedRun, mode: str = "live", threads: int | None = None) -> Callable[[], LLM]:
    """What builds the model `run` asks, on first call: the configured backend live (whatever
    WORKBOOK_MODE says: a run's rows are their own record), the embedded model with `threads`
    threads, or in replay mode the run's recordings (ValueError for a run that has none)."""
    if mode == "replay":
        if not run.replayable:
            raise ValueError(f"{run.name} has no recordings to replay: its answers come from the model only; "
                             f"run it live with `{run.command()}`")
        if threads is not None:
            raise ValueError("threads set the live embedded model; replay mode loads no model")
        return lambda: _replayed(run.recordings)
    if mode != "live":
        raise ValueError(f"mode must be 'live' or 'replay', got {mode!r}")
    if threads is not None:
        if BackendConfig.from_environment().backend != "embedded":
            raise ValueError("threads apply to the embedded model only (WORKBOOK_BACKEND=embedded)")
        return lambda: _embedded(threads)
    return lambda: get_llm(mode="live")


def produce(name: str, *, mode: str = "live", llm: LLM | None = None, threads: int | None = None,
            results_dir: Path = RESULTS_DIR, limit: int | None = None, workers: int = 1,
            retry_failures: bool = False, kinds: tuple[str, ...] | None = None, progress: bool = True) -> Path:
    """Make (or resume) the saved run `name` in `results_dir` and return its file.

    `llm` asks that model instead of the one `run_model` builds (tests pass a fake one); the other
    options are `RunOptions`'.
    """
    run = saved_run(name)
    model = (lambda: llm) if llm is not None else run_model(run, mode, threads)
    return run.produce(RunOptions(model, mode, Path(results_dir), limit, workers, retry_failures, kinds, progress))


def saved_rows(run: SavedRun, results_dir: Path = RESULTS_DIR) -> tuple[int, int, int | None] | None:
    """How far `run`'s file in `results_dir` got, for `--list`: (items saved as rows, items saved as
    failures, the items its header names or None), read line by line without the family's checks;
    None without a file."""
    path = run.path(results_dir)
    if not path.is_file():
        return None
    header: Row = {}
    kinds: dict[object, str] = {}  # item key -> the kind of its latest line
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a damaged line: the family's reader names it
        if not isinstance(entry, dict):
            continue
        if entry.get("kind") == HEADER:
            header = entry
        else:
            kinds[next((entry[key] for key in ("i", "case", "request") if key in entry), None)] = entry.get("kind", "")
    total = header.get("items", header.get("n_requests"))
    kinds_saved = list(kinds.values())
    return kinds_saved.count("row"), kinds_saved.count("failure"), total


def unregistered_files(results_dir: Path = RESULTS_DIR) -> list[Path]:
    """The .jsonl files in `results_dir` (not its second models' folders) that no saved run names."""
    return sorted(path for path in Path(results_dir).glob("*.jsonl") if path.stem not in _BY_NAME)
