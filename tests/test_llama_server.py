"""The server `make run-server` and `make load-test` start: it answers as the README says, and it is
stopped whatever ends the run (an error, SIGTERM), and a server that cannot start says why."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from lib.model_file import DEFAULT_MODEL
from lib.backends.server import free_port, running_server

REPO = Path(__file__).resolve().parent.parent


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_the_server_reports_the_readme_model_id_and_is_stopped_when_the_block_fails():
    port = free_port()
    with pytest.raises(RuntimeError, match="a notebook failed"):
        with running_server(port=port, n_ctx=512, threads=1) as server:
            assert server.model == DEFAULT_MODEL.name and server.base_url == f"http://127.0.0.1:{port}/v1"
            assert _answers(port)
            raise RuntimeError("a notebook failed")
    assert not _answers(port)


def test_a_server_that_cannot_start_says_why_within_seconds(tmp_path):
    not_a_model = tmp_path / "not-a-model.gguf"
    not_a_model.write_bytes(b"\0" * 1024)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="llama_cpp.server exited with status"):
        with running_server(not_a_model, n_ctx=512, threads=1):
            pass
    assert time.monotonic() - start < 60


def test_sigterm_to_make_run_server_stops_its_server(tmp_path):
    """The runner killed as CI or a teacher's Ctrl+C would: its server must not outlive it."""
    port = free_port()
    env = {**os.environ, "WORKBOOK_THREADS": "1", "WORKBOOK_N_CTX": "512"}
    runner = subprocess.Popen([sys.executable, str(REPO / "setup" / "run_server.py"), "--port", str(port),
                               "--only", "00-setup"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _answers(port):
            assert runner.poll() is None, runner.stdout.read()
            assert time.monotonic() < deadline, "the server did not answer within 120 s"
            time.sleep(0.1)
        runner.send_signal(signal.SIGTERM)
        output, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 130, output
    assert "interrupted: the server was stopped" in output
    assert not _answers(port)
