"""Settings read from WORKBOOK_* environment variables, checked where they are read.

A bad value is refused before anything loads or connects, with a message that names the
variable, the value and what is accepted: `WORKBOOK_THREADS=abc` says that, not
"invalid literal for int()", and `WORKBOOK_BASE_URL=not a url` is not reported later as a
dropped connection.
"""
from __future__ import annotations

import os
from typing import TypeVar
from urllib.parse import urlparse

Number = TypeVar("Number", int, float)


def numeric_setting(name: str, kind: type[Number], default: Number, *, minimum: Number, maximum: Number,
                    meaning: str) -> Number:
    """$`name` read as `kind` (`int` or `float`), or `default` when it is unset or blank.

    Raises ValueError naming the variable, its value, what it sets (`meaning`) and the accepted
    range from `minimum` to `maximum` (both included) when the value is not a number of that
    kind, is NaN or infinite, or lies outside the range.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not minimum <= value <= maximum:  # NaN fails the comparison too
        number = "a whole number" if kind is int else "a number"
        raise ValueError(f"{name}={raw!r}: {meaning} must be {number} from {minimum} to {maximum}; "
                         f"fix the value, or unset {name} for the default ({default})")
    return value


def check_base_url(url: str, name: str = "WORKBOOK_BASE_URL") -> str:
    """`url` without surrounding spaces if it is an http or https URL with a host, else ValueError
    naming `name` (the variable or argument it came from) and the value."""
    text = url.strip() if isinstance(url, str) else ""
    try:
        parsed = urlparse(text)
        valid = (parsed.scheme in ("http", "https") and bool(parsed.hostname) and (parsed.port is None or parsed.port > 0)
                 and not any(character.isspace() for character in text))
    except ValueError:  # a port that is not a number from 0 to 65535
        valid = False
    if not valid:
        raise ValueError(f"{name}={url!r} is not a server URL: give http:// or https://, the host, the port if "
                         "needed and the API path, e.g. http://127.0.0.1:8080/v1")
    return text


def context_tokens_setting() -> int:
    """$WORKBOOK_N_CTX: the context in tokens the embedded model gets, and the server that
    `make run-server` starts (4,096 by default: the 77-intent prompt and a 2,000-character
    message need more than 2,048)."""
    return numeric_setting("WORKBOOK_N_CTX", int, 4096, minimum=256, maximum=131072,
                           meaning="the model's context size in tokens")


def threads_setting() -> int:
    """$WORKBOOK_THREADS: the CPU threads the model computes with, embedded or behind
    `make run-server` (every core by default; 1 on a machine busy with other runs)."""
    return numeric_setting("WORKBOOK_THREADS", int, os.cpu_count() or 1, minimum=1, maximum=1024,
                           meaning="the model's CPU threads")
