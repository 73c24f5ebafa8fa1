"""The server launcher: llama-cpp-python's own OpenAI-compatible server (`python -m llama_cpp.server`) with the pinned model.

`running_server` starts it on 127.0.0.1, waits until /v1/models answers and stops it on the way
out, whatever ends the block (an error, Ctrl+C, SIGTERM); `make run-server`, `make load-test`,
the drift measurement's server setting and the tests of the server path use it, so all of them
start the server the README documents. A client of it is `lib.backends.factory.create_backend`'s.
"""
from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

from lib.model_file import configured_model, selected_model
from lib.settings import context_tokens_setting, threads_setting

__all__ = ["START_SECONDS", "Server", "free_port", "served_model_id", "server_command", "running_server"]

START_SECONDS = 180
"""How long the server may take to load the model and answer its first request."""


@dataclass(frozen=True)
class Server:
    """A started server: the address notebooks use and the model id it reports."""

    base_url: str  # http://127.0.0.1:<port>/v1
    model: str  # the id /v1/models lists, for WORKBOOK_MODEL
    n_ctx: int
    threads: int


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def served_model_id() -> str:
    """The model id the server reports (--model_alias), the README's WORKBOOK_MODEL: the pinned
    model's name (what chose it), or the file's name without `.gguf` for WORKBOOK_MODEL_PATH;
    without an alias the id would be the model file's path."""
    pinned = selected_model()
    return pinned.name if pinned is not None else configured_model().path.stem


def server_command(model_path: Path, port: int, n_ctx: int, threads: int, model_id: str) -> list[str]:
    """The README's server command for `model_path` on 127.0.0.1:`port`: logprobs for every token
    (--logits_all true) and the model id `model_id`."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--host", "127.0.0.1",
            "--port", str(port), "--model_alias", model_id, "--n_ctx", str(n_ctx), "--logits_all", "true",
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--verbose", "false"]


@contextlib.contextmanager
def running_server(model_path: Path | None = None, *, port: int | None = None, n_ctx: int | None = None,
                   threads: int | None = None, log: Path | None = None, model_id: str | None = None) -> Iterator[Server]:
    """Start llama_cpp.server with `model_path` (the configured model by default) under `model_id`
    (`served_model_id()` by default), yield it once it answers, and stop it when the block ends.

    `n_ctx` and `threads` default to the settings the embedded model reads, `port` to a free
    one. SIGTERM inside the block is turned into KeyboardInterrupt so the server is stopped
    then too. The server's own output goes to `log` (discarded when None); when it exits before
    answering, RuntimeError quotes the end of its output.
    """
    model_path = configured_model().path if model_path is None else model_path
    model_id = served_model_id() if model_id is None else model_id
    port = free_port() if port is None else port
    n_ctx = context_tokens_setting() if n_ctx is None else n_ctx
    threads = threads_setting() if threads is None else threads
    base_url = f"http://127.0.0.1:{port}/v1"
    with contextlib.ExitStack() as stack:
        output = stack.enter_context(open(log, "w", encoding="utf-8")) if log else subprocess.DEVNULL
        process = subprocess.Popen(server_command(model_path, port, n_ctx, threads, model_id), stdout=output,
                                   stderr=subprocess.STDOUT if log else subprocess.PIPE, text=True)
        stack.callback(_stop, process)
        previous = signal.signal(signal.SIGTERM, _interrupt) if _in_main_thread() else None
        if previous is not None:
            stack.callback(signal.signal, signal.SIGTERM, previous)
        model = _wait_until_it_answers(process, base_url, log)
        yield Server(base_url, model, n_ctx, threads)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_it_answers(process: subprocess.Popen, base_url: str, log: Path | None) -> str:
    deadline = time.monotonic() + START_SECONDS
    while True:
        if process.poll() is not None:
            said = log.read_text(encoding="utf-8") if log else process.stderr.read()
            raise RuntimeError(f"llama_cpp.server exited with status {process.returncode} before answering:\n"
                               f"{said[-2000:]}")
        try:
            reply = httpx.get(f"{base_url}/models", timeout=2)
            if reply.status_code == 200:
                return reply.json()["data"][0]["id"]
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"llama_cpp.server did not answer on {base_url} within {START_SECONDS} s")
        time.sleep(0.1)
