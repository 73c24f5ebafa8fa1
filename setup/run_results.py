"""Produce (or resume) the saved decision results under data/results/.

    python setup/run_results.py                       # every run, in the shipped order
    python setup/run_results.py --task banking77 --method full --split test
    python setup/run_results.py --method knn --limit 50

Each (task, method, split) appends to data/results/{task}-{method}-{split}.jsonl and skips
the messages already there, so an interrupted run resumes where it stopped. With WORKBOOK_MODEL
naming a second pinned model, the files go to data/results/models/<name>/ instead. LLM methods use
the live model whatever WORKBOOK_MODE says (results files are their own record). With a
server backend (WORKBOOK_BACKEND=openai), --workers N sends N requests at once.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.runs import BASELINE_METHODS, LLM_METHODS, METHODS, SPLITS, TASKS  # noqa: E402

FULL, SHORTLIST = LLM_METHODS
RUNS = [  # (task, method, split), cheapest first
    *[(task, method, split) for method in BASELINE_METHODS for task in TASKS for split in SPLITS],
    *[("banking77", FULL, split) for split in SPLITS],
    *[(task, SHORTLIST, split) for task in TASKS for split in SPLITS],
]


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=TASKS, help="only this task")
    parser.add_argument("--method", choices=METHODS, help="only this method")
    parser.add_argument("--split", choices=SPLITS, help="only this split")
    parser.add_argument("--limit", type=positive_int, help="only the first LIMIT messages of each split")
    parser.add_argument("--retry-failures", action="store_true", help="decide again the messages saved as "
                        "failure rows (e.g. after giving the server a larger context)")
    parser.add_argument("--workers", type=positive_int, default=1, help="concurrent requests (server backend only)")
    parser.add_argument("--threads", type=int, help="CPU threads of the embedded model (default: all); on a "
                        "machine busy with other work, 1 thread avoids llama.cpp's threads waiting on each other")
    args = parser.parse_args()

    from lib import get_llm
    from lib.llm import BackendConfig, EmbeddedLLM
    from lib.results_store import results_dir_for
    from lib.runs import load_results, run_split

    config = BackendConfig.from_environment()
    if args.threads is not None and config.backend != "embedded":
        parser.error("--threads applies to the embedded model only")
    results_dir = results_dir_for(config.files_key())  # a second model's runs sit beside the default's
    llm = None
    selected = [run for run in RUNS if (args.task in (None, run[0]) and args.method in (None, run[1])
                                        and args.split in (None, run[2]))]
    if not selected:
        parser.error("no shipped run matches these options")
    for task, method, split in selected:
        if llm is None and method in LLM_METHODS:  # the live model; with --threads, the thread count chosen
            llm = get_llm(mode="live") if args.threads is None else EmbeddedLLM(n_threads=args.threads)
        path = run_split(task, split, method, llm=llm, limit=args.limit, workers=args.workers,
                         retry_failures=args.retry_failures, results_dir=results_dir)
        frame = load_results(task, split, method, results_dir)
        failed = len(frame.attrs["failures"])
        print(f"{path.name}: {len(frame)} rows, accuracy {frame['correct'].sum() / (len(frame) + failed):.3f} "
              f"(failures count as wrong: {failed}), median {frame['seconds'].median():.2f} s/message", flush=True)


if __name__ == "__main__":
    main()
