"""Make (or resume) the saved runs under data/results/: the one command for all of them (see lib/saved_runs/registry.py).

    python setup/run_saved.py --list                        # every saved run: family, notebooks, inputs, how far it got
    python setup/run_saved.py                               # every run, in the registry's order (make results)
    python setup/run_saved.py --run handbook-short-answers  # one run (repeatable)
    python setup/run_saved.py --family drift                # every run of a family
    python setup/run_saved.py --run banking77-knn-test --limit 50
    python setup/run_saved.py --run committees-one-call --replay   # answers from notebook 04's recording

Each run appends to data/results/<run>.jsonl (data/results/models/<name>/ when WORKBOOK_MODEL names
a second pinned model) and skips what is already there, so an interrupted run resumes where it
stopped; a complete file is left as it is. Runs use the live model whatever WORKBOOK_MODE says (a
saved run is its own record); --replay answers from the notebooks' recordings instead, for the runs
that have them, and the header says which mode produced the file. Live, the whole set takes hours
on 2 cores: the committees minutes, the tool conversations about an hour, the BANKING77 and
CLINC150 decisions and the drift settings hours each. After the drift runs, their table is printed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.saved_runs.drift import ANSWER, DECISION  # noqa: E402
from lib.saved_runs.registry import FAMILIES, RUNS, SavedRun, produce, saved_rows  # noqa: E402
from lib.saved_runs.store import RUN_SCRIPT, run_command  # noqa: E402


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def progress_text(run: SavedRun, results_dir: Path) -> str:
    """How far a run's file got: "missing", or its rows (of the items its header names) and failures."""
    saved = saved_rows(run, results_dir)
    if saved is None:
        return "missing"
    rows, failures, total = saved
    return (f"{rows} rows" + (f" of {total}" if total is not None else "")
            + (f", {failures} failures" if failures else ""))


def list_runs(results_dir: Path) -> None:
    """Print the registry: one line per run, then how to make one."""
    rows = [(run.name, run.family, ",".join(run.notebooks), ", ".join(run.inputs) or "-",
             "yes" if run.replayable else "no", progress_text(run, results_dir)) for run in RUNS]
    titles = ("run", "family", "notebooks", "reads", "replay", "saved")
    widths = [max(len(str(row[i])) for row in [titles, *rows]) for i in range(len(titles))]
    for row in [titles, *rows]:
        print("  ".join(str(value).ljust(width) for value, width in zip(row, widths)).rstrip())
    print(f"\n{len(RUNS)} saved runs in {results_dir}: make or resume one with `{run_command('NAME', results_dir)}`, "
          "all of them with `make results`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list every saved run and how far it got; make nothing")
    parser.add_argument("--run", choices=[run.name for run in RUNS], action="append", metavar="NAME",
                        help="only this run (repeatable; --list names them)")
    parser.add_argument("--family", choices=FAMILIES, action="append", help="only the runs of this family")
    parser.add_argument("--replay", action="store_true", help="answer from the notebooks' recordings, not the model")
    parser.add_argument("--limit", type=positive_int, help="at most LIMIT more items per run this time "
                        "(decision and drift runs)")
    parser.add_argument("--retry-failures", action="store_true", help="decide again the messages saved as failure "
                        "rows (decision runs; e.g. after giving the server a larger context)")
    parser.add_argument("--workers", type=positive_int, default=1, help="concurrent requests (decision runs on a "
                        "server backend)")
    parser.add_argument("--threads", type=positive_int, help="CPU threads of the embedded model (default: "
                        "WORKBOOK_THREADS); on a machine busy with other work, 1 thread avoids llama.cpp's threads "
                        "waiting on each other. Drift settings bring their own")
    parser.add_argument("--kinds", nargs="+", choices=[DECISION, ANSWER], help="only the drift requests of these "
                        "kinds this time")
    args = parser.parse_args(argv)

    from lib.backends.factory import BackendConfig
    from lib.saved_runs.drift import drift_table
    from lib.saved_runs.store import results_dir_for

    results_dir = results_dir_for(BackendConfig.from_environment().files_key())  # a second model's beside the default's
    if args.list:
        list_runs(results_dir)
        return 0
    selected = [run for run in RUNS if (args.run is None or run.name in args.run)
                and (args.family is None or run.family in args.family)]
    if not selected:
        parser.error(f"no saved run matches --run and --family together (python {RUN_SCRIPT} --list)")
    if args.replay and not all(run.replayable for run in selected):
        if args.run is not None:
            parser.error(f"--replay: {', '.join(run.name for run in selected if not run.replayable)} "
                         "have no recordings to replay; run them live")
        selected = [run for run in selected if run.replayable]  # every run that can replay
    for run in selected:
        path = produce(run.name, mode="replay" if args.replay else "live", threads=args.threads,
                       results_dir=results_dir, limit=args.limit, workers=args.workers,
                       retry_failures=args.retry_failures, kinds=tuple(args.kinds) if args.kinds else None)
        print(f"{path.name}: {progress_text(run, results_dir)} saved", flush=True)
    if any(run.family == "drift" for run in selected):
        print(drift_table(results_dir=results_dir).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
