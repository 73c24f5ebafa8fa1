"""Re-run a sample of recorded calls live and print how far today's answers drift from the recordings.

    python setup/drift.py              # up to 20 calls per recording file
    python setup/drift.py --sample 50

Drift comes from a different llama.cpp build, CPU instruction set or thread count: texts
usually stay the same while log-probabilities move in the third or fourth decimal.
"""
from __future__ import annotations

import argparse
import math
import random

from lib.llm import BackendConfig
from lib.recording import RECORDINGS_DIR, RecordingStore, create_backend, decode_answer


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


if __name__ == "__main__":
    main()
