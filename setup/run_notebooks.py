"""Execute the workbook's notebooks headless and print a table: notebook, seconds, ok/failed.

    python setup/run_notebooks.py                 # live: executed copies go to build/
    python setup/run_notebooks.py --record        # record: outputs and recordings are rewritten in place
    python setup/run_notebooks.py --update        # like --record, but answers already recorded for the same
                                                  # request are reused: only new requests call the model
    python setup/run_notebooks.py --refresh       # replay: outputs rewritten in place from the recordings
                                                  # and the current data/results (no model is loaded)
    python setup/run_notebooks.py --only 00-setup # one notebook (name prefix)

The mode reaches the notebooks through WORKBOOK_MODE; the committed notebooks are only
written in record or update mode, which is how their stored outputs and recordings are produced, or in
refresh mode, which updates the outputs after data/results/ has grown without calling the model.
A new recording replaces the old one only when its notebook ran without error.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from lib.recording import discard_pending, finish_pending  # noqa: E402  (after the path is set)

NOTEBOOKS = REPO / "notebooks"
BUILD = REPO / "build"


def run_one(path: Path, target: Path, timeout: int) -> tuple[bool, float, str]:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    start = time.perf_counter()
    try:
        client.execute()
        ok, error = True, ""
    except Exception as exc:  # a failed cell: keep the partial notebook to inspect
        ok, error = False, "".join(traceback.format_exception_only(type(exc), exc)).strip()
    seconds = time.perf_counter() - start
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return ok, seconds, error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--record", action="store_true", help="WORKBOOK_MODE=record, write outputs in place")
    modes.add_argument("--update", action="store_true",
                       help="WORKBOOK_MODE=update (record only requests not yet recorded), write outputs in place")
    modes.add_argument("--refresh", action="store_true", help="WORKBOOK_MODE=replay, write outputs in place")
    parser.add_argument("--only", default="", help="run only notebooks whose name starts with this")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per cell")
    args = parser.parse_args()
    os.environ["WORKBOOK_MODE"] = ("record" if args.record else "update" if args.update
                                   else "replay" if args.refresh else "live")
    writing = args.record or args.update
    in_place = writing or args.refresh
    if writing:
        for name in discard_pending():
            print(f"removed an unfinished new recording of {name} left by an interrupted run")
    paths = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]-*.ipynb") if p.name.startswith(args.only))
    if not paths:
        print(f"no notebooks match {args.only!r} in {NOTEBOOKS}", file=sys.stderr)
        return 2
    print(f"mode: {os.environ['WORKBOOK_MODE']}; executed copies in {'notebooks/' if in_place else 'build/'}")
    rows = []
    for path in paths:
        target = path if in_place else BUILD / path.name
        print(f"  running {path.name} ...", flush=True)
        ok, seconds, error = run_one(path, target, args.timeout)
        if writing and ok:
            finished = finish_pending()
            print(f"    recordings replaced: {', '.join(finished) or 'none (no model calls)'}")
        elif writing:
            kept = discard_pending()
            print(f"    failed: recordings kept as they were ({', '.join(kept) or 'no new recording'})")
        rows.append((path.name, seconds, ok, error))
    width = max(len(name) for name, *_ in rows)
    print(f"\n{'notebook':<{width}}  {'seconds':>8}  result")
    for name, seconds, ok, error in rows:
        print(f"{name:<{width}}  {seconds:8.1f}  {'ok' if ok else 'FAILED'}")
        if error:
            print(f"    {error.splitlines()[-1][:300]}")
    return 0 if all(ok for _, _, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
