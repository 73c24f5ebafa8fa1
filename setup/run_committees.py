"""Extract every committee case (ten dev, ten held-out test) with the model and save the extractions under data/results/.

    python setup/run_committees.py                        # every method (resumes what is there)
    python setup/run_committees.py --method by-questions  # one method
    python setup/run_committees.py --replay 04-symbolic-checks --method one-call

Each method appends one JSON line per case to data/results/committees-{method}.jsonl, after a
header naming the model, the prompt fingerprint and this command; an interrupted run resumes
where it stopped. Notebook 04 reads these files for its tables. With --replay NAME,
answers come from data/recordings/NAME.jsonl (recorded from the same model for the identical
requests) instead of the live model; a request that was never recorded stops the run.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.extraction import COMMITTEE_METHODS, committee_prompt_fingerprint, load_committee_run, run_committee_cases  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=COMMITTEE_METHODS, help="only this method")
    parser.add_argument("--replay", metavar="RECORDING", help="answer from this recording instead of the live model")
    args = parser.parse_args()

    from lib import get_llm
    from lib.datasets import CORPUS_DIR
    from lib.llm import library_versions
    from lib.rules import check_committee

    cases = [json.loads(line) for line in (CORPUS_DIR / "committee_cases.jsonl").read_text(encoding="utf-8").splitlines()]
    from lib.extraction import committee_run_path
    from lib.results_store import remake_command, results_dir_for

    llm = get_llm(recording=args.replay, mode="replay" if args.replay else "live")  # whatever WORKBOOK_MODE says
    results_dir = results_dir_for(llm.config.files_key())  # a second model's runs beside the default's
    command = remake_command(" ".join(["python setup/run_committees.py", *sys.argv[1:]]), results_dir)
    for method in [args.method] if args.method else COMMITTEE_METHODS:
        header = {"model": llm.identity, "backend": llm.backend_name, "fingerprint": committee_prompt_fingerprint(method),
                  "command": command, "method": method, "versions": library_versions(),
                  "date": datetime.date.today().isoformat()}
        path = run_committee_cases(llm, method, cases, header=header, path=committee_run_path(method, results_dir))
        run = load_committee_run(method, results_dir)
        right = sum(run.members[c["id"]] is not None and
                    check_committee(run.members[c["id"]], c["home_department"]).violated_rules == c["expected_violations"]
                    for c in cases if c["id"] in run.members)
        print(f"{path.name}: {len(run.members)} of {len(cases)} cases; right verdict for the right rules: {right}; "
              f"model seconds {sum(row['seconds'] for row in run.rows.values()):.0f}", flush=True)


if __name__ == "__main__":
    main()
