"""What every backend does the same way: its arguments checked, local embeddings, token counts, the library versions.

`EmbeddedLLM`, `OpenAICompatibleLLM` and the record/replay layer `lib.recording.RecordedLLM` build
on `LocalMethods` (MiniLM embeddings computed here whatever the backend, token counts from
`tokenize`), check a request's arguments with `check_generation_args` before any work, and name
the versions that shape their numbers with `library_versions` (recordings and saved runs keep them).
"""
from __future__ import annotations

import platform
from importlib import metadata
from typing import Sequence

import numpy as np

from lib.backends.protocol import JsonSchema
from lib.checks import check_positive_int
from lib.embeddings import embed
from lib.grammar import check_grammar

__all__ = ["check_generation_args", "library_versions", "LocalMethods"]


def check_generation_args(max_tokens: int, temperature: float, top_logprobs: int,
                          grammar: str | None, json_schema: JsonSchema | None) -> None:
    """Raise ValueError for generation arguments no backend accepts (checked before any request)."""
    check_positive_int(max_tokens, "max_tokens")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_logprobs < 0:
        raise ValueError(f"top_logprobs must be >= 0, got {top_logprobs}")
    if grammar is not None and json_schema is not None:
        raise ValueError("give either grammar or json_schema, not both")
    if grammar is not None:
        check_grammar(grammar)


def library_versions() -> dict[str, str]:
    """Versions of the libraries that shape the numbers a lesson prints."""
    versions = {"python": platform.python_version()}
    for package in ("llama-cpp-python", "torch", "tokenizers", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


class LocalMethods:
    """What every backend does the same way: local MiniLM embeddings, token counts from tokenize."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """MiniLM embeddings of `texts`, shape (len(texts), 384), unit length (`lib.embeddings.embed`)."""
        return embed(texts)

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` costs (recorded as one number, not the whole token list)."""
        return len(self.tokenize(text))
