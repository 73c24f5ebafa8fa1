"""The one module that reads the WORKBOOK_* environment variables, each checked where it is read.

Every other module asks a function here; none reads `os.environ` for a WORKBOOK_* name itself
(tests/test_settings.py keeps it so). Scripts that want another value for their own process
pass it as an argument (`get_llm(mode="live")`); the environment stays the channel to the
child processes they start (notebook kernels, servers).

| Variable | Function | Accepts (default) |
|---|---|---|
| WORKBOOK_MODE | `mode_setting` | one of `MODES` ("live") |
| WORKBOOK_RUN_ID | `run_id_setting` | a process id (this process's own) |
| WORKBOOK_BACKEND | `backend_setting` | "embedded" or "openai" ("embedded") |
| WORKBOOK_MODEL | `model_name_setting` | embedded: a pinned model's name (`lib.model_file.PINNED_MODELS`; the default model); server: the model id it lists |
| WORKBOOK_BASE_URL, WORKBOOK_API_KEY, WORKBOOK_MAX_TOP_LOGPROBS | `server_settings` | a server URL, a key (none), 1 to 1000 (`DEFAULT_SERVER_TOP_LOGPROBS`) |
| WORKBOOK_TIMEOUT | `timeout_setting` | seconds, 0.1 to 86400 (a deadline sized to each request) |
| WORKBOOK_N_CTX | `context_tokens_setting` | tokens, 256 to 131072 (4096) |
| WORKBOOK_THREADS | `threads_setting` | threads, 1 to 1024 (every core) |
| WORKBOOK_MODEL_PATH | `model_path_setting` | a GGUF file, embedded only and instead of WORKBOOK_MODEL (the pinned model) |
| WORKBOOK_CACHE_DIR | `cache_dir_setting` | a folder (`.cache/models` in the repo) |

A bad value is refused before anything loads or connects, with a message that names the
variable, the value and what is accepted: `WORKBOOK_THREADS=abc` says that, not
"invalid literal for int()", and `WORKBOOK_BASE_URL=not a url` is not reported later as a
dropped connection. A blank value counts as unset.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

__all__ = [
    "MODES", "RUN_ID_VARIABLE", "DEFAULT_SERVER_TOP_LOGPROBS", "MAX_URL_CHARS", "numeric_setting", "check_base_url",
    "check_api_key", "mode_setting",
    "run_id_setting", "backend_setting", "ServerSettings", "server_settings", "timeout_setting",
    "context_tokens_setting", "threads_setting", "model_name_setting", "model_path_setting", "cache_dir_setting",
]

_Number = TypeVar("_Number", int, float)

MODES = ("live", "replay", "record", "update")
"""The values of WORKBOOK_MODE: how model calls meet the recordings (see lib.recording)."""
RUN_ID_VARIABLE = "WORKBOOK_RUN_ID"
"""The environment variable through which a runner makes its notebook kernels' new recordings its own."""
DEFAULT_SERVER_TOP_LOGPROBS = 20
"""Top candidates per token asked of a server unless WORKBOOK_MAX_TOP_LOGPROBS says otherwise
(OpenAI allows 20; llama.cpp's servers more)."""
MAX_URL_CHARS = 2000
"""The longest server URL accepted: a scheme, a host, a port and an API path fit many times over,
and a longer one is a pasted document or a mistake that would fill every error message."""


def _raw(name: str) -> str:
    """$`name` without surrounding spaces; "" when it is unset."""
    return os.environ.get(name, "").strip()


def numeric_setting(name: str, kind: type[_Number], default: _Number, *, minimum: _Number, maximum: _Number,
                    meaning: str, default_meaning: str | None = None) -> _Number:
    """$`name` read as `kind` (`int` or `float`), or `default` when it is unset or blank.

    Raises ValueError naming the variable, its value, what it sets (`meaning`) and the accepted
    range from `minimum` to `maximum` (both included) when the value is not a number of that
    kind, is NaN or infinite, or lies outside the range. The message says what unsetting
    gives: `default_meaning`, else `default`.
    """
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not minimum <= value <= maximum:  # NaN fails the comparison too
        number = "a whole number" if kind is int else "a number"
        raise ValueError(f"{name}={raw!r}: {meaning} must be {number} from {minimum} to {maximum}; "
                         f"fix the value, or unset {name} for the default ({default_meaning or default})")
    return value


def check_base_url(url: str, name: str = "WORKBOOK_BASE_URL") -> str:
    """`url` without surrounding spaces if it is an http or https URL with a host, else ValueError
    naming `name` (the variable or argument it came from) and the value.

    Also refused, since the URL is printed in error messages and saved in recordings and saved
    runs: a user name or password in it (`http://user:secret@host/v1`; the message does not repeat
    them and says to use WORKBOOK_API_KEY), a query or fragment (`?api_key=...`), control or
    non-ASCII characters, and more than `MAX_URL_CHARS` characters. IPv6 hosts (`http://[::1]:8080/v1`)
    are accepted.
    """
    text = url.strip() if isinstance(url, str) else ""
    if len(text) > MAX_URL_CHARS:
        raise ValueError(f"{name} is {len(text):,} characters long ({text[:60]!r}...), more than the {MAX_URL_CHARS:,} "
                         "a server URL may have: give the scheme, the host, the port and the API path, e.g. "
                         "http://127.0.0.1:8080/v1")
    try:
        parsed = urlparse(text)
        valid = (parsed.scheme in ("http", "https") and bool(parsed.hostname) and (parsed.port is None or parsed.port > 0)
                 and text.isascii() and text.isprintable() and not any(character.isspace() for character in text))
    except ValueError:  # a port that is not a number from 0 to 65535, a broken [IPv6] host
        valid, parsed = False, None
    if parsed is not None and (parsed.username is not None or parsed.password is not None):
        shown = parsed._replace(netloc=f"***@{parsed.netloc.rpartition('@')[2]}").geturl()
        raise ValueError(f"{name}={shown!r} holds a user name or password (shown as ***), which would be printed "
                         "in error messages and saved in recordings: remove it from the URL and give the key "
                         "in WORKBOOK_API_KEY instead (sent as an Authorization header to that server only)")
    if valid and (parsed.query or parsed.fragment or "?" in text or "#" in text):
        raise ValueError(f"{name}={url!r} has a query or fragment (after ? or #): a server URL is the scheme, the "
                         "host, the port and the API path, e.g. http://127.0.0.1:8080/v1; give a key in "
                         "WORKBOOK_API_KEY, never in the URL")
    if not valid:
        raise ValueError(f"{name}={url!r} is not a server URL: give http:// or https://, the host, the port if "
                         "needed and the API path, e.g. http://127.0.0.1:8080/v1")
    return text


def check_api_key(key: str | None, name: str = "WORKBOOK_API_KEY") -> str | None:
    """`key` without surrounding spaces, or None when it is None or blank; ValueError, which never
    repeats the key, when it holds spaces, control or non-ASCII characters (an HTTP header cannot
    carry them, and the HTTP library's own error would print the key)."""
    text = key.strip() if isinstance(key, str) else ""
    if key is not None and not isinstance(key, str):
        raise ValueError(f"{name} must be text, got {type(key).__name__}")
    if not text:
        return None
    if not (text.isascii() and text.isprintable()) or any(character.isspace() for character in text):
        raise ValueError(f"{name} ({len(text)} characters, not shown) holds spaces, line breaks or characters "
                         "outside ASCII, which no API key has: copy the key again, without quotes or a line break")
    return text


def mode_setting() -> str:
    """$WORKBOOK_MODE, lower-cased: one of `MODES`, "live" when unset. `lib.get_llm` reads it
    unless given a mode; `make record` and friends set it for the notebook kernels they start."""
    mode = (_raw("WORKBOOK_MODE") or "live").lower()
    if mode not in MODES:
        raise ValueError(f"WORKBOOK_MODE={mode!r}: use one of {MODES}")
    return mode


def run_id_setting() -> int:
    """The id of the run this process writes recordings for: $WORKBOOK_RUN_ID, else its own process id.

    `setup/run_notebooks.py` sets `WORKBOOK_RUN_ID` to its process id for the notebook kernels
    it starts, so the new recordings a kernel writes belong to the runner, which alone knows
    whether the whole notebook succeeded.
    """
    value = _raw(RUN_ID_VARIABLE)
    if not value:
        return os.getpid()
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{RUN_ID_VARIABLE}={value!r}: it must be the process id of the run (a positive integer), "
                         "or unset to use this process's own")
    return int(value)


def backend_setting() -> str:
    """$WORKBOOK_BACKEND, lower-cased: "embedded" (the default, the model in this process) or
    "openai" (a server, described by `server_settings`)."""
    backend = (_raw("WORKBOOK_BACKEND") or "embedded").lower()
    if backend not in ("embedded", "openai"):
        raise ValueError(f"WORKBOOK_BACKEND={backend!r}: use 'embedded' (default) or 'openai'")
    return backend


@dataclass(frozen=True)
class ServerSettings:
    """The OpenAI-compatible server the "openai" backend talks to."""

    base_url: str
    """$WORKBOOK_BASE_URL, checked by `check_base_url`, e.g. http://127.0.0.1:8080/v1."""
    model: str
    """$WORKBOOK_MODEL: the model id the server lists at /v1/models."""
    api_key: str | None = field(repr=False)
    """$WORKBOOK_API_KEY, or None when the server needs none; never in the repr, so printing the
    settings or an error that shows them does not reveal it."""
    max_top_logprobs: int
    """$WORKBOOK_MAX_TOP_LOGPROBS: the most top candidates per token the server gives."""


def server_settings() -> ServerSettings:
    """The server's WORKBOOK_BASE_URL, WORKBOOK_MODEL, WORKBOOK_API_KEY and WORKBOOK_MAX_TOP_LOGPROBS.

    Raises ValueError when the URL or the model id is missing, the URL is not a server URL, or
    the candidate count is not a whole number from 1 to 1000.
    """
    base_url, model = _raw("WORKBOOK_BASE_URL"), model_name_setting()
    if not base_url or not model:
        raise ValueError("WORKBOOK_BACKEND=openai needs WORKBOOK_BASE_URL (e.g. http://127.0.0.1:8080/v1) "
                         "and WORKBOOK_MODEL (the server's model id)")
    max_top_logprobs = numeric_setting("WORKBOOK_MAX_TOP_LOGPROBS", int, DEFAULT_SERVER_TOP_LOGPROBS, minimum=1,
                                       maximum=1000, meaning="the most top candidates per token the server gives")
    return ServerSettings(check_base_url(base_url), model, check_api_key(os.environ.get("WORKBOOK_API_KEY")),
                          max_top_logprobs)


def timeout_setting() -> float | None:
    """$WORKBOOK_TIMEOUT as a fixed whole-request deadline in seconds (0.1 to 86400), or None
    when it is unset: each server request then gets a deadline sized to it
    (`lib.backends.openai_compatible.sized_deadline`)."""
    if not _raw("WORKBOOK_TIMEOUT"):
        return None
    return numeric_setting("WORKBOOK_TIMEOUT", float, 0.0, minimum=0.1, maximum=86400.0,
                           meaning="the seconds a server request may take",
                           default_meaning="a deadline sized to each request")


def context_tokens_setting() -> int:
    """$WORKBOOK_N_CTX: the context in tokens the embedded model gets, and the server that
    `make run-server` starts (4,096 by default: the 77-intent prompt and a 2,000-character
    message need more than 2,048)."""
    return numeric_setting("WORKBOOK_N_CTX", int, 4096, minimum=256, maximum=131072,
                           meaning="the model's context size in tokens")


def threads_setting() -> int:
    """$WORKBOOK_THREADS: the CPU threads the model computes with, embedded or behind
    `make run-server`, and MiniLM's torch threads (every core by default; 1 on a machine busy
    with other runs)."""
    return numeric_setting("WORKBOOK_THREADS", int, os.cpu_count() or 1, minimum=1, maximum=1024,
                           meaning="the model's CPU threads")


def model_name_setting() -> str | None:
    """$WORKBOOK_MODEL, or None when it is unset: which model answers. For the embedded backend
    the name of a pinned model (`lib.model_file.selected_model` checks it; unset: the default
    model), for a server the model id it lists at /v1/models (required there). One name for
    both, so `make run-server` serves a pinned model under the name that chose it."""
    return _raw("WORKBOOK_MODEL") or None


def model_path_setting() -> Path | None:
    """$WORKBOOK_MODEL_PATH (`~` expanded): a GGUF to load instead of the verified default
    model, or None when it is unset. `lib.model_file.configured_model` checks the file."""
    raw = _raw("WORKBOOK_MODEL_PATH")
    return Path(raw).expanduser() if raw else None


def cache_dir_setting() -> Path | None:
    """$WORKBOOK_CACHE_DIR (`~` expanded): the folder the default model is assembled in, or None
    when it is unset (`lib.model_file.cache_dir` then uses `.cache/models` in the repo).
    Raises ValueError when it names a file."""
    raw = _raw("WORKBOOK_CACHE_DIR")
    if not raw:
        return None
    folder = Path(raw).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"WORKBOOK_CACHE_DIR={raw!r} is a file, not a folder: point it at a folder (created if "
                         "missing), or unset it to use .cache/models in the repo")
    return folder
