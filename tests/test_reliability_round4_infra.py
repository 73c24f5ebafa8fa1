"""Reliability round four, the infrastructure's part: saved runs, secrets, misbehaving servers,
notebook arguments and torn writes (issue 48, items 4, 5, 6, 8 and 9).

Every server here is a real HTTP server on 127.0.0.1 (or ::1), http.server in a thread, that
answers the way a broken or hostile one does; killed writers are real processes killed with
SIGKILL. A full disk and a read-only folder are simulated by an `open` that fails as the system
does (ENOSPC after part of a line, EACCES), since this machine runs the tests as root.
"""
from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import numpy as np
import pytest

import lib.saved_runs.store as results_store
from lib.embeddings import SavedEmbeddings
from lib.backends.factory import BackendConfig
from lib.backends.openai_compatible import MAX_REPLY_BYTES, OpenAICompatibleLLM, ServerError
from lib.backends.factory import create_backend
from lib.recording import RecordedLLM, RecordingStore
from lib.saved_runs.store import ResultsStore
from lib.saved_runs.items import load_item_run, run_items
from lib.settings import MAX_URL_CHARS, check_base_url, server_settings

REPO = Path(__file__).resolve().parent.parent
MESSAGES = [{"role": "user", "content": "hello"}]
SECRET = "sk-test-0123456789abcdef"
FIELDS = {"row": ("i", "p"), "failure": ("i", "error")}


# --------------------------------------------------------------------------- 4. saved runs


def _store(folder: Path, name: str = "run") -> ResultsStore:
    return ResultsStore(folder / f"{name}.jsonl", f"python make_{name}.py", FIELDS, names={"run": name})


HEADER = {"run": "run", "model": "m1", "fingerprint": "f1"}

WRITER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from lib.saved_runs.store import ResultsStore
store = ResultsStore(Path(sys.argv[2]), "python make_run.py", {"row": ("i", "p"), "failure": ("i", "error")})
with store.writing({"run": "run", "model": "m1", "fingerprint": "f1"}, ("model", "fingerprint")) as (content, append):
    for i in range(int(sys.argv[3])):
        append({"kind": "row", "i": i, "p": 0.5, "text": "x" * 5000})
    if sys.argv[4] == "cut":  # a line the kill cuts short, as a buffered write stopped half-way leaves it
        with open(sys.argv[2], "ab", buffering=0) as raw:
            raw.write(b'{"i":7,"kind":"row","p":0.5,"text":"xxxx')
    print("ready", flush=True)
    time.sleep(600)
"""


def _killed_writer(path: Path, rows: int, cut: bool) -> None:
    """Run a real writer process that appends `rows` rows (and a cut line), then SIGKILL it while it holds the lock."""
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(REPO), str(path), str(rows), "cut" if cut else "whole"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        assert (path.parent / (path.name + ".lock")).read_text().startswith(f"process {process.pid}")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def test_a_writer_killed_mid_append_loses_only_the_cut_line(tmp_path):
    path = tmp_path / "run.jsonl"
    _killed_writer(path, rows=7, cut=True)
    store = _store(tmp_path)
    content = store.read()  # a read never repairs
    assert sorted(content.rows) == list(range(7)) and content.torn_bytes > 0
    with pytest.warns(UserWarning, match="removed an unfinished last line"):
        with store.writing(HEADER, ("model", "fingerprint")) as (resumed, append):
            assert sorted(resumed.rows) == list(range(7))
            append({"kind": "row", "i": 7, "p": 0.25})
    assert sorted(store.read().rows) == list(range(8)) and store.read().torn_bytes == 0


def test_a_lock_left_by_a_killed_writer_does_not_block_the_next(tmp_path):
    path = tmp_path / "run.jsonl"
    _killed_writer(path, rows=3, cut=False)
    assert (tmp_path / "run.jsonl.lock").is_file()  # the file stays; the kernel dropped its flock
    start = time.monotonic()
    with _store(tmp_path).writing(HEADER, ("model", "fingerprint")) as (content, append):
        append({"kind": "row", "i": 3, "p": 0.5})
    assert time.monotonic() - start < 5 and sorted(_store(tmp_path).read().rows) == [0, 1, 2, 3]


class _FailingFile:
    """A binary file whose writes fail with `failure` once `allowed` more bytes were written (part of a line)."""

    def __init__(self, handle, allowed: int, failure: int) -> None:
        self._handle, self._allowed, self._failure = handle, allowed, failure

    def write(self, data: bytes) -> int:
        if len(data) > self._allowed:
            self._handle.write(data[: self._allowed])
            self._handle.flush()
            self._allowed = 0
            raise OSError(self._failure, os.strerror(self._failure))
        self._allowed -= len(data)
        return self._handle.write(data)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def test_a_full_disk_stops_the_writer_with_a_clear_error_and_the_run_resumes(tmp_path, monkeypatch):
    store = _store(tmp_path)
    with store.writing(HEADER, ("model", "fingerprint")) as (_, append):
        for i in range(3):
            append({"kind": "row", "i": i, "p": 0.5})
    real_open = open

    def full_disk_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return _FailingFile(handle, allowed=10, failure=errno.ENOSPC) if "a" in mode and "b" in mode else handle

    monkeypatch.setattr(results_store, "open", full_disk_open, raising=False)
    with pytest.raises(OSError, match=r"cannot write .*run\.jsonl: No space left on device.*kept.*free some disk "
                                      r"space") as error:
        with store.writing(HEADER, ("model", "fingerprint")) as (_, append):
            append({"kind": "row", "i": 3, "p": 0.5})
    assert error.value.errno == errno.ENOSPC
    monkeypatch.undo()  # space freed
    assert sorted(store.read().rows) == [0, 1, 2] and store.read().torn_bytes == 10
    with pytest.warns(UserWarning, match="unfinished last line"):
        with store.writing(HEADER, ("model", "fingerprint")) as (content, append):
            append({"kind": "row", "i": 3, "p": 0.5})
    assert sorted(store.read().rows) == [0, 1, 2, 3]


def test_a_read_only_folder_is_reported_and_reading_still_works(tmp_path, monkeypatch):
    store = _store(tmp_path)
    with store.writing(HEADER, ("model", "fingerprint")) as (_, append):
        append({"kind": "row", "i": 0, "p": 0.5})
    real_open = open

    def read_only_open(path, mode="r", *args, **kwargs):
        if any(flag in mode for flag in "wa+x"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(results_store, "open", read_only_open, raising=False)
    with pytest.raises(OSError, match=rf"cannot write .*run\.jsonl\.lock: Permission denied.*make {tmp_path} writable"):
        with store.writing(HEADER, ("model", "fingerprint")):
            pass
    assert list(store.read().rows) == [0]  # reading (what the notebooks do) needs no write


def test_a_file_whose_header_names_another_run_is_refused(tmp_path):
    def write(name: str) -> Path:
        return run_items(name, ["a", "b"], lambda i, item: {"text": item}, model="m", backend="b",
                         settings={"prompt": "p"}, mode="replay", results_dir=tmp_path,
                         progress=False)

    shutil.copy(write("asking-first"), tmp_path / "asking-second.jsonl")  # copied over another run's name
    with pytest.raises(ValueError, match=r"asking-second\.jsonl, line 1: a header naming another run "
                                         r"\(\{'run': 'asking-first'\}"):
        load_item_run("asking-second", tmp_path)
    with pytest.raises(ValueError, match="another run"):
        write("asking-second")  # and no row is added to it
    assert len(load_item_run("asking-first", tmp_path)[1]) == 2


def test_a_file_written_with_another_model_or_settings_is_not_resumed(tmp_path):
    store = _store(tmp_path)
    with store.writing(HEADER, ("model", "fingerprint")) as (_, append):
        append({"kind": "row", "i": 0, "p": 0.5})
    for changed in ({"model": "m2"}, {"fingerprint": "f2"}):
        with pytest.raises(ValueError, match="written with other settings"):
            with store.writing({**HEADER, **changed}, ("model", "fingerprint")):
                pass
    assert list(store.read().rows) == [0]


def test_two_rows_for_one_item_are_refused_when_read_and_when_appended(tmp_path):
    store = _store(tmp_path)
    with store.writing(HEADER, ("model", "fingerprint")) as (_, append):
        append({"kind": "failure", "i": 1, "error": "timeout"})
        append({"kind": "row", "i": 1, "p": 0.5})  # a retry decided a failed item: allowed
        append({"kind": "row", "i": 2, "p": 0.5})
        with pytest.raises(ValueError, match="refusing to append a second row for 'i' 2"):
            append({"kind": "row", "i": 2, "p": 0.9})
    assert store.read().rows[1]["p"] == 0.5
    with open(store.path, "a", encoding="utf-8") as handle:  # two files joined, or a line pasted twice
        handle.write(json.dumps({"kind": "row", "i": 1, "p": 0.99}) + "\n")
    with pytest.raises(ValueError, match=r"line 5: a second row for 'i' 1 \(the first is line 3\)"):
        store.read()


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_row_with_nan_or_an_infinity_is_refused_when_appended(tmp_path, value):
    store = _store(tmp_path)
    with store.writing(HEADER, ("model", "fingerprint")) as (_, append):
        with pytest.raises(ValueError, match=r"refusing to append a row line whose p is not a finite number"):
            append({"kind": "row", "i": 0, "p": value})
        with pytest.raises(ValueError, match=r"whose top\[1\]\.p is not a finite number"):
            append({"kind": "row", "i": 0, "p": 0.5, "top": [{"p": 0.1}, {"p": value}]})
    assert store.read().rows == {}


@pytest.mark.parametrize("written", ["NaN", "Infinity", "-Infinity"])
def test_a_saved_row_with_nan_or_an_infinity_is_refused_when_read(tmp_path, written):
    store = _store(tmp_path)
    with store.writing(HEADER, ("model", "fingerprint")) as (_, append):
        append({"kind": "row", "i": 0, "p": 0.5})
    with open(store.path, "a", encoding="utf-8") as handle:
        handle.write(f'{{"kind": "row", "i": 1, "p": {written}}}\n')
    with pytest.raises(ValueError, match=r"line 3: .*(NaN|infinit).*The file is damaged"):
        store.read()


# --------------------------------------------------------------------------- servers for 5 and 6


class Server(BaseHTTPRequestHandler):
    """Answers every request with `status`, `headers` and `body`; records what it was sent in `seen`."""

    status = 200
    body = b""
    headers_out: dict = {}
    trickle_headers: float = 0.0
    reset_after: int | None = None
    chunked: bool = False
    seen: list

    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.seen.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                          "body": self.rfile.read(length).decode()})
        try:
            if self.trickle_headers:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 60:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(self.trickle_headers)
                return
            self.send_response(self.status)
            self.send_header("Content-Type", "application/json")
            for name, value in self.headers_out.items():
                self.send_header(name, value)
            if self.chunked:  # no Content-Length: the size is known only as the body arrives
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for start in range(0, len(self.body), 2**20):
                    piece = self.body[start:start + 2**20]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
                return
            self.send_header("Content-Length", str(len(self.body)))
            self.end_headers()
            if self.reset_after is not None:
                self.wfile.write(self.body[: self.reset_after])
                self.wfile.flush()
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()  # RST, not FIN: a connection reset mid-body
                self.close_connection = True
                return
            self.wfile.write(self.body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = _answer


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture
def serve():
    servers = []

    def start(host: str = "127.0.0.1", **attributes) -> tuple[str, list]:
        seen: list = []
        handler = type("Handler", (Server,), {"seen": seen, **attributes})
        server = (_Server6 if ":" in host else ThreadingHTTPServer)((host, 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{server.server_address[1]}/v1", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _reply(content: str = "hi", logprob: float | str = -0.1) -> bytes:
    token = f'{{"token": "hi", "logprob": {logprob}, "top_logprobs": [{{"token": "hi", "logprob": {logprob}}}]}}'
    return (f'{{"choices": [{{"message": {{"content": {json.dumps(content)}}}, "finish_reason": "stop", '
            f'"logprobs": {{"content": [{token}]}}}}], "usage": {{"prompt_tokens": 3, "completion_tokens": 1}}}}').encode()


# --------------------------------------------------------------------------- 5. secrets


def test_the_api_key_is_not_in_the_repr_of_the_settings_or_the_backend_config(monkeypatch):
    monkeypatch.setenv("WORKBOOK_BACKEND", "openai")
    monkeypatch.setenv("WORKBOOK_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("WORKBOOK_MODEL", "m")
    monkeypatch.setenv("WORKBOOK_API_KEY", SECRET)
    settings, config = server_settings(), BackendConfig.from_environment()
    assert settings.api_key == config.api_key == SECRET
    for shown in (repr(settings), str(settings), repr(config), f"{config}", repr({"config": config})):
        assert SECRET not in shown and "127.0.0.1:8080" in shown


@pytest.mark.parametrize("url", ["http://user:hunter2@127.0.0.1:8080/v1", "https://:hunter2@api.example.com/v1",
                                 "http://hunter2@127.0.0.1:8080/v1"])
def test_a_url_with_a_password_is_refused_without_repeating_it(url):
    with pytest.raises(ValueError, match="WORKBOOK_API_KEY") as error:
        check_base_url(url)
    assert "hunter2" not in str(error.value) and "***@" in str(error.value)


@pytest.mark.parametrize("url, what", [
    ("file:///etc/passwd", "not a server URL"),
    ("/v1", "not a server URL"),
    ("127.0.0.1:8080/v1", "not a server URL"),
    ("localhost:8080/v1", "not a server URL"),
    ("http://[::1/v1", "not a server URL"),
    ("http://127.0.0.1:8080/v1?api_key=sk-1", "query or fragment"),
    ("http://127.0.0.1:8080/v1#x", "query or fragment"),
    ("http://127.0.0.1:8080/v1\x00", "not a server URL"),
    ("http://127.0.0.1:8080/" + "v" * (MAX_URL_CHARS + 10), "characters long"),
])
def test_odd_server_urls_are_refused_with_a_short_message(url, what):
    with pytest.raises(ValueError, match=what) as error:
        check_base_url(url)
    assert len(str(error.value)) < 500


def test_an_ipv6_server_url_works(serve):
    try:
        url, _ = serve(host="::1", body=_reply())
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    assert check_base_url(url) == url
    assert OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3).text == "hi"


def test_an_api_key_that_no_header_can_carry_is_refused_without_showing_it():
    for key in (f"{SECRET}\nX-Injected: 1", f"{SECRET} extra", f"{SECRET}é"):
        with pytest.raises(ValueError, match="not shown") as error:
            OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m", api_key=key)
        assert SECRET not in str(error.value)
    assert OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m", api_key=f"  {SECRET}\n")._api_key == SECRET


def test_a_server_that_echoes_the_key_does_not_put_it_into_the_error(serve):
    url, seen = serve(status=401, body=f'{{"error": "invalid key Bearer {SECRET}"}}'.encode())
    with pytest.raises(ServerError, match=r"answered 401.*invalid key Bearer \[API key\]") as error:
        OpenAICompatibleLLM(url, "m", api_key=SECRET).chat(MESSAGES, max_tokens=3)
    assert SECRET not in str(error.value) and seen[0]["authorization"] == f"Bearer {SECRET}"


def test_a_redirect_to_another_host_gets_no_key_and_says_the_server_redirected(serve):
    other, other_seen = serve(body=_reply())
    url, seen = serve(status=307, headers_out={"Location": f"{other}/chat/completions"})
    with pytest.raises(ServerError, match=rf"{url}/chat/completions: the server redirected \(307\) to "
                                          rf"'{other}/chat/completions'.*WORKBOOK_BASE_URL"):
        OpenAICompatibleLLM(url, "m", api_key=SECRET).chat(MESSAGES, max_tokens=3)
    assert seen[0]["authorization"] == f"Bearer {SECRET}" and other_seen == []


def test_recordings_and_saved_runs_never_hold_the_key(serve, tmp_path, monkeypatch):
    url, _ = serve(body=b'{"data": [{"id": "m"}]}')
    chat_url, _ = serve(body=_reply())
    monkeypatch.setenv("WORKBOOK_RUN_ID", "4242")
    for base, method in ((url, "info"), (chat_url, "chat")):
        config = BackendConfig("openai", base, "m", SECRET)
        llm = RecordedLLM(config, lambda config=config: create_backend(config),
                          RecordingStore(f"secret-{method}", tmp_path / "recordings"), "record")
        (llm.info() if method == "info" else llm.chat(MESSAGES, max_tokens=3, top_logprobs=1))
        llm.finish_recording()
        run_items(f"secret-{method}", [1], lambda i, item, llm=llm: {"text": repr(llm.config)}, model="openai:m",
                  backend="openai", settings={"config": repr(config)}, mode="live",
                  results_dir=tmp_path / "results", progress=False)
    written = "".join(path.read_text(encoding="utf-8") for path in tmp_path.glob("*/*.jsonl"))
    assert "secret-info" in written and "hi" in written and SECRET not in written


# --------------------------------------------------------------------------- 6. a misbehaving server


@pytest.mark.parametrize("logprob", ["NaN", "Infinity", "-Infinity", "0.5", "1e999"])
def test_a_logprob_that_is_nan_infinite_or_positive_is_refused(serve, logprob):
    url, _ = serve(body=_reply(logprob=logprob))
    with pytest.raises(ServerError, match=rf"{url}/chat/completions answered JSON that is not a chat completion "
                                          r"\(token 'hi' has the logprob .*finite number at most 0"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3, top_logprobs=1)


def test_a_logprob_of_zero_is_a_probability_of_one(serve):
    url, _ = serve(body=_reply(logprob="0.0"))
    assert OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3, top_logprobs=1).tokens[0].logprob == 0.0


@pytest.mark.parametrize("status, body, what", [
    (500, b'{"error": "internal"}', "answered 500: .*internal"),
    (200, b"", "answered 200 with an empty body"),
    (200, b"{not json", "not JSON"),
    (200, b'{"id": "x", "object": "chat.completion"}', "no choices"),
])
def test_a_broken_answer_is_a_clear_error_naming_the_url(serve, status, body, what):
    url, _ = serve(status=status, body=body)
    start = time.monotonic()
    with pytest.raises(ServerError, match=rf"{url}/chat/completions.*{what}"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)
    assert time.monotonic() - start < 5


def test_a_50_mb_answer_is_refused_before_it_is_read(serve):
    padding = "x" * (50 * 2**20)
    url, _ = serve(body=_reply(content=padding))
    start = time.monotonic()
    with pytest.raises(ServerError, match=rf"{url}/chat/completions answered with more than 8 MB"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)
    assert time.monotonic() - start < 10


def test_an_answer_without_a_length_is_cut_at_the_limit(serve):
    url, _ = serve(body=_reply(content="x" * (MAX_REPLY_BYTES + 2**20)), chunked=True)
    with pytest.raises(ServerError, match=rf"{url}/chat/completions answered with more than 8 MB"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)


def test_a_connection_reset_mid_body_names_the_url(serve):
    url, _ = serve(body=_reply(), reset_after=20)
    with pytest.raises(ServerError, match=rf"{url}/chat/completions: the server closed or broke the connection"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)


def test_trickled_headers_are_stopped_by_the_whole_request_deadline(serve, monkeypatch):
    url, _ = serve(trickle_headers=1.0)
    monkeypatch.setenv("WORKBOOK_TIMEOUT", "3")
    start = time.monotonic()
    with pytest.raises(ServerError, match=rf"{url}/chat/completions did not finish answering within 3 s"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)
    assert time.monotonic() - start < 15  # the trickle lasts 76 s


# --------------------------------------------------------------------------- 8. notebook arguments


def _notebooks(folder: Path, *names: str) -> Path:
    folder.mkdir()
    for name in names:
        (folder / f"{name}.ipynb").write_text("{}", encoding="utf-8")
    return folder


@pytest.mark.parametrize("argument", ["../../etc/passwd", "00; rm -rf x", "00 ", " 00", "a b", "0", "*", "0?",
                                      "../notebooks/00-setup", "/etc/passwd", "00-setup.ipynb/..", "$(id)", "`id`"])
def test_anything_but_one_notebook_is_refused(tmp_path, argument):
    from setup.run_notebooks import SelectionError, select_notebooks

    folder = _notebooks(tmp_path / "notebooks", "00-setup", "01-grounding")
    with pytest.raises(SelectionError, match=r"not a notebook|no notebook in") as error:
        select_notebooks(argument, folder)
    assert "00, 01" in str(error.value)


def test_a_number_two_notebooks_share_is_refused_naming_both(tmp_path):
    from setup.run_notebooks import SelectionError, select_notebooks

    folder = _notebooks(tmp_path / "notebooks", "14-selective", "15-guarantees", "15-where-errors")
    with pytest.raises(SelectionError, match=r"names 2 notebooks \(15-guarantees.ipynb, 15-where-errors.ipynb\)"):
        select_notebooks("15", folder)
    assert [path.name for path in select_notebooks("15-where", folder)] == ["15-where-errors.ipynb"]


def test_a_notebook_is_named_by_number_name_or_file_and_empty_means_all(tmp_path):
    from setup.run_notebooks import select_notebooks

    folder = _notebooks(tmp_path / "notebooks", "00-setup", "06-grammars", "16-where")
    for argument in ("06", "06-grammars", "06-gram", "06-grammars.ipynb", "notebooks/06-grammars.ipynb"):
        assert [path.name for path in select_notebooks(argument, folder)] == ["06-grammars.ipynb"]
    assert len(select_notebooks("", folder)) == 3


def test_make_passes_nb_to_the_script_as_text_never_to_the_shell(tmp_path):
    """The real Makefile: a quote, a backquote or $(shell ...) in NB runs nothing, and the script refuses it."""
    marker = tmp_path / "ran"
    for number, argument in enumerate((f'00"; touch {marker}; echo "', f"`touch {marker}`", f"$(shell touch {marker})")):
        script = [] if number == 0 else ["PY=true"]  # the first through the real runner, the others only the shell
        done = subprocess.run(["make", "-s", "-C", str(REPO), "-o", "setup", "refresh", *script, f"NB={argument}"],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO), "WORKBOOK_THREADS": "1"})
        assert not marker.exists(), argument
        if number == 0:
            assert done.returncode == 2 and "refused: NB=" in done.stderr and "is not a notebook" in done.stderr


# --------------------------------------------------------------------------- 9. torn writes


def test_a_kernelspec_fix_killed_mid_write_leaves_the_notebook_whole(tmp_path, monkeypatch):
    import setup.fix_kernelspec as fix_kernelspec

    path = tmp_path / "00-setup.ipynb"
    shutil.copy(REPO / "notebooks" / "00-setup.ipynb", path)
    before = path.read_bytes()

    def killed_write(notebook, target):
        Path(target).write_text(nbformat.writes(notebook)[:100], encoding="utf-8")
        raise KeyboardInterrupt  # the kill arrives half-way through the write

    monkeypatch.setattr(fix_kernelspec.nbformat, "write", killed_write)
    with pytest.raises(KeyboardInterrupt):
        fix_kernelspec.fix(path, {"display_name": "Other", "language": "python", "name": "python3"})
    assert path.read_bytes() == before and sorted(tmp_path.iterdir()) == [path]


def test_an_embedding_cache_cut_short_is_computed_again(tmp_path):
    def embed_texts(texts):
        return np.ones((len(texts), 384), dtype=np.float32)

    path = tmp_path / "cache.npz"
    SavedEmbeddings(path, embed_texts=embed_texts, model_id="m").embed(["a", "b"])
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a copy or a disk that stopped half-way
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = SavedEmbeddings(path, embed_texts=embed_texts, model_id="m")
    assert len(cache) == 0 and any("cannot be read" in str(warning.message) for warning in caught)
    assert cache.embed(["a"]).shape == (1, 384) and cache.computed == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.npz"]
