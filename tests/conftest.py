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
# `make test` runs two pytest-xdist workers; the tests that load the model all run on one of them
# (`pytest_collection_modifyitems`), with one llama.cpp thread, so the two workers on two cores do
# not make llama.cpp's spinning threads wait for each other. WORKBOOK_THREADS set by the caller wins.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("WORKBOOK_THREADS", "1")


MODEL_FIXTURES = frozenset({"embedded", "server_url"})
MODEL_MODULES = frozenset({"test_llm.py", "test_reliability_model.py"})
"""Test files that also load a model of their own, outside the fixtures."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for `--dist loadgroup` (`make test`): the tests that load the model, on one worker.

    The `embedded` and `server_url` fixtures are per worker process, so tests that need them on
    two workers would load the model twice and start two servers on two cores. Every test that
    uses either fixture, or sits in a file that loads a model itself, joins the group "model";
    every cell of a notebook (nbval) joins its notebook's group, since a notebook runs in one
    kernel. Other tests are spread one by one. Runs before pytest-xdist reads the groups.
    """
    for item in items:
        if not isinstance(item, pytest.Function):
            item.add_marker(pytest.mark.xdist_group(item.path.name))
        elif MODEL_FIXTURES & set(item.fixturenames) or item.path.name in MODEL_MODULES:
            item.add_marker(pytest.mark.xdist_group("model"))


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
