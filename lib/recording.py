"""Record and replay model calls, so notebooks run offline, deterministically and fast.

Every model call a notebook makes goes through `RecordedLLM`. The mode comes from
`WORKBOOK_MODE`:

* `live` (default): call the model; nothing is written.
* `record`: call the model and write each request and answer to a new recording beside the
  old one, `data/recordings/<name>.jsonl.<run id>.new`.
* `update`: like `record`, but a request already answered in the old recording (same model,
  same request) takes that answer instead of calling the model; only new requests reach it.
  Editing a notebook then costs only the model time of the cells that changed. The calls of
  the old recording that this run did not make are kept too (`finish_pending(keep_earlier=True)`):
  a saved run made in replay mode from a notebook's recording needs calls the notebook itself no
  longer makes. `record` starts afresh and keeps only the calls its run made.
* `replay`: answer from the recording without loading any model; a request that was never
  recorded raises `RecordingMissingError`, naming the notebook and the command to record it.

In `record` and `update` modes the old recording stays untouched until the new one is
complete: `finish_recording()` (or `finish_pending()`, which `make record` / `make update` call
once the notebook ran without error) replaces it; `discard_pending()` removes an unfinished new
recording. A model that fails half-way therefore never costs the recording that was there.

Two runs at once never touch each other's files: a new recording carries the id of the run
that writes it (`lib.settings.run_id_setting()`, the process id of `make record`'s runner, which its
notebook kernels inherit through `WORKBOOK_RUN_ID`), and a run finishes or discards only its
own. `recording_lock()` keeps a second run off a notebook that one run is already writing.

A recording's key is a hash of the model's identity (the GGUF's sha256, or the server's model
id) and the full request, so answers recorded with one model never replay for another. Each
file starts with a header line (model, backend, library versions, date); long message texts
are stored once and referred to by hash, which keeps files with a repeated system prompt small.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from lib.backends.common import LocalMethods, library_versions
from lib.backends.factory import BackendConfig, create_backend
from lib.backends.protocol import LLM, Completion, JsonSchema, Message, NextTokenLogprobs, TokenLogprob, validate_messages
from lib.hashing import fingerprint
from lib.saved_runs.store import LOCK_SUFFIX, SECOND_MODELS, exclusive_lock
from lib.settings import MODES, mode_setting, run_id_setting

__all__ = [
    "RECORDINGS_DIR", "recordings_dir_for", "WRITING_MODES", "PENDING_SUFFIX",
    "RecordingMissingError", "RecordingBusyError", "request_key", "encode_answer",
    "decode_answer", "read_recording", "RecordingStore", "CombinedRecordings", "RecordedLLM", "pending_path",
    "pending_recordings", "finish_pending", "discard_pending", "discard_abandoned", "recording_lock", "get_llm",
]

RECORDINGS_DIR = Path(__file__).resolve().parent.parent / "data" / "recordings"


def recordings_dir_for(model_key: str | None) -> Path:
    """Where a model's recordings live: `RECORDINGS_DIR` for the default model (`model_key` None, see
    `lib.model_file.model_key`), `RECORDINGS_DIR/models/<key>` for any other, as saved runs are filed
    (`lib.saved_runs.store.results_dir_for`)."""
    return RECORDINGS_DIR if model_key is None else RECORDINGS_DIR / SECOND_MODELS / model_key
WRITING_MODES = ("record", "update")
PENDING_SUFFIX = ".new"
"""A recording being written is `<name>.jsonl.<run id>.new` until `finish_recording()` replaces `<name>.jsonl`."""
_INLINE_TEXT = 300  # message texts longer than this are stored once, by hash
_ENTRY_FIELDS = {"header": (), "text": ("sha", "text"), "call": ("key", "method", "request", "answer")}
"""The fields each kind of line in a recording must have."""


class RecordingMissingError(LookupError):
    """Replay mode met a request that was never recorded."""


class RecordingBusyError(RuntimeError):
    """Another run is writing this notebook's recording (it holds `recording_lock`)."""


def request_key(identity: str, method: str, request: dict[str, Any]) -> str:
    """The recording key: model identity + method + every argument of the request.

    A JSON schema's property order changes the grammar (and so the answer) although the
    schema compares equal as a dict, so its text in order is part of the key.
    """
    payload = {"model": identity, "method": method, "request": request}
    if request.get("json_schema") is not None:
        payload["json_schema_in_order"] = json.dumps(request["json_schema"], ensure_ascii=False)
    return fingerprint(payload)


# Answers are frozen dataclasses; JSON turns their tuples into lists, so decode rebuilds them.

def encode_answer(answer: Any) -> Any:
    if dataclasses.is_dataclass(answer):
        return dataclasses.asdict(answer)
    return answer


def _decode_completion(data: dict) -> Completion:
    tokens = tuple(TokenLogprob(t["token"], t["logprob"], tuple((c, p) for c, p in t["top"]))
                   for t in data["tokens"])
    return Completion(**{**data, "tokens": tokens})


def _decode_next_token(data: dict) -> NextTokenLogprobs:
    return NextTokenLogprobs(tuple((c, p) for c, p in data["top"]), data["scores"], data["seconds"])


def decode_answer(method: str, data: Any) -> Any:
    """The answer object of a recorded call (`Completion`, `NextTokenLogprobs`, ...) from its JSON form."""
    return _DECODERS[method](data)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "chat": _decode_completion,
    "next_token_logprobs": _decode_next_token,
    "tokenize": list,
    "count_tokens": int,
    "info": dict,
}


def read_recording(path: Path, name: str) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]], dict[str, str]]:
    """The header, the calls by key and the texts by sha256 prefix of one recording file (finished or new).

    A line that is not UTF-8 or JSON, of an unknown kind or without its fields raises ValueError
    naming the file, the line and the command that records `name` again.
    """
    damaged = f"the recording is damaged: restore it with git or record it again (make record NB={name})"
    header: dict[str, Any] | None = None
    calls: dict[str, dict[str, Any]] = {}
    texts: dict[str, str] = {}
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path}, line {number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{where}: not valid UTF-8 (byte {error.start + 1} of the line); {damaged}") from None
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not valid JSON ({error.msg}); {damaged}") from None
            kind = entry.get("kind") if isinstance(entry, dict) else None
            if kind not in _ENTRY_FIELDS:
                raise ValueError(f"{where}: unknown entry kind {kind!r}; {damaged}")
            missing = [field for field in _ENTRY_FIELDS[kind] if field not in entry]
            if missing:
                raise ValueError(f"{where}: a {kind} entry without {', '.join(missing)}; {damaged}")
            if kind == "header":
                header = entry
            elif kind == "text":
                texts[entry["sha"]] = entry["text"]
            else:
                calls[entry["key"]] = entry
    return header, calls, texts


class RecordingStore:
    """One JSONL file of recorded calls for one notebook (or test, or script).

    Reading never writes. Writing (`start`, `put`) goes to `pending_path`, beside the recording;
    `finish` replaces the recording with it, so the old file is intact until the new one is whole.
    """

    def __init__(self, name: str, folder: Path = RECORDINGS_DIR) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"recording name {name!r} must be a plain file name such as '00-setup'")
        self.name = name
        self.path = folder / f"{name}.jsonl"
        self.pending_path = pending_path(name, run_id_setting(), folder)
        self.header: dict[str, Any] | None = None
        self._calls: dict[str, dict[str, Any]] = {}
        self._texts: dict[str, str] = {}
        self._previous_calls: dict[str, dict[str, Any]] = {}
        self.writing = False
        if self.path.is_dir():
            raise IsADirectoryError(f"{self.path} is a folder, not a recording file: move it away and record again")
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        self.header, self._calls, self._texts = read_recording(self.path, self.name)

    def __len__(self) -> int:
        return len(self._calls)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._calls.get(key)

    def calls(self) -> list[dict[str, Any]]:
        """Every recorded call with its request's texts restored, in file order."""
        return [{**call, "request": self._restore(call["request"])} for call in self._calls.values()]

    def previous_answer(self, key: str) -> Any | None:
        """While writing: the stored answer of the call with this key in the recording being replaced."""
        call = self._previous_calls.get(key)
        return None if call is None else call["answer"]

    def start(self, header: dict[str, Any]) -> None:
        """Begin a new recording in `pending_path`; the existing recording stays until `finish`."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._previous_calls = self._calls
        self.header = {"kind": "header", "recording": self.name, **header}
        self._calls, self._texts = {}, {}
        with open(self.pending_path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(self.header, ensure_ascii=False, sort_keys=True) + "\n")
        self.writing = True

    def put(self, key: str, method: str, request: dict[str, Any], answer: Any) -> None:
        if not self.writing:
            raise RuntimeError("call start() before put(): a recording is always written from its beginning")
        lines = []
        stored_request = self._compact(request, lines)
        entry = {"kind": "call", "key": key, "method": method, "request": stored_request,
                 "answer": encode_answer(answer)}
        self._calls[key] = entry
        lines.append(entry)
        with open(self.pending_path, "a", encoding="utf-8") as handle:
            for line in lines:
                # Key order is kept: a JSON schema's property order shapes the grammar built from it.
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        """Replace the recording with the new one (an atomic rename); nothing happens when not writing."""
        if not self.writing:
            return
        _synced(self.pending_path)
        os.replace(self.pending_path, self.path)
        self.writing = False
        self._previous_calls = {}

    def _compact(self, request: dict[str, Any], new_lines: list[dict]) -> dict[str, Any]:
        """Replace long message texts by {"sha": ...}, queueing each new text once."""
        if "messages" not in request:
            return request
        messages = []
        for message in request["messages"]:
            content = message["content"]
            if len(content) > _INLINE_TEXT:
                sha = fingerprint(content)
                if sha not in self._texts:
                    self._texts[sha] = content
                    new_lines.append({"kind": "text", "sha": sha, "text": content})
                content = {"sha": sha}
            messages.append({"role": message["role"], "content": content})
        return {**request, "messages": messages}

    def _restore(self, request: dict[str, Any]) -> dict[str, Any]:
        if "messages" not in request:
            return request
        messages = [{"role": m["role"],
                     "content": self._texts[m["content"]["sha"]] if isinstance(m["content"], dict) else m["content"]}
                    for m in request["messages"]]
        return {**request, "messages": messages}


class CombinedRecordings:
    """Several recordings read as one, for replay only: the first that holds a request answers it.

    A saved run over items (`lib.saved_runs.questions`) replays the answers that several notebooks
    recorded; `RecordedLLM` reads this exactly as it reads one `RecordingStore`, and refuses
    it in any mode that writes.
    """

    writing = False

    def __init__(self, names: Sequence[str], folder: Path = RECORDINGS_DIR) -> None:
        if not names:
            raise ValueError("name at least one recording")
        self.stores = [RecordingStore(name, folder) for name in names]
        self.name = " + ".join(names)
        self.path = self.stores[0].path
        self.header = self.stores[0].header

    def get(self, key: str) -> dict[str, Any] | None:
        """The recorded call with this key in the first recording that holds it, else None."""
        for store in self.stores:
            found = store.get(key)
            if found is not None:
                return found
        return None

    def check_model(self, identity: str) -> None:
        """Raise ValueError unless every recording exists and was made with the model `identity`."""
        for store in self.stores:
            if store.header is None or store.header.get("model") != identity:
                raise ValueError(f"{store.path} is missing or was recorded with another model than {identity}")


class RecordedLLM(LocalMethods):
    """The model as notebooks see it: the configured backend behind the record/replay layer.

    In replay mode the backend is never created, so replaying needs no model file and no server.
    Embeddings are computed locally in every mode (see lib.embeddings).
    """

    def __init__(self, config: BackendConfig, backend_factory: Callable[[], LLM],
                 recording: RecordingStore | CombinedRecordings | str | None, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: use one of {MODES}")
        if mode != "live" and recording is None:
            raise ValueError(f"WORKBOOK_MODE={mode} needs a recording name: get_llm(recording='00-setup')")
        if mode in WRITING_MODES and isinstance(recording, CombinedRecordings):
            raise ValueError(f"combined recordings ({recording.name}) are read-only: use them in replay mode")
        self.mode = mode
        self.config = config
        self.identity = config.identity()
        self._backend_factory = backend_factory
        self._store = (RecordingStore(recording, recordings_dir_for(config.files_key())) if isinstance(recording, str)
                       else recording)

    @property
    def backend_name(self) -> str:
        """Which backend answers, "embedded" or "openai", known without loading it."""
        return self.config.backend

    def live_backend(self) -> LLM | None:
        """The backend itself when calls may bypass this layer (live mode), else None.

        In the other modes every call must pass through `chat`, `next_token_logprobs` ... to
        be recorded or replayed, so code that can drive a backend directly (the exact
        decisions of `lib.decisions`) uses the public API there instead.
        """
        return self._backend() if self.mode == "live" else None

    def _backend(self) -> LLM:
        """The backend (created on first use; never in replay mode)."""
        if self.mode == "replay":
            raise RuntimeError("replay mode does not load a model; set WORKBOOK_MODE=live to use it")
        return self._backend_factory()

    # -- the public API, same signatures as the backends

    def chat(self, messages: Sequence[Message], *, max_tokens: int, temperature: float = 0.0,
             seed: int | None = None, grammar: str | None = None,
             json_schema: JsonSchema | None = None, top_logprobs: int = 0) -> Completion:
        request = dict(messages=validate_messages(messages), max_tokens=max_tokens, temperature=temperature,
                       seed=seed, grammar=grammar, json_schema=json_schema, top_logprobs=top_logprobs)
        return self._call("chat", request)

    def next_token_logprobs(self, messages: Sequence[Message], *, prefix: str = "", top_k: int = 20,
                            score_tokens: Sequence[str] = ()) -> NextTokenLogprobs:
        request = dict(messages=validate_messages(messages), prefix=prefix, top_k=top_k,
                       score_tokens=list(score_tokens))
        return self._call("next_token_logprobs", request)

    def tokenize(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return self._call("tokenize", {"text": text})

    def count_tokens(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return self._call("count_tokens", {"text": text})

    def info(self) -> dict[str, object]:
        return self._call("info", {})

    # -- the layer itself

    def _call(self, method: str, request: dict[str, Any]) -> Any:
        if self.mode == "live":
            return getattr(self._backend(), method)(**request)
        if self.mode in WRITING_MODES and not self._store.writing:
            self._store.start(self._header())
        key = request_key(self.identity, method, request)
        recorded = self._store.get(key)
        if recorded is not None:  # replay, or the same request twice in one recording
            return _DECODERS[method](recorded["answer"])
        if self.mode == "replay":
            raise RecordingMissingError(self._missing_message(method))
        earlier = self._store.previous_answer(key) if self.mode == "update" else None
        if earlier is not None:
            answer = _DECODERS[method](earlier)
        else:
            answer = getattr(self._backend(), method)(**request)
        self._store.put(key, method, request, answer)
        return answer

    def finish_recording(self) -> None:
        """Record/update mode: replace the old recording with the one this process wrote.

        Call it once every request of the notebook was answered (`make record` does, when the
        notebook ran without error). Until then the old recording is untouched. In update mode
        the old recording's calls this process did not make are kept (`finish_pending`).
        """
        if self.mode == "update" and self._store.writing:
            _append_earlier_calls(self._store.pending_path, self._store.path)
        self._store.finish()

    def _header(self) -> dict[str, Any]:
        return {"model": self.identity, "backend": self.config.backend, "versions": library_versions(),
                "date": datetime.date.today().isoformat(),
                "command": f"make {self.mode} NB={self._store.name}"}

    def _missing_message(self, method: str) -> str:
        stores = self._store.stores if isinstance(self._store, CombinedRecordings) else [self._store]
        reasons = [reason for reason in (self._unusable(store) for store in stores) if reason]
        if not reasons:
            files = ", ".join(f"data/recordings/{store.path.name}" for store in stores)
            holder = files if len(stores) == 1 else f"none of {files}"
            reasons = [f"{holder} has {'no' if len(stores) == 1 else 'an'} answer for this {method} request "
                       "(the request changed since it was recorded)"]
        names = [store.name for store in stores]
        if len(names) == 1:
            how = (f"Record it with `make record NB={names[0]}` (every call afresh) or `make update NB={names[0]}` "
                   "(only the calls not yet recorded)")
        else:  # one command per notebook: `NB` is a single name prefix
            how = (f"Record them with {' and '.join(f'`make update NB={name}`' for name in names)} (only the calls "
                   "not yet recorded; `make record` instead of `make update` records every call afresh)")
        return (f"no recording for notebook {' + '.join(names)}: {'; '.join(reasons)}. {how}, "
                "or run live with WORKBOOK_MODE=live.")

    def _unusable(self, store: RecordingStore) -> str:
        """Why `store` cannot answer any request of this model, or "" when it could."""
        where = f"data/recordings/{store.path.name}"
        if store.header is None and store.path.is_file():
            return f"{where} is empty (no header line)"
        if store.header is None:
            return f"{where} does not exist"
        if store.header.get("model") != self.identity:
            return f"{where} was recorded with {store.header.get('model')}, but the configured model is {self.identity}"
        return ""


def pending_path(name: str, run_id: int, folder: Path = RECORDINGS_DIR) -> Path:
    """Where run `run_id` writes its new recording of `name` until it replaces `<name>.jsonl`."""
    return folder / f"{name}.jsonl.{run_id}{PENDING_SUFFIX}"


def pending_recordings(folder: Path = RECORDINGS_DIR, run_id: int | None = None) -> list[Path]:
    """The new recordings of run `run_id` (default: this process's run) not yet finished, sorted by name."""
    run = run_id_setting() if run_id is None else run_id
    return sorted(folder.glob(f"*.jsonl.{run}{PENDING_SUFFIX}"))


def _recording_name(pending: Path) -> str:
    """`06-grammars` for `06-grammars.jsonl.1234.new`."""
    return pending.name.rsplit(".jsonl.", 1)[0]


def finish_pending(folder: Path = RECORDINGS_DIR, run_id: int | None = None, *, keep_earlier: bool = False) -> list[str]:
    """Replace each recording with run `run_id`'s finished new version; returns the recording names.

    For a runner whose notebook (a separate kernel process) completed without error: the
    kernel cannot know that the last cell succeeded, the runner can. Each replacement is one
    atomic rename of a complete file, and the new recordings of other runs are left alone.
    With `keep_earlier` (update mode), the calls of the old recording that the run did not
    make are appended to the new one first, so updating never loses a recorded answer.
    """
    names = []
    for pending in pending_recordings(folder, run_id):
        name = _recording_name(pending)
        if keep_earlier:
            _append_earlier_calls(pending, folder / f"{name}.jsonl")
        _synced(pending)
        os.replace(pending, folder / f"{name}.jsonl")
        names.append(name)
    return names


def _synced(path: Path) -> Path:
    """`path` after its bytes reached the disk: renamed over a recording only then, so a power cut
    after the rename cannot leave an empty or partial recording in its place."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    return path


def _append_earlier_calls(pending: Path, earlier: Path) -> None:
    """Append to `pending` every call of `earlier` whose key it lacks, with the texts those calls refer to."""
    if not earlier.is_file():
        return
    name = _recording_name(pending)
    _, new_calls, new_texts = read_recording(pending, name)
    _, old_calls, old_texts = read_recording(earlier, name)
    lines: list[dict[str, Any]] = []
    shas = set(new_texts)
    for key, call in old_calls.items():
        if key in new_calls:
            continue
        for message in call["request"].get("messages", []):
            content = message["content"]
            if isinstance(content, dict) and content["sha"] not in shas:
                shas.add(content["sha"])
                lines.append({"kind": "text", "sha": content["sha"], "text": old_texts[content["sha"]]})
        lines.append(call)
    if lines:
        with open(pending, "a", encoding="utf-8") as handle:
            for line in lines:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")


def discard_pending(folder: Path = RECORDINGS_DIR, run_id: int | None = None) -> list[str]:
    """Delete run `run_id`'s unfinished new recordings, leaving the old ones as they were; returns the names."""
    names = []
    for pending in pending_recordings(folder, run_id):
        pending.unlink()
        names.append(_recording_name(pending))
    return names


def discard_abandoned(folder: Path = RECORDINGS_DIR) -> list[str]:
    """Delete the new recordings left by runs whose process has ended (killed, crashed); returns the names.

    A run still going keeps its files, so a runner may call this at its start while another
    records other notebooks.
    """
    names = []
    for pending in sorted(folder.glob(f"*.jsonl.*{PENDING_SUFFIX}")):
        run = pending.name[:-len(PENDING_SUFFIX)].rsplit(".", 1)[-1]
        if not (run.isdigit() and _process_exists(int(run))):
            pending.unlink(missing_ok=True)
            names.append(_recording_name(pending))
    return names


def _process_exists(pid: int) -> bool:
    if pid < 1:
        return False
    try:
        os.kill(pid, 0)  # signal 0 only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


@contextlib.contextmanager
def recording_lock(name: str, folder: Path = RECORDINGS_DIR) -> Iterator[None]:
    """Hold the lock of notebook `name`'s recording for the duration of the block.

    One run at a time may write a notebook's recording and stored outputs; a second one gets
    `RecordingBusyError` at once, naming the process that holds the lock. The lock is an
    flock on `<name>.lock` beside the recording, so the system releases it when the holder
    ends, even when it is killed: a crashed run never leaves a notebook locked.
    """
    path = folder / f"{name}{LOCK_SUFFIX}"

    def busy(holder: str) -> RecordingBusyError:
        return RecordingBusyError(f"notebook {name} is being recorded by another run ({holder}; lock {path}): wait "
                                  "until it ends, or stop that process, then run again")

    with exclusive_lock(path, busy):
        yield


_BACKENDS: dict[BackendConfig, LLM] = {}
_RECORDED: dict[tuple[BackendConfig, str | None, str], RecordedLLM] = {}


def get_llm(recording: str | None = None, mode: str | None = None) -> RecordedLLM:
    """The configured model behind the record/replay layer.

    `recording` names the file under data/recordings/ that replay and record modes use; every
    notebook passes its own name (e.g. "00-setup"). `mode` is one of `lib.settings.MODES`,
    $WORKBOOK_MODE when not given: a script that needs one mode for its own process (a saved
    run is always live) passes it here. The backend is created once per process
    and only when a call needs it, so replay mode never loads a model.
    """
    config = BackendConfig.from_environment()
    mode = mode_setting() if mode is None else mode
    cache_key = (config, recording, mode)
    if cache_key not in _RECORDED:
        def backend() -> LLM:
            if config not in _BACKENDS:
                _BACKENDS[config] = create_backend(config)
            return _BACKENDS[config]

        _RECORDED[cache_key] = RecordedLLM(config, backend, recording, mode)
    return _RECORDED[cache_key]
