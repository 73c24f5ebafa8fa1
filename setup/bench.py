"""Benchmark of the embedded backend: ratios measured side by side in one run.

    python setup/bench.py

1. A cached-prefix decision: BANKING77's 77 intents as codes in a long system prompt (cached),
   one customer message per call, answered under a code grammar. Its median time is compared
   with a floor measured in the same run: the message's own tokens at the measured prompt
   throughput, plus the decode steps at the measured time per generated token.
2. The time the replay test suite takes to run every notebook (nbval, WORKBOOK_MODE=replay).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lib.datasets import load_banking77, load_label_groups
from lib.grammar import assign_codes, gbnf_for_codes
from lib.backends.embedded import EmbeddedLLM

REPO = Path(__file__).resolve().parent.parent
N_MESSAGES = 15


def full_list_prompt() -> tuple[str, str]:
    """A system prompt listing every BANKING77 intent with its code, and the grammar of those codes."""
    groups = load_label_groups("banking77")
    codes = assign_codes(groups.groups)
    lines = ["Classify the customer's banking message. Reply with the code of the one intent that fits best.", ""]
    lines += [f"{code} {label}: {groups.descriptions[label]}" for code, label in codes.items()]
    return "\n".join(lines), gbnf_for_codes(codes)


def timed(function, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    llm = EmbeddedLLM()
    system, grammar = full_list_prompt()
    messages = [[{"role": "system", "content": system}, {"role": "user", "content": text}]
                for text in load_banking77("test")["text"].iloc[:N_MESSAGES]]

    # Prompt throughput: the whole system prompt evaluated from an empty cache.
    total, shared = llm.prompt_split(messages[0])
    prefill = []
    for _ in range(3):
        llm.clear_cache()
        prefill.append(timed(lambda: llm.next_token_logprobs(messages[0], top_k=0), 1)[0])
    prompt_throughput = total / statistics.median(prefill)

    # Time per generated token: a long free reply minus a one-token reply, same cached request.
    free = [{"role": "system", "content": system}, {"role": "user", "content": "Describe your job in detail."}]
    one = statistics.median(timed(lambda: llm.chat(free, max_tokens=1), 3))
    reply = llm.chat(free, max_tokens=33)
    many = statistics.median(timed(lambda: llm.chat(free, max_tokens=33), 3))
    per_token = (many - one) / (reply.completion_tokens - 1)

    # The decision itself, prefix cached: median over the messages, with its own floor for each.
    llm.chat(messages[0], max_tokens=4, grammar=grammar)  # warm the cache
    ratios, seconds = [], []
    for request in messages:
        start = time.perf_counter()
        answer = llm.chat(request, max_tokens=6, grammar=grammar, top_logprobs=20)
        elapsed = time.perf_counter() - start
        total, shared = llm.prompt_split(request)
        decode_steps = answer.completion_tokens + 1  # the last step produces the end-of-answer token
        floor = (total - shared) / prompt_throughput + decode_steps * per_token
        ratios.append(elapsed / floor)
        seconds.append(elapsed)

    print(f"system prompt: {shared} cached tokens; prompt throughput {prompt_throughput:.0f} tokens/s; "
          f"{per_token * 1000:.0f} ms per generated token")
    print(f"cached-prefix decision: median {statistics.median(seconds):.3f} s over {len(seconds)} messages; "
          f"uncached prompt alone takes {statistics.median(prefill):.2f} s")
    print(f"ratio decision / floor: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})")

    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "notebooks", "-q", "-p", "no:cacheprovider"],
                            cwd=REPO, env={**os.environ, "WORKBOOK_MODE": "replay"}, capture_output=True, text=True)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-300:]
    print(f"replay test suite (every notebook under nbval): {time.perf_counter() - start:.1f} s ({summary})")


if __name__ == "__main__":
    main()
