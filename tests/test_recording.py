"""The record/replay layer: round trip, missing recordings, fresh files, compact storage, two runs at once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib.backends.factory import BackendConfig
from lib.backends.openai_compatible import ServerUnavailableError
from lib.backends.factory import create_backend
from lib.recording import (CombinedRecordings, discard_abandoned, discard_pending, finish_pending, pending_path,
                           RecordedLLM, recording_lock, RecordingBusyError, RecordingMissingError, RecordingStore,
                           request_key)
from lib.settings import mode_setting

REPO = Path(__file__).resolve().parent.parent

LONG_SYSTEM = "You sort customer messages into intents. " * 8  # 328 characters: over 300, so stored once by hash
CONFIG = BackendConfig("embedded")


def _no_backend():
    raise AssertionError("replay must not create a backend")


def _recorded(tmp_path, mode, backend_factory, name="demo"):
    return RecordedLLM(CONFIG, backend_factory, RecordingStore(name, folder=tmp_path), mode)


def _requests(llm):
    ask = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "my card is lost"}]
    again = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "top-up failed"}]
    return [
        llm.chat(ask, max_tokens=6, top_logprobs=3),
        llm.chat(again, max_tokens=6),
        llm.next_token_logprobs(ask, prefix="A", top_k=5, score_tokens=["A", "B"]),
        llm.tokenize("card_arrival"),
        llm.count_tokens("Where is my card?"),
        llm.info(),
    ]


@pytest.fixture(scope="module")
def demo_recording(tmp_path_factory, embedded):
    """`_requests` recorded once on the embedded model: the file and the answers it was made from.
    Tests that need a recording to start from copy it (`_copy_of`) instead of asking the model again."""
    folder = tmp_path_factory.mktemp("recorded")
    llm = _recorded(folder, "record", lambda: embedded)
    answers = _requests(llm)
    llm.finish_recording()
    return folder / "demo.jsonl", answers


def _copy_of(demo_recording, tmp_path):
    """Put the recorded demo.jsonl in `tmp_path`, as recording `_requests` there would leave it; its answers."""
    path, answers = demo_recording
    (tmp_path / "demo.jsonl").write_bytes(path.read_bytes())
    return answers


def test_replay_round_trip_gives_identical_answers(tmp_path, demo_recording) -> None:
    recorded = _copy_of(demo_recording, tmp_path)
    replayed = _requests(_recorded(tmp_path, "replay", _no_backend))
    assert replayed == recorded


def test_recording_file_is_compact_and_has_a_header(tmp_path, demo_recording) -> None:
    _copy_of(demo_recording, tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "demo.jsonl").read_text().splitlines()]
    header = lines[0]
    assert header["kind"] == "header" and header["model"] == CONFIG.identity()
    assert {"backend", "versions", "date", "command"} <= set(header)
    texts = [line for line in lines if line["kind"] == "text"]
    assert [t["text"] for t in texts] == [LONG_SYSTEM]  # the long system prompt is stored once
    assert sum(line["kind"] == "call" for line in lines) == 6


def test_record_mode_starts_the_file_afresh(tmp_path, demo_recording, embedded) -> None:
    _copy_of(demo_recording, tmp_path)
    llm = _recorded(tmp_path, "record", lambda: embedded)
    llm.tokenize("only this")
    llm.finish_recording()
    calls = RecordingStore("demo", folder=tmp_path).calls()
    assert [c["method"] for c in calls] == ["tokenize"]


def test_missing_recording_names_notebook_and_command(tmp_path) -> None:
    llm = _recorded(tmp_path, "replay", _no_backend, name="06-grammars")
    with pytest.raises(RecordingMissingError, match=r"06-grammars.*make record NB=06-grammars"):
        llm.tokenize("never recorded")


def test_replay_of_another_model_says_so(tmp_path, embedded) -> None:
    llm = _recorded(tmp_path, "record", lambda: embedded)
    llm.tokenize("x")
    llm.finish_recording()
    other = RecordedLLM(BackendConfig("openai", "http://127.0.0.1:1/v1", "other-model"), _no_backend,
                        RecordingStore("demo", folder=tmp_path), "replay")
    with pytest.raises(RecordingMissingError, match="recorded with embedded:.*configured model is openai:other-model"):
        other.tokenize("x")


def test_key_covers_every_argument_and_defaults() -> None:
    messages = [{"role": "user", "content": "hi"}]
    base = {"messages": messages, "max_tokens": 5, "temperature": 0.0, "seed": None, "grammar": None,
            "json_schema": None, "top_logprobs": 0}
    key = request_key("embedded:abc", "chat", base)
    assert key == request_key("embedded:abc", "chat", dict(base))
    assert key != request_key("embedded:abc", "chat", {**base, "max_tokens": 6})
    assert key != request_key("embedded:def", "chat", base)


def test_modes_are_validated(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("WORKBOOK_MODE", "rewind")
    with pytest.raises(ValueError, match="WORKBOOK_MODE"):
        mode_setting()
    with pytest.raises(ValueError, match="recording name"):
        RecordedLLM(CONFIG, _no_backend, None, "replay")
    with pytest.raises(ValueError, match="plain file name"):
        RecordingStore("../escape", folder=tmp_path)


def test_schema_property_order_is_part_of_the_key() -> None:
    request = {"messages": [{"role": "user", "content": "hi"}], "json_schema": None}
    ab = {**request, "json_schema": {"properties": {"a": {"type": "string"}, "b": {"type": "string"}}}}
    ba = {**request, "json_schema": {"properties": {"b": {"type": "string"}, "a": {"type": "string"}}}}
    assert ab == ba  # equal as dicts, but they make different grammars
    assert request_key("embedded:x", "chat", ab) != request_key("embedded:x", "chat", ba)


def _closed_port_server():
    """A real OpenAI-compatible client aimed at a port where nothing listens: every call fails."""
    return create_backend(BackendConfig("openai", "http://127.0.0.1:9/v1", "nothing-here"))


def test_a_failing_model_never_erases_the_recording(tmp_path, demo_recording) -> None:
    _copy_of(demo_recording, tmp_path)
    before = (tmp_path / "demo.jsonl").read_bytes()
    llm = _recorded(tmp_path, "record", _closed_port_server)
    with pytest.raises(ServerUnavailableError, match="127.0.0.1:9"):
        llm.chat([{"role": "user", "content": "hello"}], max_tokens=4)
    assert (tmp_path / "demo.jsonl").read_bytes() == before
    assert discard_pending(tmp_path) == ["demo"]  # what a runner does when the notebook failed
    assert (tmp_path / "demo.jsonl").read_bytes() == before
    assert not list(tmp_path.glob("*.new"))


def test_update_mode_reuses_recorded_answers_and_asks_only_new_requests(tmp_path, demo_recording, embedded) -> None:
    recorded = _copy_of(demo_recording, tmp_path)
    asked = []

    def counting_backend():
        asked.append(1)
        return embedded

    llm = _recorded(tmp_path, "update", counting_backend)
    assert _requests(llm) == recorded
    assert not asked  # every answer came from the old recording
    llm.count_tokens("a request that is new")
    assert asked
    finish_pending(tmp_path)
    calls = RecordingStore("demo", folder=tmp_path).calls()
    assert len(calls) == 7 and calls[-1]["request"] == {"text": "a request that is new"}
    assert RecordingStore("demo", folder=tmp_path).header["command"] == "make update NB=demo"


def test_update_mode_keeps_requests_no_longer_made_and_record_mode_drops_them(tmp_path, demo_recording, embedded) -> None:
    recorded = _copy_of(demo_recording, tmp_path)
    llm = _recorded(tmp_path, "update", _no_backend)
    llm.info()
    llm.finish_recording()
    kept = RecordingStore("demo", folder=tmp_path)
    assert sorted(c["method"] for c in kept.calls()) == sorted(
        ["chat", "chat", "next_token_logprobs", "tokenize", "count_tokens", "info"])
    assert _requests(_recorded(tmp_path, "replay", _no_backend)) == recorded  # long texts came along too
    llm = _recorded(tmp_path, "record", lambda: embedded)
    llm.info()
    llm.finish_recording()
    assert [c["method"] for c in RecordingStore("demo", folder=tmp_path).calls()] == ["info"]


def test_a_runner_in_update_mode_keeps_the_earlier_calls_its_run_did_not_make(tmp_path, demo_recording) -> None:
    _copy_of(demo_recording, tmp_path)
    for keep_earlier, expected in ((True, 6), (False, 1)):
        llm = _recorded(tmp_path, "update", _no_backend)
        llm.info()
        finish_pending(tmp_path, keep_earlier=keep_earlier)
        assert len(RecordingStore("demo", folder=tmp_path)) == expected
    recorded = _copy_of(demo_recording, tmp_path)
    llm = _recorded(tmp_path, "update", _no_backend)
    llm.tokenize("card_arrival")
    finish_pending(tmp_path, keep_earlier=True)
    assert _requests(_recorded(tmp_path, "replay", _no_backend)) == recorded


def test_a_damaged_recording_names_the_file_and_line(tmp_path, demo_recording) -> None:
    _copy_of(demo_recording, tmp_path)
    path = tmp_path / "demo.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
    with pytest.raises(ValueError, match=r"demo\.jsonl, line 4: not valid JSON"):
        RecordingStore("demo", folder=tmp_path)


def test_empty_file_and_folder_are_not_called_missing(tmp_path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    llm = _recorded(tmp_path, "replay", _no_backend, name="empty")
    with pytest.raises(RecordingMissingError, match="is empty"):
        llm.tokenize("x")
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(IsADirectoryError, match="is a folder"):
        RecordingStore("folder", folder=tmp_path)


class _Tokenizer:
    """A backend that only tokenizes, by spaces: enough to record a few calls without a model."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()


def test_combined_recordings_answer_from_the_first_that_holds_a_request(tmp_path) -> None:
    for name, text in (("first", "a b"), ("second", "c d e")):
        llm = _recorded(tmp_path, "record", _Tokenizer, name=name)
        llm.tokenize(text)
        llm.finish_recording()
    combined = CombinedRecordings(["first", "second"], folder=tmp_path)
    combined.check_model(CONFIG.identity())
    replay = RecordedLLM(CONFIG, _no_backend, combined, "replay")
    assert replay.tokenize("a b") == ["a", "b"] and replay.tokenize("c d e") == ["c", "d", "e"]
    with pytest.raises(RecordingMissingError, match="first [+] second") as missing:
        replay.tokenize("never recorded")
    # one real command per recording: `make record NB=first + second` is not a command
    assert "`make update NB=first` and `make update NB=second`" in str(missing.value)
    assert "NB=first +" not in str(missing.value)
    with pytest.raises(ValueError, match="another model"):
        combined.check_model("embedded:another")
    with pytest.raises(ValueError, match="read-only"):
        RecordedLLM(CONFIG, _no_backend, combined, "record")


def test_only_live_mode_hands_over_its_backend(tmp_path) -> None:
    backend = _Tokenizer()
    live = _recorded(tmp_path, "live", lambda: backend)
    assert live.live_backend() is backend and live.backend_name == "embedded"
    for mode in ("replay", "record"):
        assert _recorded(tmp_path, mode, _no_backend).live_backend() is None


@pytest.mark.parametrize("line, problem", [
    ('{"kind": "call", "method": "tokenize", "request": {"text": "x"}, "answer": ["x"]}\n', "a call entry without key"),
    ('{"kind": "text", "sha": "abc"}\n', "a text entry without text"),
    ('{"kind": "call", "key": "\xff"}\n', "not valid UTF-8"),
])
def test_a_damaged_line_that_parses_names_the_file_and_line(tmp_path, line, problem) -> None:
    llm = _recorded(tmp_path, "record", _Tokenizer)
    llm.tokenize("a b")
    llm.finish_recording()
    path = tmp_path / "demo.jsonl"
    encoded = line.encode("latin-1") if "\xff" in line else line.encode("utf-8")  # a byte that is never UTF-8
    path.write_bytes(path.read_bytes() + encoded)
    with pytest.raises(ValueError, match=rf"demo\.jsonl, line 3: {problem}.*make record NB=demo"):
        RecordingStore("demo", folder=tmp_path)


# -- two runs at once: each in its own process, as `make update NB=A` and `make update NB=B` are

WRITER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from lib.backends.factory import BackendConfig
from lib.recording import RecordedLLM, RecordingStore, finish_pending

folder, name, calls, paused, resume = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]

class Tokenizer:
    def tokenize(self, text):
        return text.split()

llm = RecordedLLM(BackendConfig("embedded"), Tokenizer, RecordingStore(name, folder=folder), "record")
for number in range(calls):
    llm.tokenize(f"{name} call {number}")
    if paused and number == calls // 2:  # half-way: let the other run start, then end, meanwhile
        Path(paused).touch()
        while not Path(resume).exists():
            time.sleep(0.02)
finish_pending(folder)  # what the runner does once the notebook succeeded
"""


def _writer(folder: Path, name: str, calls: int, paused: Path | None = None,
            resume: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(REPO), str(folder), name, str(calls),
                             str(paused or ""), str(resume or "")], stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, f"the writer ended early: {process.stderr.read()}"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def _whole(folder: Path, name: str) -> list[str]:
    """The texts tokenized in a recording, after checking it has its header."""
    store = RecordingStore(name, folder=folder)
    assert store.header is not None and store.header["recording"] == name, f"{name}.jsonl lost its header"
    return [call["request"]["text"] for call in store.calls()]


@pytest.mark.parametrize("second_name", ["first", "second"], ids=["same notebook", "another notebook"])
def test_a_run_finishing_meanwhile_never_touches_another_runs_new_recording(tmp_path, second_name) -> None:
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    first = _writer(tmp_path, "first", 6, paused, resume)
    _wait_for(paused, first)  # the first run has written half of its new recording
    second = _writer(tmp_path, second_name, 3)
    assert second.wait(timeout=60) == 0, second.stderr.read()
    resume.touch()
    assert first.wait(timeout=60) == 0, first.stderr.read()
    assert _whole(tmp_path, "first") == [f"first call {n}" for n in range(6)]  # the run that finished last
    if second_name == "second":
        assert _whole(tmp_path, "second") == [f"second call {n}" for n in range(3)]
    assert not list(tmp_path.glob("*.new"))


HOLDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from lib.recording import recording_lock

with recording_lock("demo", Path(sys.argv[2])):
    Path(sys.argv[3]).touch()
    time.sleep(120)
"""


def test_a_second_run_on_a_notebook_is_refused_until_the_first_ends_even_killed(tmp_path) -> None:
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(REPO), str(tmp_path), str(ready)],
                              stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(ready, holder)
        with pytest.raises(RecordingBusyError, match=rf"demo is being recorded by another run \(process {holder.pid}"):
            with recording_lock("demo", tmp_path):
                pass
    finally:
        holder.kill()  # no chance to clean up: the system releases its lock
        holder.wait(timeout=30)
    with recording_lock("demo", tmp_path):
        with recording_lock("other", tmp_path):  # another notebook is not held by it
            pass


def test_abandoned_new_recordings_are_removed_and_running_ones_kept(tmp_path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    abandoned = pending_path("crashed", int(ended.stdout), tmp_path)
    running = pending_path("running", os.getpid(), tmp_path)
    for path in (abandoned, running):
        path.write_text("{}\n")
    assert discard_abandoned(tmp_path) == ["crashed"]
    assert running.exists() and not abandoned.exists()
