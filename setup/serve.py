"""The class server: llama.cpp's own server (llama-server) with the pinned model, run in this process
by the prebuilt xllamacpp wheel (no compiler), with parallel slots and continuous batching.

    make serve                                         # 127.0.0.1:8080, 4 slots (make variables below)
    make serve HOST=0.0.0.0 PORT=8080 SLOTS=8 THREADS=4
    python setup/serve.py --help

It prints the three settings a learner exports to reach it (WORKBOOK_BACKEND, WORKBOOK_BASE_URL,
WORKBOOK_MODEL) and serves until Ctrl+C or SIGTERM, which stop the engine before the process ends.
`running_llama_server` is the same server as a `with` block (the load test and the engine's tests
use it). Each slot gets the context `WORKBOOK_N_CTX` gives the embedded model (4,096 tokens by
default), so the engine is given `slots` times that; every slot computes in one batch with the
others, so a second learner's request does not wait for the first one's whole answer.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from lib.settings import context_tokens_setting, threads_setting  # noqa: E402
from lib.backends.server import free_port, served_model_id  # noqa: E402

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_SLOTS = 4
"""Requests computed together; a fifth learner's request waits for a free slot."""
QUIET = 0
"""llama.cpp's log verbosity with `quiet=True`: errors and warnings only (its default, 3, logs every request)."""


@dataclass(frozen=True)
class EngineServer:
    """A started llama-server: the address learners set, the model id it serves, its slots and threads."""

    base_url: str  # http://<host>:<port>/v1, for WORKBOOK_BASE_URL
    model: str  # the id /v1/models lists, for WORKBOOK_MODEL
    n_ctx: int  # tokens of context per slot
    slots: int
    threads: int


def learner_settings(server: EngineServer, host: str) -> str:
    """The lines a learner exports, with the address they reach: `host`, or this machine's name
    when the server listens on every interface (0.0.0.0)."""
    url = server.base_url
    if host in ("0.0.0.0", "::"):
        url = url.replace(f"//{host}:", f"//{socket.gethostname()}:", 1)
    return (f"export WORKBOOK_BACKEND=openai\nexport WORKBOOK_BASE_URL={url}\n"
            f"export WORKBOOK_MODEL={server.model}")


@contextlib.contextmanager
def running_llama_server(model_path: Path | None = None, *, host: str = DEFAULT_HOST, port: int | None = None,
                         slots: int = DEFAULT_SLOTS, n_ctx: int | None = None, threads: int | None = None,
                         model_id: str | None = None, quiet: bool = True) -> Iterator[EngineServer]:
    """Start llama-server in this process on `host`:`port` (a free port by default) with
    `model_path` (the configured model by default) under `model_id` (as `make run-server` names
    it), `slots` parallel slots of `n_ctx` tokens each (WORKBOOK_N_CTX by default) and `threads`
    CPU threads (WORKBOOK_THREADS by default); yield it once /v1/models answers, and stop it
    when the block ends, whatever ends it. `quiet` keeps llama.cpp's log to warnings and errors.
    """
    import xllamacpp

    from lib.model_file import configured_model

    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    model_path = configured_model().path if model_path is None else model_path
    model_id = served_model_id() if model_id is None else model_id
    port = free_port() if port is None else _check_free(host, port)
    n_ctx = context_tokens_setting() if n_ctx is None else n_ctx
    threads = threads_setting() if threads is None else threads
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {model_id}
    params.hostnames = [host]
    params.port = port
    params.n_parallel = slots
    params.n_ctx = n_ctx * slots  # the engine divides its context among the slots
    params.cont_batching = True
    params.warmup = False  # the first request pays for it instead of every start
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    if quiet:
        params.verbosity = QUIET
    try:
        server = xllamacpp.Server(params)  # loads the model and starts serving
    except RuntimeError as error:
        raise RuntimeError(f"llama-server did not start with {model_path} on {host}:{port} ({error}); run "
                           "`python setup/serve.py --verbose` to read llama.cpp's own log") from None
    try:
        base_url = f"http://{host}:{port}/v1"
        _wait_until_it_answers(f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/v1")
        yield EngineServer(base_url, model_id, n_ctx, slots, threads)
    finally:
        del server  # the engine stops its HTTP threads and frees the model


def _check_free(host: str, port: int) -> int:
    """`port`, once it is known that nothing listens on `host`:`port` (llama.cpp would only say
    that the server failed to start)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as llama.cpp does: a just-stopped server's port is free
        try:
            probe.bind((host, port))
        except OSError as error:
            raise RuntimeError(f"cannot listen on {host}:{port} ({error.strerror}): stop what uses that port "
                               "or choose another one (make serve PORT=8081)") from None
    return port


def _wait_until_it_answers(base_url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"llama-server did not answer on {base_url} within {seconds:g} s")
        time.sleep(0.1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default=DEFAULT_HOST, help="the address to listen on (0.0.0.0: every "
                        f"interface, for a class on other machines; default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    parser.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help="requests computed together "
                        f"(default {DEFAULT_SLOTS})")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (default: WORKBOOK_THREADS, "
                        "else every core)")
    parser.add_argument("--verbose", action="store_true", help="llama.cpp's log of every request")
    args = parser.parse_args(argv)
    if args.slots < 1 or args.threads < 0:
        parser.error("--slots must be at least 1 and --threads positive")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        with running_llama_server(host=args.host, port=args.port, slots=args.slots,
                                  threads=args.threads or None, quiet=not args.verbose) as server:
            print(f"llama-server (xllamacpp) on {server.base_url}: {server.slots} slots of {server.n_ctx} tokens, "
                  f"{server.threads} threads. Learners set:\n{learner_settings(server, args.host)}\n"
                  "Ctrl+C stops it.", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        print("interrupted: the server was stopped", file=sys.stderr)
        return 130
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
