"""Run the same requests under several runtime settings and print how far the answers move (`lib.drift`).

    python setup/drift.py                          # run or resume every setting, then print the table
    python setup/drift.py --settings base server   # only these settings
    python setup/drift.py --settings cold --limit 20 --kinds answer
    python setup/drift.py --table                  # only print the table of the saved runs

Each setting is a resumable saved run, data/results/drift-{setting}.jsonl, read by notebook 07.
Threads and batch size come from the setting (not WORKBOOK_THREADS). The server setting starts
`python -m llama_cpp.server` on 127.0.0.1 with the same model file and stops it afterwards.
The whole measurement takes hours on 2 cores: the cold setting computes the 77-intent system
prompt again for every decision.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lib.drift import ANSWER, DECISION, SETTINGS, drift_table, run_setting, setting_named  # noqa: E402


def run(name: str, limit: int | None, kinds: list[str] | None) -> None:
    """Build the backend `name` asks for, run the setting on it, and release it."""
    setting = setting_named(name)
    if setting.server:
        from lib.openai_compatible import OpenAICompatibleLLM
        from setup.llama_server import running_server

        with running_server(threads=setting.threads) as server:
            run_setting(setting, OpenAICompatibleLLM(server.base_url, server.model), limit=limit, kinds=kinds)
        return
    from lib.llm import EmbeddedLLM

    run_setting(setting, EmbeddedLLM(n_threads=setting.threads, n_batch=setting.batch), limit=limit, kinds=kinds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=[s.name for s in SETTINGS],
                        choices=[s.name for s in SETTINGS], help="settings to run (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many requests per setting this time")
    parser.add_argument("--kinds", nargs="+", choices=[DECISION, ANSWER], default=None,
                        help="run only requests of these kinds this time")
    parser.add_argument("--table", action="store_true", help="only print the table of the saved runs")
    args = parser.parse_args()
    if not args.table:
        for name in args.settings:
            run(name, args.limit, args.kinds)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(drift_table())


if __name__ == "__main__":
    main()
