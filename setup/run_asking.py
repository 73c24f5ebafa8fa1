"""Produce (or resume) the saved runs of notebook 09, asking the model (see lib/asking.py).

    python setup/run_asking.py                                   # every run, live model
    python setup/run_asking.py --run asking-handbook             # one run

For each saved answer (the full-list decider's BANKING77 decisions, the 60 grounded handbook
answers) the model is asked three ways how sure it is: a number from 0 to 100, a word from a
closed list, and P(True). Each run appends to data/results/<run>.jsonl and skips the items already
there, so an interrupted run resumes where it stopped; a complete file is left as it is. On 2
cores each answer costs the model a few seconds (the runs' rows keep the seconds of each way).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from lib.asking import ASKING_RUNS, produce_asking_run
    from lib.llm import BackendConfig
    from lib.question_runs import load_run
    from lib.results_store import results_dir_for

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", choices=list(ASKING_RUNS), action="append", help="only this run (repeatable)")
    args = parser.parse_args()
    results_dir = results_dir_for(BackendConfig.from_environment().files_key())  # a second model's beside the default's
    for name in args.run or list(ASKING_RUNS):
        path = produce_asking_run(name, results_dir=results_dir)
        header, rows = load_run(name, results_dir)
        seconds = {way: rows[f"{way}_seconds"].sum() / len(rows) for way in ("number", "category", "p_true")}
        print(f"{path.name}: {len(rows)} of {header['items']} rows; model seconds per answer: "
              + ", ".join(f"{way} {value:.2f}" for way, value in seconds.items()), flush=True)


if __name__ == "__main__":
    main()
