"""Classroom speed against the workbook's targets, printed side by side in one run.

    python setup/bench_course.py               # every notebook live, the test command, the install log
    python setup/bench_course.py --only 00     # notebooks whose name starts with 00 (and the rest)
    python setup/bench_course.py --reuse       # take what an earlier run measured, measure only the rest
    python setup/bench_course.py --skip test   # leave out a part: notebooks, test or install

Targets: each notebook re-executes live in at most 150 s (its model calls at most 120 s), all of
them (`make run`) in at most 20 minutes, `make test` on a fresh clone in at most 240 s (4 minutes)
and again at most 180 s, and a fresh install in at most 10 minutes. A notebook's model time is its
live run minus a replay of it (the same cells, answers read from its recording, no model loaded),
both measured in this run.

`make test` is measured as a newcomer meets it: in a fresh clone of this checkout (build/fresh-clone:
`git clone`, then this working tree's uncommitted changes laid over it), after `make setup` there
(which finds this .venv and model, linked in, and embeds the training pools itself), once cold
(nothing compiled or cached by a test run yet) and once warm, with the whole command timed
(setup's checks and ruff included).
Measurements are saved to build/course-times.json; `make run` adds its live seconds there too,
so `--reuse` can print them without running anything again.
The install seconds come from .venv/.install-times, which setup/install.sh writes.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_notebooks import NOTEBOOKS, REPO, load_times, run_one, save_times, utc_now  # noqa: E402

NOTEBOOK_TARGET = 150.0  # seconds, one notebook top to bottom, live
MODEL_TARGET = 120.0  # seconds of model calls within one notebook
RUN_TARGET = 20 * 60.0  # seconds, every notebook (`make run`)
TEST_TARGET = 240.0  # seconds, the first `make test` on a fresh clone after `make setup` (4 minutes on 2 cores)
WARM_TEST_TARGET = 180.0  # seconds, `make test` again on the same clone
INSTALL_TARGET = 10 * 60.0  # seconds, a fresh install (packages and model)
INSTALL_TIMES = REPO / ".venv" / ".install-times"
RECORDINGS = REPO / "data" / "recordings"
CLONE = REPO / "build" / "fresh-clone"
PARTS = ("notebooks", "test", "install")


def machine() -> str:
    """Cores, memory and the current load: the targets assume 2 cores, and the machine may be shared."""
    cores = os.cpu_count() or 1
    memory = ""
    try:
        total_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                        if line.startswith("MemTotal:"))
        memory = f", {total_kb / 1024 ** 2:.0f} GB RAM"
    except (OSError, StopIteration):
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load average {os.getloadavg()[0]:.1f}"
    return f"{cores} cores{memory}, {platform.system()} {platform.machine()}{load}"


def replay_seconds(path: Path) -> float | None:
    """Seconds the notebook takes in replay mode: all of its work except the model's (no model is loaded).

    A live run minus this is the notebook's model time, both measured on this machine now.
    None when the notebook makes no model calls (it has no recording) or its replay failed.
    """
    if not (RECORDINGS / f"{path.stem}.jsonl").is_file():
        return None
    os.environ["WORKBOOK_MODE"] = "replay"  # for the notebook kernel run_one starts, which inherits the environment
    try:
        run = run_one(path, REPO / "build" / "replay" / path.name, timeout=3600)
    finally:
        os.environ["WORKBOOK_MODE"] = "live"
    return run.seconds if run.ok else None


def read_install_times(path: Path = INSTALL_TIMES) -> tuple[str, dict[str, float]]:
    """The header line and per-step seconds that setup/install.sh logged (empty when there is no log)."""
    if not path.is_file():
        return "", {}
    header, steps = "", {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            header = line.lstrip("# ").strip()
        elif "\t" in line:
            name, seconds = line.split("\t", 1)
            steps[name] = float(seconds)
    return header, steps


def git(*arguments: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *arguments], cwd=cwd, check=True, capture_output=True, text=True).stdout


def fresh_clone(target: Path = CLONE) -> Path:
    """`target` as a fresh clone of this checkout, with this working tree's uncommitted changes and
    new files laid over it and its deletions made, and this checkout's .venv and model linked in
    (what `make setup` would install again, minutes and 3 GB): nothing a test run leaves behind
    (compiled modules, embedded pools, build/) is there."""
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "--quiet", str(REPO), str(target))
    changed = [name for name in git("ls-files", "-z", "--modified", "--others", "--exclude-standard").split("\0") if name]
    for name in changed:
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    for name in (name for name in git("ls-files", "-z", "--deleted").split("\0") if name):
        (target / name).unlink(missing_ok=True)
    (target / ".venv").symlink_to(REPO / ".venv")
    (target / ".cache").mkdir()
    (target / ".cache" / "models").symlink_to(REPO / ".cache" / "models")
    return target


def timed_make(target: str, clone: Path) -> dict:
    """Run `make <target>` in `clone` (its own lib first on every process's path) and time the whole command."""
    environment = {**os.environ, "PYTHONPATH": str(clone)}  # the editable install points at this checkout
    start = time.perf_counter()
    result = subprocess.run(["make", target], cwd=clone, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    lines = [line for line in result.stdout.strip().splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else result.stderr.strip()[-300:]
    if result.returncode != 0:
        summary = f"FAILED (exit {result.returncode}): {summary}"
    return {"seconds": seconds, "ok": result.returncode == 0, "summary": summary}


def installed_is_current() -> bool:
    """Whether .venv was installed from this checkout's pyproject.toml and setup files (the stamp
    setup/install.sh writes): otherwise `make setup` in the clone would reinstall the shared .venv."""
    files = [REPO / "pyproject.toml", REPO / "setup" / "install.sh", REPO / "setup" / "llama_cpp_no_common.cmake"]
    want = hashlib.sha256(b"".join(path.read_bytes() for path in files)).hexdigest()[:16]
    stamp = REPO / ".venv" / ".installed"
    return stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == want


def measure_test() -> dict:
    """`make test` on a fresh clone after its `make setup`: cold (the first run), then warm (the second)."""
    if not installed_is_current():
        failed = {"seconds": 0.0, "ok": False, "summary": "not measured: .venv is older than pyproject.toml or "
                  "setup/install.sh; run `make setup` here first"}
        return {"cold": failed, "warm": failed, "setup_seconds": None}
    clone = fresh_clone()
    setup = timed_make("setup", clone)
    if not setup["ok"]:
        return {"cold": setup, "warm": setup, "setup_seconds": setup["seconds"]}
    cold = timed_make("test", clone)
    warm = timed_make("test", clone)
    shutil.rmtree(clone)
    return {"cold": cold, "warm": warm, "setup_seconds": setup["seconds"]}


def verdict(seconds: float, target: float) -> str:
    return f"{seconds / target:5.2f}  {'ok' if seconds <= target else 'OVER'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="notebooks whose name starts with this (default: all)")
    parser.add_argument("--reuse", action="store_true",
                        help="print measurements saved by earlier runs; measure only what is missing")
    parser.add_argument("--skip", action="append", default=[], choices=PARTS, help="leave out a part")
    parser.add_argument("--install-log", type=Path, default=INSTALL_TIMES,
                        help="the install log to read (default: .venv/.install-times)")
    args = parser.parse_args()

    paths = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]-*.ipynb") if p.name.startswith(args.only))
    if "notebooks" not in args.skip and not paths:
        print(f"no notebooks match {args.only!r} in {NOTEBOOKS}", file=sys.stderr)
        return 2
    saved = load_times()
    print(f"machine: {machine()}")
    width = max([len(p.name) for p in paths] + [24])

    def row(name: str, seconds: float, target: float, note: str = "") -> None:
        line = f"{name:<{width}}  {seconds:8.1f}  {target:7.0f}  {verdict(seconds, target)}  {note}"
        print(line.rstrip(), flush=True)

    print(f"\n{'what':<{width}}  {'seconds':>8}  {'target':>7}  ratio  result")
    if "notebooks" not in args.skip:
        os.environ["WORKBOOK_MODE"] = "live"  # for the notebook kernels run_one starts, which inherit the environment
        total, measured = 0.0, 0
        for path in paths:
            entry = saved["notebooks"].get(path.name) if args.reuse else None
            origin = f"saved {entry['date']}" if entry else "measured now"
            if entry is None:
                run = run_one(path, REPO / "build" / path.name, timeout=3600)
                entry = {"seconds": run.seconds, "ok": run.ok, "error": run.error, "date": utc_now(),
                         "replay_seconds": replay_seconds(path)}
                save_times("notebooks", {path.name: entry})
            notes = [] if entry["ok"] else [f"FAILED in {entry['error'][:120]}"]
            replay = entry.get("replay_seconds")
            if replay is not None:
                model = max(entry["seconds"] - replay, 0.0)
                notes.append(f"model {model:.0f} s (live minus replay, {replay:.0f} s), target {MODEL_TARGET:.0f} "
                             f"({'ok' if model <= MODEL_TARGET else 'OVER'})")
            row(f"{path.name} live", entry["seconds"], NOTEBOOK_TARGET, "; ".join(notes + [origin]))
            total += entry["seconds"]
            measured += 1
        every = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
        label = "make run (all notebooks)" if measured == len(every) else f"{measured} of {len(every)} notebooks"
        row(label, total, RUN_TARGET if measured == len(every) else RUN_TARGET * measured / len(every),
            "" if measured == len(every) else "target scaled to the share of notebooks")
    if "test" not in args.skip:
        entry = saved.get("test") if args.reuse else None
        origin = f"saved {entry['date']}" if entry else "measured now"
        if entry is None:
            entry = {**measure_test(), "date": utc_now()}
            save_times("test", entry)
        if "cold" not in entry:  # saved by an earlier version of this script, before the clone
            entry = {"cold": entry, "warm": entry, "setup_seconds": None}
        row("make test, fresh clone", entry["cold"]["seconds"], TEST_TARGET,
            f"{entry['cold']['summary']}; after its make setup ({entry['setup_seconds'] or 0:.0f} s); {origin}")
        row("make test, again", entry["warm"]["seconds"], WARM_TEST_TARGET, f"{entry['warm']['summary']}; {origin}")
    if "install" not in args.skip:
        header, steps = read_install_times(args.install_log)
        if not steps:
            print(f"{'install':<{width}}  no log in {args.install_log}: "
                  f"it is written by a fresh install (rm .venv/.installed && make setup)")
        else:
            parts = " + ".join(f"{name} {seconds:.0f}" for name, seconds in steps.items())
            complete = "model" in steps
            row("install" if complete else "install (model not timed)", sum(steps.values()), INSTALL_TARGET,
                f"{parts}; {header}")
    print(f"\nmachine at the end: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
