"""The one factory of backends: which backend the settings name (`BackendConfig`), and `create_backend`, which builds it.

`BackendConfig.from_environment()` reads WORKBOOK_BACKEND and the server's settings (through
`lib.settings`) and knows the model's identity and where its files are filed without loading it.
`create_backend` builds the backend a config names: the embedded model (loaded now, with a thread
count and batch size when a measurement asks for them) or a client of an OpenAI-compatible server.
Everything that needs a backend gets it here: `lib.get_llm` (through the record/replay layer),
the saved runs, the benchmarks and the drift measurement.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lib.backends.embedded import EmbeddedLLM
from lib.backends.openai_compatible import OpenAICompatibleLLM
from lib.model_file import configured_model, model_key, selected_model, sha256_of
from lib.settings import DEFAULT_SERVER_TOP_LOGPROBS, backend_setting, server_settings

__all__ = ["BackendConfig", "create_backend"]


@dataclass(frozen=True)
class BackendConfig:
    """Which backend to use: WORKBOOK_BACKEND and the server's settings, read by `lib.settings`."""

    backend: str
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # printed configs and errors never show the key
    max_top_logprobs: int = DEFAULT_SERVER_TOP_LOGPROBS

    @classmethod
    def from_environment(cls) -> BackendConfig:
        """The backend WORKBOOK_BACKEND names, with the server's settings for "openai" (see lib.settings)."""
        if backend_setting() == "embedded":
            return cls("embedded")
        server = server_settings()
        return cls("openai", server.base_url, server.model, server.api_key, server.max_top_logprobs)

    def identity(self) -> str:
        """The model identity recordings are keyed by, known without loading the model."""
        if self.backend == "openai":
            return f"openai:{self.model}"
        pinned = selected_model()
        if pinned is not None:
            return f"embedded:{pinned.sha256}"
        return f"embedded:{sha256_of(configured_model().path)}"

    def files_key(self) -> str | None:
        """The folder this model's recordings and saved runs are filed under (`lib.model_file.model_key`):
        None for the default model, whose files the notebooks read; known without loading the model."""
        if self.backend == "openai":
            return model_key(self.model)
        pinned = selected_model()
        return model_key(pinned.name if pinned is not None else configured_model().path.name)


def create_backend(config: BackendConfig, *, n_threads: int | None = None,
                   n_batch: int | None = None) -> EmbeddedLLM | OpenAICompatibleLLM:
    """The backend `config` names: the embedded model (loaded now) or a client of the server.

    `n_threads` and `n_batch` set the embedded model's threads and batch size (`EmbeddedLLM`; by
    default WORKBOOK_THREADS and the context size); a server runs with its own, so they are
    refused for it (ValueError) rather than silently ignored.
    """
    if config.backend == "openai":
        if n_threads is not None or n_batch is not None:
            raise ValueError("n_threads and n_batch set the embedded model; a server's are set where it is started "
                             "(lib.backends.server.running_server)")
        return OpenAICompatibleLLM(config.base_url, config.model, api_key=config.api_key,
                                   max_top_logprobs=config.max_top_logprobs)
    return EmbeddedLLM(n_threads=n_threads, n_batch=n_batch)
