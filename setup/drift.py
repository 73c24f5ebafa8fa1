"""Re-run a sample of recorded calls live and print how far today's answers drift from the recordings.

    python setup/drift.py              # up to 20 calls per recording file
    python setup/drift.py --sample 50
    python setup/drift.py --sample 5 --save   # also write data/results/drift.jsonl (read by notebook 06)

Drift comes from a different llama.cpp build, CPU instruction set or thread count: texts
usually stay the same while log-probabilities move in the third or fourth decimal.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import shlex
import sys

from lib.llm import BackendConfig
from lib.recording import RECORDINGS_DIR, RecordingStore, create_backend, decode_answer
from lib.results_store import RESULTS_DIR
from lib.settings import threads_setting

DRIFT_FILE = RESULTS_DIR / "drift.jsonl"
WHAT = ("recorded calls re-run live; per recording: calls re-run, answers whose text (or top token) changed, "
        "largest absolute change of a token probability")


def save(rows: list[tuple[str, int, int, float]], args: argparse.Namespace, identity: str, backend: str) -> None:
    """Write `DRIFT_FILE` whole: a header naming the command, then one row per recording.

    The file is written beside its final name and moved over it only when complete, so an
    interrupted run leaves the old measurement as it was.
    """
    command = " ".join(["python", "setup/drift.py", *map(shlex.quote, sys.argv[1:])])
    if backend == "embedded":  # the thread count the model computed with, so the command repeats the run
        command = f"WORKBOOK_THREADS={threads_setting()} {command}"
    header = {"backend": backend, "command": command, "date": datetime.date.today().isoformat(), "kind": "header",
              "model": identity, "recordings": len(rows), "run": "drift", "sample_per_recording": args.sample,
              "seed": args.seed, "what": WHAT}
    lines = [json.dumps(header, sort_keys=True)] + [
        json.dumps({"calls": count, "kind": "row", "max_abs_probability_change": worst, "recording": name,
                    "text_changed": changed}, sort_keys=True)
        for name, count, changed, worst in rows]
    pending = DRIFT_FILE.with_name(DRIFT_FILE.name + f".{os.getpid()}.tmp")
    pending.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(pending, DRIFT_FILE)
    print(f"saved {len(rows)} rows to {DRIFT_FILE.relative_to(RESULTS_DIR.parent.parent)}")


def _logprob_pairs(method: str, old, new) -> list[tuple[float, float]]:
    """Matching (recorded, live) log-probabilities of the same tokens in two answers."""
    if method == "chat":
        pairs = []
        for old_step, new_step in zip(old.tokens, new.tokens):
            if old_step.token != new_step.token:
                break
            pairs.append((old_step.logprob, new_step.logprob))
            live = dict(new_step.top)
            pairs += [(lp, live[t]) for t, lp in old_step.top if t in live]
        return pairs
    if method == "next_token_logprobs":
        live = {**dict(new.top), **new.scores}
        return [(lp, live[t]) for t, lp in (*old.top, *old.scores.items()) if t in live]
    return []


def _texts_differ(method: str, old, new) -> bool:
    if method == "chat":
        return old.text != new.text
    if method == "next_token_logprobs":
        return bool(old.top) and bool(new.top) and old.top[0][0] != new.top[0][0]
    return old != new


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", type=int, default=20, help="calls per recording file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", action="store_true", help=f"write the table to {DRIFT_FILE.name} in data/results/")
    args = parser.parse_args()
    config = BackendConfig.from_environment()
    backend = create_backend(config)
    rows = []
    for path in sorted(RECORDINGS_DIR.glob("*.jsonl")):
        store = RecordingStore(path.stem)
        if store.header and store.header.get("model") != config.identity():
            print(f"{path.name}: recorded with {store.header.get('model')}, skipped (not the configured model)")
            continue
        calls = [c for c in store.calls() if c["method"] != "info"]
        sample = random.Random(args.seed).sample(calls, min(args.sample, len(calls)))
        changed, worst = 0, 0.0
        for call in sample:
            method = call["method"]
            old = decode_answer(method, call["answer"])
            new = getattr(backend, method)(**call["request"])
            changed += _texts_differ(method, old, new)
            for recorded, live in _logprob_pairs(method, old, new):
                worst = max(worst, abs(math.exp(recorded) - math.exp(live)))
        rows.append((path.stem, len(sample), changed, worst))
    print(f"\n{'recording':<28} {'calls':>5} {'text changed':>12} {'max |Δp|':>9}")
    for name, count, changed, worst in rows:
        print(f"{name:<28} {count:>5} {changed:>12} {worst:>9.5f}")
    if rows:
        print(f"\nlargest probability change overall: {max(r[3] for r in rows):.5f}; "
              f"answers whose text (or top token) changed: {sum(r[2] for r in rows)} of {sum(r[1] for r in rows)}")
    if args.save:
        save(rows, args, config.identity(), config.backend)


if __name__ == "__main__":
    main()
