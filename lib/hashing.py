"""Stable short hashes of values: the keys of recordings, saved runs and the embedding cache.

`fingerprint` hashes any JSON-serialisable value (a prompt, a request, a list of texts) the
same way on every machine, so a cache or a recording made on one machine is found on another.
"""
from __future__ import annotations

import hashlib
import json

__all__ = ["fingerprint"]


def fingerprint(value: object) -> str:
    """A 16-hex-digit hash of any JSON-serialisable value (prompts, requests, lists of texts).

    Keys are sorted and the JSON is compact, so two equal dicts hash alike whatever their
    insertion order.
    """
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
