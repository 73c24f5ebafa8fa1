"""Execute the workbook's notebooks headless: a progress line per notebook, then a table.

    python setup/run_notebooks.py                 # live: executed copies go to build/
    python setup/run_notebooks.py --record        # record: outputs and recordings are rewritten in place
    python setup/run_notebooks.py --update        # like --record, but answers already recorded for the same
                                                  # request are reused: only new requests call the model
    python setup/run_notebooks.py --refresh       # replay: outputs rewritten in place from the recordings
                                                  # and the current data/results (no model is loaded)
    python setup/run_notebooks.py --only 00-setup # one notebook: its number (00), name (00-setup) or file
                                                  # (notebooks/00-setup.ipynb); anything else is refused

The mode reaches the notebooks through WORKBOOK_MODE; the committed notebooks are only
written in record or update mode, which is how their stored outputs and recordings are produced, or in
refresh mode, which updates the outputs after data/results/ has grown without calling the model.
A notebook and its new recording replace the old ones only when every cell ran without error:
the executed notebook is written beside the original first, and a failed one goes to build/ to
inspect. One run at a time writes a notebook: a second run started on it is refused at once,
naming the run that holds it; runs on different notebooks go side by side, each replacing only
the recordings its own kernels wrote.
Each notebook's line gives its seconds and slowest cell; a failed notebook names the cell that
stopped it (its number, counting every cell from 0, and its first line) and the error. Live
seconds are also saved to build/course-times.json, which setup/bench_course.py reads.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from lib.backends.factory import BackendConfig  # noqa: E402
from lib.recording import (PENDING_SUFFIX, RECORDINGS_DIR, RecordingBusyError, discard_abandoned,  # noqa: E402
                           discard_pending, finish_pending, recording_lock)
from lib.settings import RUN_ID_VARIABLE, backend_setting, run_id_setting  # noqa: E402
from setup.notebook_outputs import merge_streams, strip_widget_views  # noqa: E402

NOTEBOOKS = REPO / "notebooks"
BUILD = REPO / "build"
TIMES = BUILD / "course-times.json"


@dataclass
class NotebookRun:
    """How one notebook's execution went: seconds, the slowest cell, and where it failed."""

    ok: bool
    seconds: float
    error: str = ""  # "cell 12 (`answers = ask(...)`): ValueError: ..." when a cell failed
    slowest_cell: tuple[int, float, str] | None = None  # (cell index, seconds, first source line)


_NOTEBOOK_ARGUMENT = re.compile(r"(?:notebooks/)?(?P<name>(?P<number>[0-9]{2})(?:-[A-Za-z0-9_-]*)?)(?:\.ipynb)?")
"""What --only (make's NB=) may be: a notebook's number, its name or the start of it, or its file."""


class SelectionError(ValueError):
    """--only names no single notebook of the folder; the message says what it accepts."""


def select_notebooks(only: str, notebooks: Path = NOTEBOOKS) -> list[Path]:
    """The notebooks of `notebooks` that `only` (--only, make's NB=) names: all of them when it is
    empty, else exactly one, named by its number ("06"), its name or the start of it ("06-grammars",
    "06-gram") or its file ("notebooks/06-grammars.ipynb").

    Raises SelectionError for anything else, before any notebook runs: a path outside notebooks/
    (`../../etc/passwd`), shell text (`00; rm -rf x`), spaces, a number or name that no notebook has,
    and one that two notebooks share (both named, so the learner can choose); the argument is never
    used as a path or a pattern, only compared with the notebooks' names.
    """
    paths = sorted(notebooks.glob("[0-9][0-9]-*.ipynb"))
    if only == "":
        return paths
    known = ", ".join(path.stem.split("-", 1)[0] for path in paths)
    match = _NOTEBOOK_ARGUMENT.fullmatch(only)
    if match is None:
        raise SelectionError(f"NB={only[:80]!r} is not a notebook: give one notebook's number (e.g. NB=06), its name "
                             f"(NB=06-grammars) or nothing for all of them; the notebooks are numbered {known}")
    name = match["name"]
    chosen = [path for path in paths if path.stem.split("-", 1)[0] == match["number"] and path.stem.startswith(name)]
    if not chosen:
        raise SelectionError(f"NB={only!r}: no notebook in {notebooks.name}/ is {name!r}; the notebooks are numbered {known}")
    if len(chosen) > 1:
        raise SelectionError(f"NB={only!r} names {len(chosen)} notebooks ({', '.join(path.name for path in chosen)}); "
                             "give the whole name of the one to run")
    return chosen


def first_line(text: str, width: int = 60) -> str:
    """The first non-empty line of `text` (a cell's source, a message), shortened to `width`."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= width else line[:width - 3] + "..."


def run_one(path: Path, target: Path, timeout: int) -> NotebookRun:
    """Execute `path` top to bottom in a fresh kernel and write the executed copy to `target`.

    Cell numbers count code and markdown cells from 0, as JupyterLab's cell list does.
    """
    notebook = nbformat.read(path, as_version=4)
    started: dict[int, float] = {}
    durations: dict[int, float] = {}

    def on_execute(cell, cell_index, **_):
        started[cell_index] = time.perf_counter()

    def on_executed(cell, cell_index, **_):
        durations[cell_index] = time.perf_counter() - started[cell_index]

    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(NOTEBOOKS)}},
                            on_cell_execute=on_execute, on_cell_executed=on_executed)
    start = time.perf_counter()
    try:
        client.execute()
        ok, error = True, ""
    except Exception as exc:  # a failed cell: keep the partial notebook to inspect
        ok = False
        if isinstance(exc, CellExecutionError):
            error = f"{exc.ename}: {exc.evalue}"
        else:  # a timeout or a dead kernel: the first line says which
            error = f"{type(exc).__name__}: {first_line(str(exc), 200) or 'no message'}"
        if started:
            index = max(started)  # the cell that was running when execution stopped
            error = f"cell {index} (`{first_line(notebook.cells[index].source)}`): {error}"
    seconds = time.perf_counter() - start
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(merge_streams(strip_widget_views(notebook)), target)  # keep stored outputs stable
    slowest = None
    if durations:
        index = max(durations, key=durations.get)
        slowest = (index, durations[index], first_line(notebook.cells[index].source))
    return NotebookRun(ok, seconds, error, slowest)


def run_in_place(path: Path, timeout: int, recordings: Path | None, build: Path = BUILD,
                 keep_earlier: bool = False) -> tuple[NotebookRun, str]:
    """Execute `path` and replace it (and, when `recordings` is a folder, this run's new recordings
    in it) only if every cell succeeded; returns the run and a line saying what was kept.

    The executed notebook is written beside the original (`<name>.ipynb.<run id>.new`) and
    renamed over it, so the notebook is never half-written; after a failure it moves to
    `build/<name>.ipynb` to inspect, and the committed notebook and recordings stay as they were.
    """
    executed = path.with_name(f"{path.name}.{run_id_setting()}{PENDING_SUFFIX}")
    run = run_one(path, executed, timeout)
    if run.ok:
        outcome = "outputs rewritten"
        if recordings is not None:
            outcome = f"recordings replaced: {', '.join(finish_pending(recordings, keep_earlier=keep_earlier)) or 'none (no model calls)'}"
        os.replace(executed, path)
        return run, outcome
    kept = discard_pending(recordings) if recordings is not None else []
    build.mkdir(parents=True, exist_ok=True)
    copy = build / path.name
    shutil.move(executed, copy)
    what = f"recordings ({', '.join(kept) or 'no new recording'}) and notebook" if recordings is not None else "notebook"
    return run, f"failed: {what} kept as they were; the executed copy with the error is {copy}"


def load_times() -> dict:
    """Live seconds saved by earlier runs (`make run`, setup/bench_course.py): build/course-times.json."""
    if TIMES.is_file():
        return json.loads(TIMES.read_text(encoding="utf-8"))
    return {"notebooks": {}}


def save_times(part: str, entry: dict) -> None:
    """Merge `entry` into build/course-times.json under `part` ("notebooks" or "server notebooks":
    {name: ...}, or "test")."""
    times = load_times()
    if part in ("notebooks", "server notebooks"):
        times.setdefault(part, {}).update(entry)
    else:
        times[part] = entry
    TIMES.parent.mkdir(parents=True, exist_ok=True)
    temporary = TIMES.with_name(f"{TIMES.name}.{os.getpid()}.tmp")  # two runs never write one temporary file
    temporary.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(TIMES)


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def main(argv: list[str] | None = None, notebooks: Path = NOTEBOOKS, recordings: Path = RECORDINGS_DIR,
         build: Path = BUILD) -> int:
    """The command line; `notebooks`, `recordings` and `build` are the folders it works in."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--record", action="store_true", help="WORKBOOK_MODE=record, write outputs in place")
    modes.add_argument("--update", action="store_true",
                       help="WORKBOOK_MODE=update (record only requests not yet recorded), write outputs in place")
    modes.add_argument("--refresh", action="store_true", help="WORKBOOK_MODE=replay, write outputs in place")
    parser.add_argument("--only", default="", help="run only this notebook: its number (06), name or file")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    try:  # before anything is set, locked or loaded
        paths = select_notebooks(args.only, notebooks)
    except SelectionError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 2
    mode = "record" if args.record else "update" if args.update else "replay" if args.refresh else "live"
    model_folder = BackendConfig.from_environment().files_key()
    if mode != "live" and model_folder is not None:  # before anything is set or written
        print(f"refused: the committed notebooks hold the default model's outputs, and WORKBOOK_MODEL chooses "
              f"{model_folder}; run the notebooks with it without --record, --update or --refresh (executed copies "
              "in build/), or unset WORKBOOK_MODEL", file=sys.stderr)
        return 2
    # The environment is how the mode and the run id reach the notebook kernels this run starts.
    os.environ["WORKBOOK_MODE"] = mode
    os.environ[RUN_ID_VARIABLE] = str(os.getpid())  # the kernels' new recordings belong to this run
    writing = args.record or args.update
    in_place = writing or args.refresh
    if not paths:
        print(f"no notebooks in {notebooks}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as locks:
        if in_place:  # every notebook this run writes, before any model time is spent
            try:
                for path in paths:
                    locks.enter_context(recording_lock(path.stem, recordings))
            except RecordingBusyError as error:
                print(f"refused: {error}", file=sys.stderr)
                return 2
        if writing:
            for name in discard_abandoned(recordings):
                print(f"removed an unfinished new recording of {name} left by a run that ended without finishing")
        rows = run_all(paths, mode, args.timeout, in_place, recordings if writing else None, build,
                       keep_earlier=args.update)
    width = max(len(name) for name, _ in rows)
    print(f"\n{'notebook':<{width}}  {'seconds':>8}  result")
    for name, run in rows:
        print(f"{name:<{width}}  {run.seconds:8.1f}  {'ok' if run.ok else 'FAILED'}")
        if run.error:
            print(f"    {run.error[:300]}")
    print(f"{'total':<{width}}  {sum(run.seconds for _, run in rows):8.1f}  "
          f"{sum(run.ok for _, run in rows)} of {len(rows)} ok")
    return 0 if all(run.ok for _, run in rows) else 1


def run_all(paths: list[Path], mode: str, timeout: int, in_place: bool, recordings: Path | None,
            build: Path, keep_earlier: bool = False) -> list[tuple[str, NotebookRun]]:
    """Execute each notebook with a progress line; in place (see `run_in_place`) or as a copy in `build`.

    `mode` is the WORKBOOK_MODE the kernels were given; live seconds are saved for bench_course.
    """
    print(f"mode: {mode}; executed copies in {'notebooks/' if in_place else build}")
    rows = []
    total_start = time.perf_counter()
    for number, path in enumerate(paths, start=1):
        print(f"[{number}/{len(paths)}] {path.name} ...", flush=True)
        if in_place:
            run, outcome = run_in_place(path, timeout, recordings, build, keep_earlier=keep_earlier)
        else:
            run, outcome = run_one(path, build / path.name, timeout), ""
        slowest = (f"; slowest cell {run.slowest_cell[0]} ({run.slowest_cell[1]:.1f} s): `{run.slowest_cell[2]}`"
                   if run.slowest_cell else "")
        print(f"[{number}/{len(paths)}] {path.name}: {run.seconds:.1f} s, {'ok' if run.ok else 'FAILED'}{slowest}"
              f" ({time.perf_counter() - total_start:.0f} s so far)", flush=True)
        if run.error:
            print(f"    {run.error[:300]}", flush=True)
        if outcome:
            print(f"    {outcome}", flush=True)
        if mode == "live":
            part = "notebooks" if backend_setting() == "embedded" else "server notebooks"
            save_times(part, {path.name: {"seconds": run.seconds, "ok": run.ok, "error": run.error,
                                          "date": utc_now()}})
        rows.append((path.name, run))
    return rows


if __name__ == "__main__":
    sys.exit(main())
