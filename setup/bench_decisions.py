"""How close are the decisions to what the hardware allows? Ratios measured side by side in one run.

1. Full-list decision vs its floor. The floor of one decision is the work it cannot avoid:
   evaluating the tokens after the cached system prompt (the message and the chat
   template) at the measured prompt throughput, plus one decoding step per token of the
   code at the measured per-token decode time. Target: median decision time <= 1.3x floor.
2. Shortlist decision (one ordering, no calibration) vs the same request without the
   prefix cache: before each uncached request the backend's cached prefix is dropped, so
   the instruction and examples are evaluated again, as a server without prompt caching
   would. The two are interleaved message by message so that load on the machine hits
   both alike. Target: cached / uncached <= 0.6.

    python setup/bench_decisions.py [--n 15]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=15, help="messages per measurement")
    args = parser.parse_args()

    from lib import get_llm
    from lib.decisions import FullListDecider, ShortlistDecider, embedded_backend
    from lib.datasets import load_label_groups
    from lib.indexes import IntentRetriever
    from lib.runs import load_split, training_pool

    llm = get_llm(mode="live")  # whatever WORKBOOK_MODE says: this measures the model
    backend = embedded_backend(llm)
    if backend is None:
        sys.exit("this benchmark drives the embedded model; unset WORKBOOK_BACKEND")
    groups = load_label_groups("banking77")
    texts = load_split("banking77", "calibration").sample(args.n, random_state=0)["text"].tolist()
    full = FullListDecider(llm, groups)
    full.decide("warm up the cache")

    # prompt throughput (on batches as long as a typical message) and per-token decode time,
    # measured on top of the cached system prompt
    lengths = []
    for text in texts:
        ids, shared = backend.prompt_ids(full.messages(text))
        lengths.append(len(ids) - shared)
    cached = ids[:shared]
    filler = backend.token_ids(" ".join(texts))[: int(np.median(lengths))]
    throughput, decode = [], []
    for _ in range(5):
        start = time.perf_counter()
        backend.evaluate(cached + filler, shared=len(cached))
        throughput.append(len(filler) / (time.perf_counter() - start))
        continuation = backend.continuation(full.messages(texts[0]), reserve=8)
        start = time.perf_counter()
        for end in range(1, 9):
            continuation.after(filler[:end])  # one decoding step each
        decode.append((time.perf_counter() - start) / 8)
    tokens_per_second, seconds_per_token = float(np.median(throughput)), float(np.median(decode))

    full_seconds, floors = [], []
    for text, length in zip(texts, lengths):
        floors.append(length / tokens_per_second + 2 * seconds_per_token)
        full_seconds.append(full.decide(text).seconds)

    shortlist = ShortlistDecider(llm, IntentRetriever(training_pool("banking77")), groups,
                                 n_orders=1, calibrate=False, debias="none")
    shortlist.decide("warm up the cache")
    cached_seconds, uncached_seconds = [], []
    for text in texts:
        cached_seconds.append(shortlist.decide(text).seconds)
        backend.clear_cache()  # forget the cached instruction and examples
        uncached_seconds.append(shortlist.decide(text).seconds)
    messages = shortlist.messages(["card_arrival"] * 8, texts[0])
    prefix_tokens = len(backend.prompt_ids(messages)[0]) - len(backend.token_ids(messages[-1]["content"]))

    print(f"prompt throughput {tokens_per_second:.0f} tokens/s, decode {1000 * seconds_per_token:.0f} ms/token "
          f"({os.cpu_count()} CPUs, {backend.n_threads} threads)")
    print(f"full list: median {np.median(full_seconds):.3f} s/decision, floor {np.median(floors):.3f} s "
          f"-> ratio {np.median(full_seconds) / np.median(floors):.2f} (target <= 1.3)")
    print(f"shortlist, one ordering: cached {np.median(cached_seconds):.3f} s, without the prefix cache "
          f"{np.median(uncached_seconds):.3f} s (about {prefix_tokens} prefix tokens) -> ratio "
          f"{np.median(cached_seconds) / np.median(uncached_seconds):.2f} (target <= 0.6)")


if __name__ == "__main__":
    main()
