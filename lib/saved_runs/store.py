"""The one reader and writer of saved runs: the JSON-lines files under data/results/, and the one command that makes them.

Every saved run (`lib.saved_runs.decisions.run_split`, `lib.saved_runs.items.run_items`,
`lib.saved_runs.committees.run_committee_cases`, `lib.saved_runs.drift.run_setting`) is a file of
one JSON object per line: first a header naming what made it (model, prompt fingerprint,
settings, library versions, the command that made it), then one line per item, appended as each
is computed, so a run that is stopped resumes where it stopped. Every run is made by one command,
`python setup/run_saved.py --run NAME` (`run_command`, the one place that writes it); a header
keeps the command that made its file, which for older files is the script that made them then,
and nothing compares it. A `ResultsStore` keeps the rules for all of them in one place:

- a read never writes (`ResultsStore.read`);
- a file holds one run: a header after the first line (another run's rows appended) is refused,
  naming the line, and so is a line that is not UTF-8, not JSON, or lacks a field its kind needs;
- a last line without its newline is still a line when it is complete (it parses and has its
  fields); only a last line cut short by a kill is left out, and only the writer removes it;
- only the writer (`ResultsStore.writing`: `start`, then `appending`) changes a file: it
  refuses a file made with other settings or without its header, and otherwise only ever appends;
- one writer at a time: `writing` holds a lock beside the file (`<file>.lock`), so a second run of
  the same saved run started meanwhile stops at once with `RunBusyError` instead of computing the
  same rows twice or cutting a line the first is writing;
- a line is strict JSON: NaN or an infinity (which Python's json writes and reads by default, and
  every mean over the rows would silently turn into NaN) is refused when appended and when read;
- an item has at most one row (a failure may be followed by the row a retry decided): a second row
  for the same item is refused when appended and when read, since nothing says which one is right;
- a header that names another run than the file's (`names`: a file copied or renamed) is refused;
- a folder that cannot be written or a full disk stops the writer with an error naming the file,
  and the rows already saved stay (a torn last line is repaired by the next writer).
"""
from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "RESULTS_DIR", "SECOND_MODELS", "HEADER", "LOCK_SUFFIX", "Row", "Key", "RunBusyError", "exclusive_lock",
    "results_dir_for", "remake_command", "RUN_SCRIPT", "run_command", "SavedLines", "ResultsStore",
]

RESULTS_DIR = Path(__file__).resolve().parents[2] / "data" / "results"
"""Where the saved runs live: data/results/."""

Row = dict[str, Any]
"""One line of a saved run (its header, a row, a failure) as the JSON object it is written as."""
Key = int | str
"""What names the item a line is about: a position (`i`) or an id (`case`, `request`)."""

SECOND_MODELS = "models"
"""The folder under `RESULTS_DIR` (and under data/recordings) that holds one folder per model other than the default."""


def results_dir_for(model_key: str | None) -> Path:
    """Where a model's saved runs live: `RESULTS_DIR` for the default model (`model_key` None, see
    `lib.model_file.model_key`), where the notebooks read them; `RESULTS_DIR/models/<key>` for any
    other, so a second model's runs sit beside the default's and never replace them."""
    return RESULTS_DIR if model_key is None else RESULTS_DIR / SECOND_MODELS / model_key


def remake_command(command: str, results_dir: Path) -> str:
    """`command` as it must be typed to remake a run filed in `results_dir`: in a second model's
    folder (`results_dir_for`) it is prefixed with `WORKBOOK_MODEL=<key>`, which chose that model."""
    results_dir = Path(results_dir)
    if results_dir.parent.name == SECOND_MODELS:
        return f"WORKBOOK_MODEL={results_dir.name} {command}"
    return command


RUN_SCRIPT = "setup/run_saved.py"
"""The one command that makes (or resumes) every saved run (`make results` runs it for all)."""


def run_command(name: str, results_dir: Path = RESULTS_DIR) -> str:
    """The command that makes (or resumes) the saved run `name` filed in `results_dir`: the line
    every header, every error about a missing or damaged file and `--list` give."""
    return remake_command(f"python {RUN_SCRIPT} --run {name}", results_dir)


HEADER = "header"
"""The `kind` of a file's first line."""

LOCK_SUFFIX = ".lock"
"""`<file>.lock` beside a saved run (or a notebook's recording) is held by the run writing it."""


class RunBusyError(RuntimeError):
    """Another process is writing the file this run would write; raised at once, naming that process."""


def _unwritable_message(path: Path, error: OSError, what: str) -> str:
    """Why `path` could not be written (`error`: a read-only folder, a full disk, ...), worded for
    the learner: the file, the system's reason, and that `what` (what was kept) is safe."""
    reason = error.strerror or type(error).__name__
    advice = {errno.ENOSPC: "free some disk space", errno.EDQUOT: "free some disk space",
              errno.EACCES: f"make {path.parent} writable", errno.EPERM: f"make {path.parent} writable",
              errno.EROFS: "use a copy of the repository on a writable disk"}.get(error.errno, "fix the cause")
    return f"cannot write {path}: {reason} (errno {error.errno}). {what}; {advice}, then run the command again"


def _strict_constant(name: str) -> float:
    """json.loads' hook for NaN, Infinity and -Infinity: a results line never holds them."""
    raise _BadLine(f"a line holding {name}, which is not a number a saved run may hold (strict JSON has no "
                   "NaN or infinity)")


_DECODER = json.JSONDecoder(parse_constant=_strict_constant)
"""json's decoder, refusing the NaN and infinities that Python's json writes unless told not to."""


@contextmanager
def exclusive_lock(path: Path, busy: Callable[[str], Exception]) -> Iterator[None]:
    """Hold an exclusive lock on `path` for the duration of the block.

    The lock is an flock on `path` (created when missing), so the system releases it when the
    holder ends, even when it is killed: a crashed run never leaves a file locked. The holder
    writes its process id and command line into `path`; when another process holds the lock,
    `busy(holder)` is raised at once with that text (the caller words the error), never a wait.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+", encoding="utf-8")
    except OSError as error:
        raise OSError(error.errno, _unwritable_message(path, error, "Nothing was written")) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise busy(handle.read().strip() or "another process") from None
        handle.truncate(0)
        handle.write(f"process {os.getpid()}: {' '.join(sys.argv) or sys.executable}")
        handle.flush()
        yield


@dataclass(frozen=True)
class SavedLines:
    """What a results file holds, read without changing it.

    header: the first line, or None (no file, an empty file). rows and failures: the lines of
    kind "row" and "failure" by their key (a line written again later, e.g. a failure decided on
    a retry, counts by its latest version). torn_bytes: the size of a last line cut short by a
    kill (0 when none); missing_newline: the last line is complete but lacks its newline.
    """

    header: Row | None = None
    rows: dict[Key, Row] = field(default_factory=dict)
    failures: dict[Key, Row] = field(default_factory=dict)
    torn_bytes: int = 0
    missing_newline: bool = False


class _BadLine(ValueError):
    """A line that is not a line of this store (the reason, without the file and line number)."""


@dataclass(frozen=True)
class ResultsStore:
    """One saved run's file and what its lines must hold.

    path: the file. command: the command that remakes it, named in every error about a damaged
    line. key: the field naming the item a line is about ("i", a position; "case", an id), of
    type `key_type`. fields: the fields each kind of line ("row", and "failure" where the run
    saves what it could not compute) must have besides `kind`, e.g. {"row": ("i", "text", ...),
    "failure": ("i", "error")}; a line of a kind not listed is refused. names: the header fields
    that say which run the file is, e.g. {"task": "banking77", "split": "test"}; a header that
    gives another value is refused (the file was copied or renamed from another run's).
    """

    path: Path
    command: str
    fields: Mapping[str, Sequence[str]]
    key: str = "i"
    key_type: type = int
    names: Mapping[str, Any] = field(default_factory=dict)

    # -- reading

    def read(self) -> SavedLines:
        """The header, rows and failures of the file, and what a writer would have to repair.

        Raises ValueError, naming the file, the line and what to do, for a folder in the file's
        place, a line that is not UTF-8 JSON of a known kind with its fields, or a second header.
        A missing file reads as empty.
        """
        if self.path.is_dir():
            raise ValueError(f"{self.path} is a folder, not a results file; move it away and run `{self.command}`")
        if not self.path.is_file():
            return SavedLines()
        raw = self.path.read_bytes()
        end = raw.rfind(b"\n") + 1
        lines = raw[:end].split(b"\n")[:-1]
        last, torn_bytes = raw[end:], 0
        if last.strip():
            try:
                self._entry(last)
                lines.append(last)  # complete, only its newline is missing
            except _BadLine:
                torn_bytes = len(last)  # cut short by a kill: left out, and left for the writer to remove
        elif last:
            torn_bytes = len(last)
        header, header_line = None, None
        rows: dict[Key, Row] = {}
        failures: dict[Key, Row] = {}
        row_lines: dict[Key, int] = {}
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entry = self._entry(line)
            except _BadLine as error:
                raise self._damaged(number, str(error)) from None
            if entry["kind"] == HEADER:
                if header_line is not None:
                    raise self._damaged(number, f"a second header line (the first is line {header_line}): the lines "
                                                "after it come from another run, and one file holds one run")
                if rows or failures:
                    raise self._damaged(number, "a header line after rows: the rows before it come from another "
                                                "run, and one file holds one run")
                other = {name: entry[name] for name, value in self.names.items()
                         if name in entry and entry[name] != value}
                if other:
                    raise self._damaged(number, f"a header naming another run ({other}, where this file is "
                                                f"{dict(self.names)}): it was copied or renamed from another run's file")
                header, header_line = entry, number
                continue
            if entry["kind"] == "row" and entry[self.key] in row_lines:
                raise self._damaged(number, f"a second row for {self.key!r} {entry[self.key]!r} (the first is line "
                                            f"{row_lines[entry[self.key]]}): one item has one row, and nothing says "
                                            "which of the two is right")
            if entry["kind"] == "row":
                row_lines[entry[self.key]] = number
            rows.pop(entry[self.key], None)
            failures.pop(entry[self.key], None)
            (rows if entry["kind"] == "row" else failures)[entry[self.key]] = entry
        return SavedLines(header, rows, failures, torn_bytes, missing_newline=bool(last) and not torn_bytes)

    def _entry(self, line: bytes) -> Row:
        """One line as a dict, or _BadLine saying why it is not a line of this store."""
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise _BadLine(f"not UTF-8 text (byte {line[error.start]:#04x} at position {error.start})") from None
        try:
            entry = _DECODER.decode(text)
        except json.JSONDecodeError as error:
            raise _BadLine(f"not a JSON line of a results file ({error}): {text[:80]!r}") from None
        self._check(entry)
        return entry

    def _check(self, entry: object) -> None:
        """Raise ValueError unless `entry` is a line this store may hold: a header, or a known kind
        with every field it needs and a key of the right type."""
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind == HEADER:
            return
        if not isinstance(entry, dict) or kind not in self.fields:
            raise _BadLine(f"a line of kind {kind!r}, which is none of {[HEADER, *self.fields]}")
        missing = [name for name in (self.key, *self.fields[kind]) if name not in entry]
        if missing:
            raise _BadLine(f"a {kind} line without {', '.join(repr(name) for name in dict.fromkeys(missing))}")
        if not isinstance(entry[self.key], self.key_type) or isinstance(entry[self.key], bool):
            raise _BadLine(f"a {kind} line whose {self.key!r} is {entry[self.key]!r}, not a {self.key_type.__name__}")

    def _damaged(self, number: int, what: str) -> ValueError:
        return ValueError(f"{self.path}, line {number}: {what}. The file is damaged: restore it from git "
                          f"(`git checkout -- {self.path}`) or remake it with `{self.command}` after moving it away")

    # -- writing

    def start(self, header: Row, checked: Sequence[str]) -> SavedLines:
        """Open the file for a run with `header` and return what it already holds (empty when new).

        Refuses (ValueError, nothing written) a file whose header differs from `header` in a
        `checked` field, or that holds rows without a header; warns when the saved header names
        other library `versions`. Then repairs what a kill leaves (a torn last line is cut, with a
        warning; a missing last newline is added) and writes `header` to a new file.
        """
        content = self.read()
        if content.header is None and (content.rows or content.failures):
            raise ValueError(
                f"{self.path} has no header line but holds {len(content.rows)} rows and {len(content.failures)} "
                "failure rows; refusing to write to it, since nothing says which model and settings made them. "
                "Restore its first line (e.g. from git), or move the file away to start again")
        if content.header is not None:
            self._check_resumable(content.header, header, checked)
        try:
            if content.torn_bytes:
                with open(self.path, "r+b") as handle:
                    handle.truncate(self.path.stat().st_size - content.torn_bytes)
                warnings.warn(f"{self.path}: removed an unfinished last line ({content.torn_bytes} bytes) left by an "
                              "interrupted run; that row is computed again", UserWarning, stacklevel=3)
            elif content.missing_newline:
                with open(self.path, "ab") as handle:
                    handle.write(b"\n")
            if content.header is None:  # new, empty or blank: nothing to lose
                line = json.dumps({**header, "kind": HEADER}, ensure_ascii=False, sort_keys=True, allow_nan=False)
                self.path.parent.mkdir(parents=True, exist_ok=True)
                partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
                try:  # the file appears with its whole header or not at all
                    with open(partial, "w", encoding="utf-8") as handle:
                        handle.write(line + "\n")
                    os.replace(partial, self.path)
                finally:
                    partial.unlink(missing_ok=True)
        except OSError as error:
            raise OSError(error.errno, _unwritable_message(self.path, error, "Every row saved before is kept")) from None
        return content

    def _check_resumable(self, saved: Row, header: Row, checked: Sequence[str]) -> None:
        changed = {name: (saved.get(name), header.get(name)) for name in checked if saved.get(name) != header.get(name)}
        if changed:
            raise ValueError(f"{self.path} was written with other settings {changed} (saved, now); move it away "
                             "or delete it to start again")
        if "versions" not in header:
            return
        before = saved.get("versions") or {}
        differing = [f"{name} {before.get(name, 'not recorded')} (now {version})"
                     for name, version in header["versions"].items() if before.get(name) != version]
        if differing:
            warnings.warn(f"{self.path} was written with {', '.join(differing)}; the rows added now come from other "
                          "library versions than the rows already there. Delete the file to redo every row "
                          "with one set of versions", UserWarning, stacklevel=4)

    @contextmanager
    def writing(self, header: Row, checked: Sequence[str]
                ) -> Iterator[tuple[SavedLines, Callable[[Row], None]]]:
        """Hold the file's lock, `start` it with `header`, and yield what it already holds and
        `appending`'s function; the one way a run writes its file.

        A second process calling `writing` on the same file meanwhile gets `RunBusyError` at once,
        naming the process that holds it and the command to run again, and writes nothing.
        """
        lock = self.path.with_name(self.path.name + LOCK_SUFFIX)

        def busy(holder: str) -> RunBusyError:
            return RunBusyError(f"{self.path} is being written by another run ({holder}; lock {lock}): wait until it "
                                f"ends, or stop that process, then run `{self.command}` again to resume")

        with exclusive_lock(lock, busy):
            content = self.start(header, checked)
            with self.appending(content.rows) as append:
                yield content, append

    @contextmanager
    def appending(self, rows: Collection[Key] = ()) -> Iterator[Callable[[Row], None]]:
        """A function that appends one complete line (checked as `read` checks lines) and flushes it; synced at the end.

        Call `start` first: it writes the header, repairs what a kill left, and returns the keys
        that already have a row (`rows`): a second row for one of them is refused.
        """
        kept = "Every row saved before this one is kept (a cut last line is removed when the run resumes)"
        rowed = set(rows)
        try:
            handle = open(self.path, "ab")
        except OSError as error:
            raise OSError(error.errno, _unwritable_message(self.path, error, kept)) from None
        with handle:
            def append(entry: Row) -> None:
                try:
                    self._check(entry)
                    not_finite = _not_finite(entry)  # (a read refuses them too: `_strict_constant`)
                    if not_finite:
                        raise _BadLine(f"a {entry['kind']} line whose {not_finite} is not a finite number (NaN or "
                                       "infinite)")
                except _BadLine as error:
                    raise ValueError(f"{self.path}: refusing to append {error}") from None
                if entry["kind"] == "row" and entry[self.key] in rowed:
                    raise ValueError(f"{self.path}: refusing to append a second row for {self.key!r} "
                                     f"{entry[self.key]!r}; one item has one row")
                line = json.dumps(entry, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
                try:  # one write and flush per line, so a failed write leaves at most one cut line
                    handle.write(line.encode("utf-8") + b"\n")
                    handle.flush()
                except OSError as error:
                    raise OSError(error.errno, _unwritable_message(self.path, error, kept)) from None
                if entry["kind"] == "row":
                    rowed.add(entry[self.key])

            try:
                yield append
            finally:
                with suppress(OSError):  # a full disk was reported where it happened
                    os.fsync(handle.fileno())


def _not_finite(value: Any, where: str = "") -> str:
    """The path (e.g. "probability", "top[2]") of the first NaN or infinite float in `value`, else ""."""
    if isinstance(value, float):
        return "" if math.isfinite(value) else where or "value"
    if isinstance(value, dict):
        items = ((f"{where}.{name}" if where else str(name), item) for name, item in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{where}[{index}]", item) for index, item in enumerate(value))
    else:
        return ""
    return next((found for path, item in items if (found := _not_finite(item, path))), "")
