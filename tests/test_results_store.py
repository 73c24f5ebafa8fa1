"""lib.saved_runs.store: the one reader and writer of saved runs, tried through three of its users.

Every rule is checked on a split run (`lib.saved_runs.decisions.run_split` / `load_results`), an item
run (`lib.saved_runs.items.run_items` / `load_item_run`) and a committee run
(`lib.saved_runs.committees.run_committee_cases` / `load_committee_run`), since each used to keep its
own copy of them (issue 24, items 3, 7 and 14).
"""
from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from lib.saved_runs.committees import load_committee_run, run_committee_cases
from lib.saved_runs.decisions import load_results, results_path, run_is_complete, run_split
from lib.saved_runs.items import load_item_run, run_items
from test_extraction import DESCRIPTION, KIM, reply
from test_runs import FakeDecider
from tests.test_grounding import FakeLLM, completion


@dataclass(frozen=True)
class Run:
    """One user of the store: `write(folder, n)` computes the first n items (returns the file and how many
    items it computed), `read(folder)` returns the keys of the rows a reader sees, and `field` is a field
    every row must have."""

    name: str
    write: Callable[[Path, int], tuple[Path, int]]
    read: Callable[[Path], list]
    field: str


def _split_write(folder: Path, n: int) -> tuple[Path, int]:
    decider = FakeDecider()
    run_split("banking77", "calibration", "full", decider=decider, limit=n, results_dir=folder, progress=False)
    return results_path("banking77", "calibration", "full", folder), decider.calls


def _items_write(folder: Path, n: int) -> tuple[Path, int]:
    computed = []
    path = run_items("demo", [f"item {k}" for k in range(n)], lambda i, item: computed.append(i) or {"text": item},
                     model="fake", backend="fake", settings={"prompt": "p"}, mode="replay",
                     results_dir=folder, progress=False)
    return path, len(computed)


def _committees_write(folder: Path, n: int) -> tuple[Path, int]:
    llm = FakeLLM(*[completion(reply(KIM)) for _ in range(n)])
    cases = [{"id": f"case-{k}", "description": DESCRIPTION, "home_department": "Computer Science"} for k in range(n)]
    path = run_committee_cases(llm, "one-call", cases, results_dir=folder, progress=False)
    return path, len(llm.requests)


RUNS = [
    Run("split", _split_write, lambda folder: sorted(load_results("banking77", "calibration", "full", folder)["i"]),
        "steps"),
    Run("items", _items_write, lambda folder: [row["i"] for row in load_item_run("demo", folder)[1]], "i"),
    Run("committees", _committees_write, lambda folder: sorted(load_committee_run("one-call", folder).rows),
        "members"),
]


@pytest.fixture(params=RUNS, ids=[run.name for run in RUNS])
def run(request) -> Run:
    return request.param


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


# --------------------------------------------------------------------------- item 3: the last newline


def test_a_complete_last_line_without_its_newline_is_a_row(run, tmp_path):
    path, _ = run.write(tmp_path, 3)
    rows = run.read(tmp_path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # an editor or a copy that drops the final newline
    before = path.read_bytes()
    assert run.read(tmp_path) == rows and len(rows) == 3  # readers keep the last row
    assert path.read_bytes() == before  # and never write
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the writer repairs nothing it would have to warn about
        _, computed = run.write(tmp_path, 5)
    assert computed == 2  # the last row was kept, not deleted and computed again
    assert len(run.read(tmp_path)) == 5
    assert path.read_bytes().startswith(before + b"\n") and path.read_bytes().endswith(b"\n")


def test_a_complete_split_run_without_its_last_newline_stays_complete(tmp_path):
    run_split("banking77", "calibration", "full", decider=FakeDecider(), results_dir=tmp_path, progress=False)
    path = results_path("banking77", "calibration", "full", tmp_path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    assert run_is_complete("banking77", "calibration", "full", tmp_path)


def test_a_last_line_that_is_json_but_not_a_complete_row_is_torn(run, tmp_path):
    path, _ = run.write(tmp_path, 3)
    with open(path, "ab") as handle:
        handle.write(b'{"kind": "row"}')  # parses, but is no row: left out by readers, cut by the writer
    before = path.read_bytes()
    assert len(run.read(tmp_path)) == 3 and path.read_bytes() == before
    with pytest.warns(UserWarning, match=r"removed an unfinished last line \(15 bytes\)"):
        _, computed = run.write(tmp_path, 4)
    assert computed == 1 and len(run.read(tmp_path)) == 4


# --------------------------------------------------------------------------- item 7: one run per file


def _refused_by_reader_and_writer(run, tmp_path, path, message: str, more_rows: int) -> None:
    """Reading `path` and appending to it both raise `message`, and the file is left byte for byte."""
    before = path.read_bytes()
    with pytest.raises(ValueError, match=message):
        run.read(tmp_path)
    with pytest.raises(ValueError, match=message):
        run.write(tmp_path, more_rows)
    assert path.read_bytes() == before


def test_a_second_header_is_refused_naming_the_file_and_the_line(run, tmp_path):
    path, _ = run.write(tmp_path, 3)
    other, _ = run.write(tmp_path / "other", 2)
    path.write_bytes(path.read_bytes() + other.read_bytes())  # another run's header and rows appended
    _refused_by_reader_and_writer(run, tmp_path, path, rf"{re.escape(str(path))}, line 5: a second header line "
                                  r"\(the first is line 1\)", more_rows=6)


def test_a_header_after_rows_is_refused(run, tmp_path):
    path, _ = run.write(tmp_path, 3)
    lines = _lines(path)
    path.write_bytes(b"".join(lines[1:] + lines[:1]))
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}, line 4: a header line after rows"):
        run.read(tmp_path)


# --------------------------------------------------------------------------- item 14: damaged lines


def test_a_row_without_a_required_field_names_the_file_the_line_and_the_fix(run, tmp_path):
    path, _ = run.write(tmp_path, 3)
    lines = _lines(path)
    row = json.loads(lines[2])
    del row[run.field]
    lines[2] = json.dumps(row).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    message = (rf"{re.escape(str(path))}, line 3: a row line without '{run.field}'\. The file is damaged: "
               r"restore it from git .* or remake it with `python setup/")
    _refused_by_reader_and_writer(run, tmp_path, path, message, more_rows=5)


def test_a_line_that_is_not_utf8_names_the_file_and_the_line(run, tmp_path):
    path, _ = run.write(tmp_path, 3)
    lines = _lines(path)
    lines[3] = lines[3].replace(b'"kind"', b'"k\xffind"', 1)
    path.write_bytes(b"".join(lines))
    message = rf"{re.escape(str(path))}, line 4: not UTF-8 text \(byte 0xff .*restore it from git"
    with pytest.raises(ValueError, match=message):
        run.read(tmp_path)


def test_a_torn_multibyte_character_in_the_last_line_is_torn_not_damaged(tmp_path):
    from lib.saved_runs.store import ResultsStore

    store = ResultsStore(tmp_path / "run.jsonl", "make it", {"row": ("i", "text")})
    store.start({"model": "m"}, checked=("model",))
    with store.appending() as append:
        append({"kind": "row", "i": 0, "text": "caf\u00e9"})
    with open(store.path, "ab") as handle:
        handle.write('{"kind":"row","i":1,"text":"caf\u00e9'.encode()[:-1])  # killed inside the é
    assert list(store.read().rows) == [0] and store.read().torn_bytes > 0


# --------------------------------------------------------------------------- the writer's own checks


def test_the_writer_refuses_to_append_an_incomplete_row(tmp_path):
    from lib.saved_runs.store import ResultsStore

    store = ResultsStore(tmp_path / "run.jsonl", "make it", {"row": ("i", "text")})
    store.start({"model": "m"}, checked=("model",))
    with pytest.raises(ValueError, match=r"run\.jsonl: refusing to append a row line without 'text'"):
        with store.appending() as append:
            append({"kind": "row", "i": 0})
    with pytest.raises(ValueError, match="whose 'i' is '0', not a int"):
        with store.appending() as append:
            append({"kind": "row", "i": "0", "text": "t"})
    assert store.read().rows == {}


def test_a_read_of_a_missing_file_is_empty_and_writes_nothing(tmp_path):
    from lib.saved_runs.store import ResultsStore

    store = ResultsStore(tmp_path / "none" / "run.jsonl", "make it", {"row": ("i",)})
    assert store.read().header is None and not store.read().rows
    assert not store.path.parent.exists()


# --------------------------------------------------------------------------- one writer at a time


def test_a_second_writer_of_the_same_run_stops_at_once_and_writes_nothing(run, tmp_path):
    import os

    from lib.saved_runs.store import exclusive_lock, LOCK_SUFFIX, RunBusyError

    path, _ = run.write(tmp_path, 1)
    before = path.read_bytes()
    lock = path.with_name(path.name + LOCK_SUFFIX)
    with exclusive_lock(lock, RuntimeError):  # another writer holds the file (a second open file: flock refuses it)
        with pytest.raises(RunBusyError, match=rf"{re.escape(path.name)} is being written by another run "
                                               rf"\(process {os.getpid()}: .*; lock .*\): wait until it ends.* again to resume"):
            run.write(tmp_path, 3)
    assert path.read_bytes() == before
    _, computed = run.write(tmp_path, 3)  # the lock is released with its holder: the run resumes
    assert computed == 2 and len(run.read(tmp_path)) == 3


def test_the_writer_lock_is_per_file(tmp_path):
    from lib.saved_runs.store import ResultsStore

    first = ResultsStore(tmp_path / "first.jsonl", "make first", {"row": ("i",)})
    second = ResultsStore(tmp_path / "second.jsonl", "make second", {"row": ("i",)})
    with first.writing({"model": "m"}, checked=("model",)) as (_, append_first):
        with second.writing({"model": "m"}, checked=("model",)) as (_, append_second):
            append_first({"kind": "row", "i": 0})
            append_second({"kind": "row", "i": 0})
    assert list(first.read().rows) == [0] and list(second.read().rows) == [0]
