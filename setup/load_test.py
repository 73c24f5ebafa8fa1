"""A classroom against one server: N learners press Run All on the same notebook at once.

    python setup/load_test.py                        # 1, 5, 10 and 30 learners on 00-setup (make load-test)
    python setup/load_test.py --learners 10 --notebook 01-grounding --seconds 120
    python setup/load_test.py --base-url http://gpu-box:8080/v1 --model qwen  # a server already running
    python setup/load_test.py --engine llama-server,llama-cpp-python --levels 1,5 --json data/load-test-engines.json

Each simulated learner sends the requests its notebook makes, in the order of the notebook's
recording (data/recordings/<notebook>.jsonl), one after another with no pause: the worst
moment of a class, when everyone runs the first cells together. Every learner is a thread
with its own connection, using the workbook's own server client, so deadlines and errors are
the ones a notebook would meet. Requests the library never sends a server (continuing a
partial reply) are left out and counted.

Without --base-url the pinned model is started on 127.0.0.1 behind each --engine in turn, the
same learners on each (`llama-cpp-python`: llama_cpp.server, as `make run-server` does, one request
at a time; `llama-server`: llama.cpp's own server as `make serve` starts it, --slots requests
computed together), and stopped after its levels. Each level of learners is bounded: a learner
starts no new request once --seconds have passed, so a level ends within about --seconds plus
the slowest request's deadline. Printed per level: requests answered, latency p50 / p95 / max
(seconds from sending a request to its whole answer), reply tokens per second (all learners'
chat reply tokens over the level's wall time), per kind of request, errors, timeouts and requests
never sent; then the largest level whose p95 stayed under --p95-limit seconds. --json writes the
same figures, with the machine's core count and the engines' settings, to a file.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from lib.backends.protocol import CapabilityError  # noqa: E402
from lib.backends.openai_compatible import OpenAICompatibleLLM, ServerError, ServerUnavailableError  # noqa: E402
from lib.recording import RECORDINGS_DIR, RecordingStore  # noqa: E402
from lib.backends.server import running_server  # noqa: E402
from setup.serve import DEFAULT_SLOTS, running_llama_server  # noqa: E402

ENGINES = ("llama-server", "llama-cpp-python")
"""What --engine names: llama.cpp's own server (xllamacpp, `make serve`) and llama-cpp-python's."""


@dataclass(frozen=True)
class Request:
    """One recorded call: the client method, its arguments, and its kind for the report."""

    method: str
    arguments: dict
    kind: str


@dataclass
class LevelResult:
    """What `learners` learners at once met: latencies by kind, errors, timeouts, requests not sent."""

    learners: int
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    timeouts: int = 0
    not_sent: int = 0
    reply_tokens: int = 0  # chat reply tokens of the answered requests

    def tokens_per_second(self) -> float:
        """Reply tokens written per second of the level, all learners together."""
        return self.reply_tokens / self.seconds if self.seconds > 0 else float("nan")

    def all_latencies(self) -> list[float]:
        return [seconds for values in self.latencies.values() for seconds in values]


def request_kind(method: str, arguments: dict) -> str:
    """"chat", "chat + grammar", "chat + schema", or the method's name (tokenize, info ...)."""
    if method != "chat":
        return method
    return "chat + grammar" if arguments.get("grammar") else "chat + schema" if arguments.get("json_schema") else "chat"


def notebook_requests(notebook: str, folder: Path = RECORDINGS_DIR) -> tuple[list[Request], int]:
    """The requests of `notebook`'s recording in order, and how many of them the library never sends
    a server (next-token log-probabilities after a partial assistant reply)."""
    store = RecordingStore(notebook, folder)
    if not len(store):
        raise SystemExit(f"no recording {store.path}: give a notebook name such as 00-setup "
                         f"(or record it: make record NB={notebook})")
    requests, left_out = [], 0
    for call in store.calls():
        arguments = dict(call["request"])
        if call["method"] == "next_token_logprobs" and arguments.get("prefix"):
            left_out += 1
            continue
        requests.append(Request(call["method"], arguments, request_kind(call["method"], arguments)))
    return requests, left_out


def run_level(base_url: str, model: str, requests: list[Request], learners: int, seconds: float) -> LevelResult:
    """`learners` threads each send `requests` in order; none starts a request after `seconds`."""
    result = LevelResult(learners)
    lock = threading.Lock()
    start_together = threading.Barrier(learners)
    stop_at: list[float] = []

    def learner() -> None:
        client = OpenAICompatibleLLM(base_url, model)
        start_together.wait()
        with lock:
            if not stop_at:
                stop_at.append(time.monotonic() + seconds)
        for number, request in enumerate(requests):
            if time.monotonic() > stop_at[0]:
                with lock:
                    result.not_sent += len(requests) - number
                return
            sent = time.monotonic()
            try:
                answer = getattr(client, request.method)(**request.arguments)
            except (ServerError, ServerUnavailableError, CapabilityError, ValueError) as error:
                with lock:
                    if "did not finish answering within" in str(error):
                        result.timeouts += 1
                    else:
                        result.errors.append(f"{request.kind}: {type(error).__name__}: {str(error)[:160]}")
                continue
            with lock:
                result.latencies[request.kind].append(time.monotonic() - sent)
                result.reply_tokens += getattr(answer, "completion_tokens", 0)

    threads = [threading.Thread(target=learner, daemon=True) for _ in range(learners)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.seconds = time.monotonic() - began
    return result


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def report(results: list[LevelResult], p95_limit: float) -> str:
    """The per-level table, the per-kind table and the one-line answer."""
    lines = [f"{'learners':>8}  {'answered':>8}  {'p50 s':>7}  {'p95 s':>7}  {'max s':>7}  {'errors':>6}  "
             f"{'timeouts':>8}  {'not sent':>8}  {'wall s':>7}  {'tok/s':>6}"]
    for level in results:
        values = level.all_latencies()
        lines.append(f"{level.learners:>8}  {len(values):>8}  {percentile(values, 50):>7.1f}  "
                     f"{percentile(values, 95):>7.1f}  {max(values, default=float('nan')):>7.1f}  "
                     f"{len(level.errors):>6}  {level.timeouts:>8}  {level.not_sent:>8}  {level.seconds:>7.0f}  "
                     f"{level.tokens_per_second():>6.1f}")
    lines.append("\nby kind of request (p50 / p95 seconds, answered):")
    kinds = sorted({kind for level in results for kind in level.latencies})
    for level in results:
        cells = [f"{kind} {percentile(level.latencies[kind], 50):.1f} / {percentile(level.latencies[kind], 95):.1f}"
                 f" ({len(level.latencies[kind])})" for kind in kinds if level.latencies[kind]]
        lines.append(f"  {level.learners:>3} learners: " + "; ".join(cells))
    for level in results:
        for error in sorted(set(level.errors))[:3]:
            lines.append(f"  {level.learners} learners, error: {error}")
    held = learners_held(results, p95_limit)
    answer = f"{held} learner(s) at once" if held else "not even one learner"
    lines.append(f"\nlargest level with p95 <= {p95_limit:g} s, no error, no timeout and every request sent: {answer}")
    return "\n".join(lines)


def learners_held(results: list[LevelResult], p95_limit: float) -> int:
    """The largest level whose p95 stayed within `p95_limit` seconds with no error, no timeout
    and every request sent (0 when none did)."""
    served = [level.learners for level in results
              if level.all_latencies() and percentile(level.all_latencies(), 95) <= p95_limit
              and not level.errors and not level.timeouts and not level.not_sent]
    return max(served, default=0)


def figures(engine: str, settings: dict, results: list[LevelResult], p95_limit: float) -> dict:
    """One engine's levels as JSON: what --json writes, and the README's side-by-side table."""
    def rounded(value: float) -> float | None:
        return round(value, 2) if value == value else None  # NaN (nothing answered) -> null

    def level_figures(level: LevelResult) -> dict:
        latencies = level.all_latencies()
        return {"learners": level.learners, "answered": len(latencies), "errors": len(level.errors),
                "timeouts": level.timeouts, "not_sent": level.not_sent,
                "p50_s": rounded(percentile(latencies, 50)), "p95_s": rounded(percentile(latencies, 95)),
                "max_s": rounded(max(latencies, default=float("nan"))),
                "wall_s": rounded(level.seconds), "reply_tokens": level.reply_tokens,
                "reply_tokens_per_s": rounded(level.tokens_per_second())}

    levels = [level_figures(level) for level in results]
    return {"engine": engine, **settings, "levels": levels, "learners_held": learners_held(results, p95_limit)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learners", type=int, default=30, help="the most learners at once (levels 1, 5, 10 "
                        "and this one, those up to it)")
    parser.add_argument("--levels", default="", help="the learner counts to measure, e.g. 10,30 "
                        "(default: 1, 5, 10 and --learners, those up to it)")
    parser.add_argument("--notebook", default="00-setup", help="whose recorded requests every learner sends")
    parser.add_argument("--seconds", type=float, default=120.0,
                        help="per level: no learner starts a request after this many seconds")
    parser.add_argument("--p95-limit", type=float, default=5.0, help="the p95 latency (s) a class still accepts")
    parser.add_argument("--base-url", default="", help="a server already running (else one is started here)")
    parser.add_argument("--model", default="", help="the model id that server knows (with --base-url)")
    parser.add_argument("--engine", default=",".join(ENGINES), help="without --base-url: the engines to start, "
                        f"one after another, separated by commas ({', '.join(ENGINES)}; default both)")
    parser.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help="llama-server's parallel slots "
                        f"(default {DEFAULT_SLOTS}, as make serve)")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    parser.add_argument("--note", default="", help="with --json: a sentence on the machine (e.g. that it was shared)")
    args = parser.parse_args(argv)
    if args.learners < 1 or args.seconds <= 0:
        parser.error("--learners must be at least 1 and --seconds positive")
    if bool(args.base_url) != bool(args.model):
        parser.error("--base-url and --model go together")
    engines = [name.strip() for name in args.engine.split(",") if name.strip()]
    if not engines or set(engines) - set(ENGINES):
        parser.error(f"--engine {args.engine!r}: name {' or '.join(ENGINES)} (or both, separated by a comma)")
    requests, left_out = notebook_requests(args.notebook)
    try:
        levels = sorted({int(level) for level in args.levels.split(",")} if args.levels else
                        {level for level in (1, 5, 10) if level < args.learners} | {args.learners})
    except ValueError:
        parser.error(f"--levels {args.levels!r}: give whole numbers separated by commas, e.g. 10,30")
    if levels[0] < 1:
        parser.error("--levels: every level needs at least 1 learner")
    print(f"{args.notebook}: {len(requests)} requests per learner "
          f"({', '.join(f'{n} {kind}' for kind, n in sorted(_counts(requests).items()))}); "
          f"{left_out} left out (the library sends a server no partial reply to continue)", flush=True)

    def measure(base_url: str, model: str) -> list[LevelResult]:
        results = []
        for learners in levels:
            print(f"{learners} learner(s) at once ...", flush=True)
            results.append(run_level(base_url, model, requests, learners, args.seconds))
        return results

    measured: list[tuple[str, dict, list[LevelResult]]] = []
    try:
        if args.base_url:
            measured.append((args.base_url, {}, measure(args.base_url, args.model)))
        for engine in [] if args.base_url else engines:
            if engine == "llama-cpp-python":
                with running_server() as server:
                    print(f"llama-cpp-python (llama_cpp.server) on {server.base_url}: context {server.n_ctx} tokens, "
                          f"{server.threads} threads, one request computed at a time (it has no parallel slots)",
                          flush=True)
                    settings = {"context_tokens": server.n_ctx, "threads": server.threads, "slots": 1}
                    measured.append((engine, settings, measure(server.base_url, server.model)))
            else:
                with running_llama_server(slots=args.slots) as server:
                    print(f"llama-server (xllamacpp) on {server.base_url}: {server.slots} slots of {server.n_ctx} "
                          f"tokens, {server.threads} threads, continuous batching", flush=True)
                    settings = {"context_tokens": server.n_ctx, "threads": server.threads, "slots": server.slots}
                    measured.append((engine, settings, measure(server.base_url, server.model)))
    except KeyboardInterrupt:
        print("interrupted: the server was stopped", file=sys.stderr)
        return 130
    for name, _, results in measured:
        print(f"\n{name}:")
        print(report(results, args.p95_limit))
    if args.json:
        document = {"notebook": args.notebook, "requests_per_learner": len(requests), "seconds_cap": args.seconds,
                    "p95_limit_s": args.p95_limit, "cores": os.cpu_count(), "note": args.note,
                    "command": _command(sys.argv[1:] if argv is None else argv),
                    "engines": [figures(name, settings, results, args.p95_limit)
                                for name, settings, results in measured]}
        target = Path(args.json)
        written = target.with_name(f"{target.name}.{os.getpid()}.tmp")  # whole, then moved: a kill leaves the old file
        written.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        written.replace(target)
        print(f"\nfigures written to {args.json}")
    return 0


def _command(argv: list[str]) -> str:
    """The command line that remakes a --json file, with the thread setting it ran under."""
    threads = f"WORKBOOK_THREADS={os.environ['WORKBOOK_THREADS']} " if os.environ.get("WORKBOOK_THREADS") else ""
    return f"{threads}python setup/load_test.py {shlex.join(argv)}"


def _counts(requests: list[Request]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for request in requests:
        counts[request.kind] += 1
    return counts


if __name__ == "__main__":
    sys.exit(main())
