"""Could the prebuilt xllamacpp wheel replace the compiled llama-cpp-python as the embedded engine?

    WORKBOOK_THREADS=1 python setup/engine_choice.py

Prints, on this machine: the seconds to install the xllamacpp wheel (downloaded and unpacked into
a temporary folder, dependencies left out, nothing in .venv touched) beside the seconds `make setup`
spent compiling llama-cpp-python (.venv/.install-times); and the two things only the embedded
backend gives the notebooks, each on both engines with the same question: the whole vocabulary's
next-token distribution (llama-server can send it only as `top_logprobs` over every token, a JSON
reply of about 17 MB) and the next token after a partial assistant reply (llama-server's raw
`/completion` on its own chat template plus the partial reply). Each reading is taken three times;
llama-server keeps the prompt cached between them, the embedded model evaluates it every time.
"""
from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from setup.serve import running_llama_server  # noqa: E402

QUESTION = [{"role": "user", "content": "Is Paris the capital of France? Answer yes or no."}]
PARTIAL_REPLY = "The answer is"
REPEATS = 3


def wheel_install_seconds() -> float:
    """Seconds to download and install the pinned xllamacpp wheel, without dependencies, into a
    temporary folder (pip's cache off, so the download is counted)."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-cache-dir",
                        "--target", folder, f"xllamacpp=={version('xllamacpp')}"], check=True)
        return time.perf_counter() - start


def compile_seconds() -> str:
    """What `make setup` recorded for compiling llama-cpp-python, or why there is no figure."""
    times = REPO / ".venv" / ".install-times"
    for line in times.read_text(encoding="utf-8").splitlines() if times.exists() else []:
        if line.startswith("llama-cpp-python\t"):
            return line.split("\t")[1]
    return "not recorded (run make setup on a new .venv)"


def timed(work, *args, **kwargs) -> tuple[float, object]:
    """Seconds `work(*args, **kwargs)` took, and what it returned."""
    start = time.perf_counter()
    result = work(*args, **kwargs)
    return time.perf_counter() - start, result


def server_readings() -> list[str]:
    lines = []
    with running_llama_server(slots=1, n_ctx=2048) as server:
        root = server.base_url[: -len("/v1")]
        n_vocab = httpx.get(f"{server.base_url}/models", timeout=30).json()["data"][0]["meta"]["n_vocab"]
        for asked in (20, n_vocab):
            for _ in range(REPEATS):
                seconds, reply = timed(httpx.post, f"{server.base_url}/chat/completions", timeout=600, json={
                    "model": server.model, "messages": QUESTION, "max_tokens": 1, "temperature": 0,
                    "logprobs": True, "top_logprobs": asked})
                top = reply.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
                mass = sum(math.exp(candidate["logprob"]) for candidate in top)
                lines.append(f"llama-server  top {asked:>6} candidates: {seconds:5.2f} s, {len(top)} given, "
                             f"probability {mass:.4f}, reply {len(reply.content) / 1e6:.2f} MB")
        prompt = httpx.post(f"{root}/apply-template", json={"messages": QUESTION}, timeout=30).json()["prompt"]
        for _ in range(REPEATS):
            seconds, reply = timed(httpx.post, f"{root}/completion", timeout=600, json={
                "prompt": prompt + PARTIAL_REPLY, "n_predict": 1, "temperature": 0, "n_probs": 5})
            lines.append(f"llama-server  after the partial reply: {seconds:5.2f} s, next token "
                         f"{reply.json()['content']!r}")
    return lines


def embedded_readings() -> list[str]:
    from lib.backends.embedded import EmbeddedLLM

    llm = EmbeddedLLM(n_ctx=2048)
    lines = []
    for prefix in ("", PARTIAL_REPLY):
        for _ in range(REPEATS):
            seconds, logprobs = timed(llm.next_token_distribution, QUESTION, prefix=prefix)
            what = "after the partial reply" if prefix else f"all {len(logprobs)} tokens"
            lines.append(f"embedded      {what}: {seconds:5.2f} s, probability {float(np.exp(logprobs).sum()):.4f}")
    return lines


def main() -> int:
    print(f"xllamacpp {version('xllamacpp')} wheel, download and install: {wheel_install_seconds():.1f} s; "
          f"llama-cpp-python {version('llama-cpp-python')} compiled by make setup: {compile_seconds()} s", flush=True)
    for line in server_readings() + embedded_readings():
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
