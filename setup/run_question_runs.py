"""Produce (or resume) the saved runs behind notebooks 06, 07, 08, 10 and 18-20 (see lib/question_runs.py).

    python setup/run_question_runs.py                              # every run, live model
    python setup/run_question_runs.py --run handbook-short-answers # one run
    python setup/run_question_runs.py --replay                     # answers from the notebooks' recordings

Each run appends to data/results/<run>.jsonl (data/results/models/<name>/ when WORKBOOK_MODEL
names a second pinned model) and skips the items already there, so an interrupted run resumes
where it stopped. A complete file is left as it is. Live runs take
the model tens of minutes on 2 cores (handbook-short-answers about 25, assistant-dev-fit
about 55, assistant-test about 20, assistant-test-past-boundary about 55); --replay reads the same model's recorded answers to the same requests instead, and the
header says which mode produced the file.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from lib.llm import BackendConfig
    from lib.question_runs import RUNS, load_run, produce
    from lib.results_store import results_dir_for

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", choices=list(RUNS), action="append", help="only this run (repeatable)")
    parser.add_argument("--replay", action="store_true", help="answer from the notebooks' recordings, not the model")
    args = parser.parse_args()
    mode = "replay" if args.replay else "live"
    results_dir = results_dir_for(BackendConfig.from_environment().files_key())  # a second model's beside the default's
    for name in args.run or list(RUNS):
        path = produce(name, mode=mode, results_dir=results_dir)
        header, rows = load_run(name, results_dir)
        seconds = [c for c in rows.columns if c.endswith("seconds")]
        model_seconds = sum(float(sum(x) if isinstance(x, list) else x) for c in seconds for x in rows[c])
        print(f"{path.name}: {len(rows)} of {header['items']} rows ({header['mode']}), "
              f"{model_seconds:.0f} model seconds", flush=True)


if __name__ == "__main__":
    main()
