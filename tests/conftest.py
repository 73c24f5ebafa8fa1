"""Shared fixtures: the embedded model (loaded once) and a real llama-cpp-python server on 127.0.0.1."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# `make test` runs two pytest-xdist workers, each a process with its own model: one llama.cpp
# thread each, so two workers on two cores do not make llama.cpp's spinning threads wait for
# each other. WORKBOOK_THREADS set by the caller wins.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("WORKBOOK_THREADS", "1")


@pytest.fixture(scope="session")
def embedded():
    from lib.llm import EmbeddedLLM
    return EmbeddedLLM(n_ctx=2048)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def server_url():
    """llama-cpp-python's own OpenAI-compatible server with the same GGUF, on a free local port."""
    from lib.model_file import configured_model

    port = _free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(configured_model().path),
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--logits_all", "true",
               "--n_threads", os.environ.get("WORKBOOK_THREADS") or str(os.cpu_count() or 1), "--verbose", "false"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited early:\n{process.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama_cpp.server did not answer within 120 s")
            time.sleep(0.5)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
