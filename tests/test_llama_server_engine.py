"""llama.cpp's own server (`make serve`, through the prebuilt xllamacpp wheel) on 127.0.0.1, with the
real model: the workbook's OpenAI-compatible client gets grammar-constrained replies, top logprobs and
JSON-schema replies from it, two learners' requests are computed together, what it cannot give raises
`CapabilityError` naming what to use instead, and `make serve` stops its engine on SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from lib.backends.protocol import CapabilityError
from lib.model_file import DEFAULT_MODEL
from lib.backends.openai_compatible import OpenAICompatibleLLM
from lib.backends.server import free_port
from setup.serve import running_llama_server

REPO = Path(__file__).resolve().parent.parent
QUESTION = [{"role": "user", "content": "Is Paris the capital of France? Answer yes or no."}]


@pytest.fixture(scope="module")
def engine():
    """One llama-server for the file: two slots of 1,024 tokens (the prompts here are short), one thread."""
    with running_llama_server(slots=2, n_ctx=1024, threads=1) as server:
        yield server


@pytest.fixture(scope="module")
def client(engine):
    return OpenAICompatibleLLM(engine.base_url, engine.model, timeout=300)


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_it_serves_the_readme_model_id_and_reports_each_slots_context(engine, client):
    info = client.info()
    assert engine.model == DEFAULT_MODEL.name and info["server_models"] == [DEFAULT_MODEL.name]
    assert info["context_tokens"] == engine.n_ctx == 1024
    assert client.tokenize("Paris is") == ["Paris", " is"]


def test_a_grammar_constrained_reply_with_top_logprobs(client):
    reply = client.chat(QUESTION, max_tokens=4, grammar='root ::= "yes" | "no"', top_logprobs=5)
    assert reply.text in ("yes", "no")
    first = reply.tokens[0]
    assert len(first.top) == 5 and first.top == tuple(sorted(first.top, key=lambda pair: -pair[1]))
    assert first.token == reply.text and all(logprob <= 0 for _, logprob in first.top)
    # The candidates are the model's distribution before the grammar's mask (as the embedded model
    # reports it), so the chosen token is among them and the top five add up to at most 1.
    assert first.token in dict(first.top) and sum(2.718281828 ** lp for _, lp in first.top) <= 1 + 1e-6


def test_it_gives_more_candidates_than_the_librarys_default_cap_when_asked(engine, client):
    with pytest.raises(CapabilityError, match="at most 20 top candidates.*WORKBOOK_MAX_TOP_LOGPROBS"):
        client.chat(QUESTION, max_tokens=1, top_logprobs=200)
    wider = OpenAICompatibleLLM(engine.base_url, engine.model, max_top_logprobs=200, timeout=300)
    assert len(wider.chat(QUESTION, max_tokens=1, top_logprobs=200).tokens[0].top) == 200


def test_next_token_logprobs_scores_the_asked_tokens(client):
    probe = client.next_token_logprobs(QUESTION, top_k=3, score_tokens=["yes", "Yes", "no"])
    assert len(probe.top) == 3 and set(probe.scores) <= {"yes", "Yes", "no"} and probe.scores
    assert max(probe.scores.values()) <= probe.top[0][1]


def test_a_json_schema_reply_follows_the_schema(client):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["answer"]}
    reply = client.chat(QUESTION, max_tokens=16, json_schema=schema)
    assert json.loads(reply.text)["answer"] in ("yes", "no")


def test_two_learners_requests_are_computed_together(engine, client):
    """Both slots are busy at one moment (the engine's /slots), and each learner gets the reply it
    gets alone: the second request does not queue behind the first."""
    root = engine.base_url[: -len("/v1")]
    messages = [[{"role": "user", "content": f"Count from 1 to 20 in words, starting with {word}."}]
                for word in ("one", "two")]
    alone = [client.chat(m, max_tokens=6).text for m in messages]
    replies: dict[int, str] = {}
    most_busy = 0

    def ask(number: int) -> None:
        replies[number] = OpenAICompatibleLLM(engine.base_url, engine.model, timeout=300).chat(
            messages[number], max_tokens=6).text

    learners = [threading.Thread(target=ask, args=(number,)) for number in (0, 1)]
    for learner in learners:
        learner.start()
    while any(learner.is_alive() for learner in learners):
        slots = httpx.get(f"{root}/slots", timeout=10).json()
        most_busy = max(most_busy, sum(bool(slot.get("is_processing")) for slot in slots))
        time.sleep(0.05)
    for learner in learners:
        learner.join()
    assert most_busy == 2
    assert [replies[0], replies[1]] == alone


def test_the_load_tests_learners_are_answered_and_their_reply_tokens_counted(engine):
    from setup.load_test import Request, run_level

    requests = [Request("tokenize", {"text": "Where is my card?"}, "tokenize"),
                Request("chat", {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 2}, "chat")]
    level = run_level(engine.base_url, engine.model, requests, learners=3, seconds=600)
    assert (len(level.latencies["tokenize"]), len(level.latencies["chat"])) == (3, 3)
    assert not level.errors and level.timeouts == 0 and level.not_sent == 0
    assert 3 <= level.reply_tokens <= 6 and level.tokens_per_second() > 0


def test_what_a_server_cannot_give_says_what_to_use_instead(client):
    with pytest.raises(CapabilityError, match=r"chat\(\.\.\., grammar=\.\.\., top_logprobs=k\).*embedded backend"):
        client.next_token_logprobs(QUESTION, prefix="The answer is")
    from lib.datasets import LabelGroups
    from lib.decisions import FullListDecider

    groups = LabelGroups({"cards": ["card_lost", "card_arrived"]},
                         {"card_lost": "my card is lost", "card_arrived": "my card came"}, {"cards": "cards"})
    with pytest.raises(CapabilityError, match="embedded backend"):
        FullListDecider(client, groups, exact=True)


def test_a_server_that_cannot_start_says_why(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(RuntimeError, match=r"cannot listen on 127\.0\.0\.1:\d+ .*choose another one"):
            with running_llama_server(port=taken.getsockname()[1], slots=1, n_ctx=512, threads=1):
                pass
    not_a_model = tmp_path / "not-a-model.gguf"
    not_a_model.write_bytes(b"\0" * 1024)
    with pytest.raises(RuntimeError, match="llama-server did not start with .*not-a-model.gguf"):
        with running_llama_server(not_a_model, slots=1, n_ctx=512, threads=1):
            pass


@pytest.mark.slow
def test_sigterm_to_make_serve_stops_its_engine():
    """`make serve` killed as a teacher's Ctrl+C or a service manager would: the port is free afterwards."""
    port = free_port()
    env = {**os.environ, "WORKBOOK_THREADS": "1", "WORKBOOK_N_CTX": "512"}
    serve = subprocess.Popen([sys.executable, str(REPO / "setup" / "serve.py"), "--port", str(port), "--slots", "1"],
                             cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        printed = []
        while not printed or "Ctrl+C stops it." not in printed[-1]:  # printed once it answers
            printed.append(serve.stdout.readline())
            assert printed[-1], "".join(printed)  # it ended before serving
        assert _answers(port)
        serve.send_signal(signal.SIGTERM)
        output = "".join(printed) + serve.communicate(timeout=60)[0]
    finally:
        if serve.poll() is None:
            serve.kill()
    assert serve.returncode == 130, output
    assert f"export WORKBOOK_BASE_URL=http://127.0.0.1:{port}/v1" in output
    assert f"export WORKBOOK_MODEL={DEFAULT_MODEL.name}" in output
    assert "interrupted: the server was stopped" in output
    assert not _answers(port)
