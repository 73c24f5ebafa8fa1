"""Produce (or resume) the saved runs of notebook 05, the model calling tools (see lib/tool_runs.py).

    python setup/run_tools.py                                # both runs, live model
    python setup/run_tools.py --run tools-conversations      # one run

`tools-conversations` runs every committee case (notebook 04's ten dev cases, then the held-out
cases of data/corpus/tool_cases.jsonl) through the tool loop with the grammar, plus each case's
first turn without it; `tools-search-queries` asks the model for a handbook search query for each
dev question; `tools-asking-first` runs the held-out committees again with a first turn that must be a
question to the student. Each run appends to data/results/<run>.jsonl and skips the items already there, so
an interrupted run resumes where it stopped. A conversation costs the model tens of seconds on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from lib import get_llm
    from lib.embeddings import embed
    from lib.results_store import results_dir_for
    from lib.runs import load_item_run
    from lib.tool_runs import TOOL_RUNS, produce_tool_run

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", choices=list(TOOL_RUNS), action="append", help="only this run (repeatable)")
    args = parser.parse_args()
    llm = get_llm(mode="live")  # the runs' rows are their own record
    results_dir = results_dir_for(llm.config.files_key())  # a second model's beside the default's
    for name in args.run or list(TOOL_RUNS):
        path = produce_tool_run(name, llm, embed, results_dir=results_dir)
        header, rows = load_item_run(name, results_dir)
        seconds = sum(row["seconds"] for row in rows)
        print(f"{path.name}: {len(rows)} of {header['items']} rows; {seconds:.0f} model seconds", flush=True)


if __name__ == "__main__":
    main()
