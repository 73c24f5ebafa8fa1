"""How close are the decisions to what the hardware allows? Ratios measured side by side in one run.

Every LLM decider's seconds per decision are set against its floor, the work it cannot
avoid: the new prompt tokens (those not already in the KV cache: after the cached system
prompt or instruction and examples, each token the decision's prompts share counted once)
at the prompt throughput measured in this run, plus its decoding steps at the measured time
per step. Throughput depends on how many tokens go through the model in one batch and on how
long a context they attend to, so each decider's throughput is measured after its own cached
prefix, with its median new tokens as one batch: the fastest way to evaluate that much work,
which keeps the floor a floor (a decision splits its new tokens over several prompts and
batches). The shortlist rows also print the ratio at the full list's throughput (message-length
batches after the 77-intent system prompt), the single number earlier versions of this
benchmark used, which made the shortlist look faster than its floor.

1. Full list: the message and the chat template, then one decoding step per token of the
   code after the group letter (two). Target: ratio <= 1.3.
2. Shortlist as the saved runs decide (8 candidates, two orderings, each asked with the
   message and the content-free message): every prompt's options and message, no decoding
   step. Target: ratio <= 1.5.
3. Shortlist, one ordering, no calibration; also against the same request without the
   prefix cache: before each uncached request the backend's cached prefix is dropped, so
   the instruction and examples are evaluated again, as a server without prompt caching
   would. The two are interleaved message by message so that load on the machine hits
   both alike. Target: cached / uncached <= 0.6.

Last, the hours one model's BANKING77 full-list and shortlist runs (calibration and test) take at
the measured medians and at the floors.

    python setup/bench_decisions.py [--n 15]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def shortlist_prompts(shortlist: Any, text: str, decision: Any) -> list[list[dict[str, str]]]:
    """The requests a shortlist decision asked: each ordering it shows, with the message (and "N/A")."""
    from lib.decisions import CONTENT_FREE_MESSAGE, MAX_MESSAGE_CHARS

    texts = [text.strip()[:MAX_MESSAGE_CHARS]] + ([CONTENT_FREE_MESSAGE] if shortlist.calibrate else [])
    return [shortlist.messages([decision.candidates[i] for i in order], asked)
            for order in decision.details["orders"] for asked in texts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=15, help="messages per measurement")
    args = parser.parse_args()

    from lib import get_llm
    from lib.datasets import load_label_groups
    from lib.decisions import FullListDecider, ShortlistDecider, embedded_backend
    from lib.indexes import IntentRetriever
    from lib.backends.embedded import prefix_tree_tokens
    from lib.saved_runs.decisions import load_split, make_decider, training_pool

    llm = get_llm(mode="live")  # whatever WORKBOOK_MODE says: this measures the model
    backend = embedded_backend(llm)
    if backend is None:
        sys.exit("this benchmark drives the embedded model; unset WORKBOOK_BACKEND")
    groups = load_label_groups("banking77")
    texts = load_split("banking77", "calibration").sample(args.n, random_state=0)["text"].tolist()
    full = FullListDecider(llm, groups)
    full.decide("warm up the cache")

    filler_text = " ".join(load_split("banking77", "calibration").sample(60, random_state=1)["text"])
    filler = backend.token_ids(filler_text)

    def prompt_throughput(cached: list[int], batch: int) -> float:
        """Tokens per second for a batch of `batch` new tokens after the cached prefix `cached` (median of 5)."""
        if batch > len(filler):
            raise ValueError(f"the filler holds {len(filler)} tokens, fewer than a batch of {batch}")
        backend.evaluate(cached + filler[:batch], shared=len(cached))  # puts `cached` in the KV cache
        rates = []
        for _ in range(5):
            start = time.perf_counter()
            backend.evaluate(cached + filler[:batch], shared=len(cached))
            rates.append(batch / (time.perf_counter() - start))
        return float(np.median(rates))

    # the full list's throughput (message-length batches after its system prompt) and the time
    # of one decoding step, measured on top of the cached system prompt
    lengths = []
    for text in texts:
        ids, shared = backend.prompt_ids(full.messages(text))
        lengths.append(len(ids) - shared)
    full_prefix = ids[:shared]
    full_throughput = prompt_throughput(full_prefix, int(np.median(lengths)))
    decode = []
    for _ in range(5):
        continuation = backend.continuation(full.messages(texts[0]), reserve=8)
        start = time.perf_counter()
        for end in range(1, 9):
            continuation.after(filler[:end])  # one decoding step each
        decode.append((time.perf_counter() - start) / 8)
    seconds_per_step = float(np.median(decode))

    def floor(new_tokens: int, steps: int, tokens_per_second: float) -> float:
        return new_tokens / tokens_per_second + steps * seconds_per_step

    def new_tokens(requests: list[list[dict[str, str]]]) -> tuple[int, list[int]]:
        """(new tokens of the requests, the cached prefix they start from)."""
        encoded = [backend.prompt_ids(messages) for messages in requests]
        ids, shared = encoded[0]
        return prefix_tree_tokens([ids[shared:] for ids, shared in encoded]), ids[:shared]

    rows = []  # (name, seconds, new tokens, decode steps, target, throughput of its own batches)
    rows.append(("full list", [full.decide(text).seconds for text in texts], lengths, 2, 1.3, full_throughput))

    shortlist = make_decider("banking77", "shortlist", llm)  # the saved runs' decider
    shortlist.decide("warm up the cache")
    seconds, tokens = [], []
    for text in texts:
        decision = shortlist.decide(text)
        seconds.append(decision.seconds)
        count, prefix = new_tokens(shortlist_prompts(shortlist, text, decision))
        tokens.append(count)
    rows.append((f"shortlist ({shortlist.n_orders} orderings + content-free)", seconds, tokens, 0, 1.5,
                 prompt_throughput(prefix, int(np.median(tokens)))))

    one = ShortlistDecider(llm, IntentRetriever(training_pool("banking77")), groups,
                           n_orders=1, calibrate=False, debias="none")
    one.decide("warm up the cache")
    cached_seconds, uncached_seconds, tokens = [], [], []
    for text in texts:
        decision = one.decide(text)
        cached_seconds.append(decision.seconds)
        count, prefix = new_tokens(shortlist_prompts(one, text, decision))
        tokens.append(count)
        backend.clear_cache()  # forget the cached instruction and examples
        uncached_seconds.append(one.decide(text).seconds)
    rows.append(("shortlist, one ordering", cached_seconds, tokens, 0, None,
                 prompt_throughput(prefix, int(np.median(tokens)))))
    messages = one.messages(["card_arrival"] * 8, texts[0])
    prefix_tokens = len(backend.prompt_ids(messages)[0]) - len(backend.token_ids(messages[-1]["content"]))

    print(f"full list's prompt throughput {full_throughput:.1f} tokens/s ({int(np.median(lengths))}-token batches after "
          f"{len(full_prefix)} cached), decode {1000 * seconds_per_step:.0f} ms/step "
          f"({os.cpu_count()} CPUs, {backend.n_threads} threads; medians over {len(texts)} messages)")
    print(f"{'decider':<40} {'s/decision':>10} {'new tokens':>10} {'steps':>5} {'tokens/s':>8} {'floor s':>8} "
          f"{'ratio':>6}  {'at the full list':>16}")
    median_seconds, median_floors = {}, {}
    for name, seconds, tokens, steps, target, throughput in rows:
        floors = [floor(count, steps, throughput) for count in tokens]
        ratio = float(np.median(np.array(seconds) / np.array(floors)))
        full_ratio = float(np.median([s / floor(count, steps, full_throughput) for s, count in zip(seconds, tokens)]))
        median_seconds[name], median_floors[name] = float(np.median(seconds)), float(np.median(floors))
        print(f"{name:<40} {median_seconds[name]:>10.3f} {np.median(tokens):>10.0f} {steps:>5} {throughput:>8.1f} "
              f"{median_floors[name]:>8.3f} {ratio:>6.2f}  {full_ratio:>16.2f}"
              + (f"  (target <= {target})" if target else ""))
    print(f"shortlist, one ordering: cached {np.median(cached_seconds):.3f} s, without the prefix cache "
          f"{np.median(uncached_seconds):.3f} s (about {prefix_tokens} prefix tokens) -> ratio "
          f"{np.median(cached_seconds) / np.median(uncached_seconds):.2f} (target <= 0.6)")
    saved_deciders = [name for name, *_ in rows[:2]]  # the full list and the shortlist the saved runs use
    n_messages = sum(len(load_split("banking77", split)) for split in ("calibration", "test"))
    print(f"one model's BANKING77 full-list and shortlist runs, calibration and test ({n_messages} messages each): "
          f"{n_messages * sum(median_seconds[n] for n in saved_deciders) / 3600:.1f} h at these medians, "
          f"{n_messages * sum(median_floors[n] for n in saved_deciders) / 3600:.1f} h at the floors (target 3 h on 2 cores)")


if __name__ == "__main__":
    main()
