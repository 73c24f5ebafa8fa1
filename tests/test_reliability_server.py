"""Bad servers and bad inputs give clear errors within seconds (issue 14, items 9, 10, 11).

Each misbehaving server is a real HTTP server on 127.0.0.1 (http.server in a thread) that
answers the way a broken or foreign server does; the last tests use llama-cpp-python's own
server (fixture `server_url`).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lib.backends.protocol import CapabilityError
from lib.backends.openai_compatible import OpenAICompatibleLLM, ServerError, sized_deadline
from lib.settings import timeout_setting

MESSAGES = [{"role": "user", "content": "hello"}]


class Misbehaving(BaseHTTPRequestHandler):
    """Answers every request with `status` and `body`; `trickle` sends the body a byte at a time."""

    status = 200
    body = b""
    content_type = "application/json"
    trickle: float = 0.0
    drop_after: int | None = None

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(self.status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        try:
            if self.drop_after is not None:
                self.wfile.write(self.body[: self.drop_after])
                self.wfile.flush()
                self.close_connection = True
                return
            if self.trickle:
                # 60 bytes over 60 * trickle seconds, then give up: a client without a deadline for
                # the whole request (one per read only) waits all that time
                for byte in self.body[:60]:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(self.trickle)
                return
            self.wfile.write(self.body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = _answer


def _serve(**attributes):
    handler = type("Handler", (Misbehaving,), attributes)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # shutdown() waits for the loop to look at its flag: every 0.05 s, not the default 0.5 s (25 tests)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture
def serve():
    servers = []

    def start(**attributes) -> str:
        server = _serve(**attributes)
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


GOOD_REPLY = json.dumps({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()


def test_a_trickling_server_hits_the_whole_request_deadline(serve, monkeypatch):
    url = serve(body=GOOD_REPLY, trickle=1.0)
    monkeypatch.setenv("WORKBOOK_TIMEOUT", "3")
    llm = OpenAICompatibleLLM(url, "m")
    start = time.monotonic()
    with pytest.raises(ServerError, match=rf"{url}/chat/completions.*3 s.*WORKBOOK_TIMEOUT"):
        llm.chat(MESSAGES, max_tokens=3)
    assert time.monotonic() - start < 30  # 3 s here; ten times that is still half the 60 s trickle


def test_without_a_setting_the_deadline_grows_with_the_request(serve, monkeypatch):
    """A full-list decision (a 77-intent prompt) gets minutes without any setting; a stuck server
    still fails a short request with an error that says the deadline was sized and how to set one."""
    import lib.backends.openai_compatible as openai_compatible

    monkeypatch.delenv("WORKBOOK_TIMEOUT", raising=False)
    assert timeout_setting() is None and OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m").timeout is None
    full_list_prompt = 7000  # characters of the 77-intent system prompt and a message
    assert sized_deadline(full_list_prompt, 3) >= 150 > 40 > sized_deadline(200, 3) >= 30
    monkeypatch.setattr(openai_compatible, "BASE_DEADLINE_S", 1.0)
    url = serve(body=GOOD_REPLY, trickle=1.0)
    start = time.monotonic()
    with pytest.raises(ServerError, match=rf"{url}/chat/completions.*within 1\.\d+ s \(the default deadline for a "
                                          r"request of this size; WORKBOOK_TIMEOUT sets a fixed one\)"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=1)
    assert time.monotonic() - start < 15  # about 1.5 s here; the trickle lasts 60 s


def test_the_deadline_is_settable_and_checked(monkeypatch):
    monkeypatch.setenv("WORKBOOK_TIMEOUT", "2.5")
    assert timeout_setting() == 2.5
    assert OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m").timeout == 2.5
    for bad in ("soon", "0", "-3", "nan"):
        monkeypatch.setenv("WORKBOOK_TIMEOUT", bad)
        with pytest.raises(ValueError, match="WORKBOOK_TIMEOUT"):
            timeout_setting()


@pytest.mark.parametrize("body, what", [
    (b"<html>gateway error</html>", "not JSON"),
    (b'{"object": "chat.completion"}', "choices"),
    (b'{"choices": []}', "choices"),
    (b'{"choices": [{"finish_reason": "stop"}]}', "message"),
    (b'{"choices": [{"message": {"content": "hi"}, "logprobs": {"content": [{"token": "hi"}]}}]}', "logprob"),
    (b'[1, 2, 3]', "choices"),
])
def test_a_malformed_answer_names_the_url_and_what_is_wrong(serve, body, what):
    url = serve(body=body)
    with pytest.raises(ServerError, match=rf"{url}/chat/completions.*{what}"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)


def test_a_connection_dropped_mid_answer_names_the_url(serve):
    url = serve(body=GOOD_REPLY, drop_after=10)
    with pytest.raises(ServerError, match=rf"{url}/chat/completions.*(closed|broke)"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)


def test_a_server_error_that_mentions_logprobs_is_a_server_error(serve):
    url = serve(status=500, body=b'{"error": "CUDA out of memory while computing logprobs"}')
    with pytest.raises(ServerError, match=r"answered 500.*CUDA out of memory") as error:
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)
    assert not isinstance(error.value, CapabilityError)


def test_a_refused_logprobs_request_is_still_a_capability_error(serve):
    url = serve(status=400, body=b'{"error": "logprobs is not supported by this model"}')
    with pytest.raises(CapabilityError, match="logprobs is not supported"):
        OpenAICompatibleLLM(url, "m").chat(MESSAGES, max_tokens=3)


@pytest.mark.parametrize("status, body, content_type", [
    (200, b"<html><body>It works!</body></html>", "text/html"),
    (404, b"not found", "text/plain"),
    (200, b'{"status": "ok"}', "application/json"),
])
def test_info_refuses_a_server_that_is_not_openai_compatible(serve, status, body, content_type):
    url = serve(status=status, body=body, content_type=content_type)
    with pytest.raises(ServerError, match=rf"{url}/models.*not an OpenAI-compatible"):
        OpenAICompatibleLLM(url, "m").info()


def test_info_of_a_compatible_server(serve):
    url = serve(body=b'{"object": "list", "data": [{"id": "qwen", "object": "model"}]}')
    assert OpenAICompatibleLLM(url, "qwen").info()["server_models"] == ["qwen"]


@pytest.mark.parametrize("grammar", ["", "   \n", "root ::= ( unclosed", 'answer ::= "yes"'])
def test_a_bad_grammar_is_refused_before_anything_is_sent(grammar):
    llm = OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m")  # nothing listens: a request would fail differently
    with pytest.raises(ValueError, match="grammar"):
        llm.chat(MESSAGES, max_tokens=3, grammar=grammar)


@pytest.mark.parametrize("grammar", ["", "root ::= ( unclosed"])
def test_the_embedded_model_refuses_a_bad_grammar(embedded, grammar):
    with pytest.raises(ValueError, match="grammar"):
        embedded.chat(MESSAGES, max_tokens=3, grammar=grammar)


def test_a_real_server_survives_a_malformed_grammar(served):
    with pytest.raises(ValueError, match="could not parse"):
        served.chat(MESSAGES, max_tokens=3, grammar='root ::= "yes" | ( "no"')
    assert served.chat(MESSAGES, max_tokens=3, grammar='root ::= "yes" | "no"').text in ("yes", "no")


def test_every_documented_server_command_gives_the_context_size():
    """A server started with llama_cpp.server's default 2,048-token context fails on long messages."""
    import re
    from pathlib import Path

    from lib.backends.openai_compatible import ServerUnavailableError

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"python -m llama_cpp\.server [^`]*", readme)
    assert commands and all("--n_ctx 4096" in command for command in commands)
    with pytest.raises(ServerUnavailableError, match="--n_ctx 4096"):
        OpenAICompatibleLLM("http://127.0.0.1:9/v1", "m").chat(MESSAGES, max_tokens=3)
