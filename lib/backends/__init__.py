"""The model's backends, in one package: the API they offer and the one factory that builds them.

* `protocol`: the model API (`LLM`) and what it returns (`Completion`, `TokenLogprob`,
  `NextTokenLogprobs`), `CapabilityError`; the one type every function that takes a model names.
* `common`: what every backend does the same way (arguments checked, MiniLM embeddings, token
  counts, library versions).
* `embedded`: `EmbeddedLLM`, llama-cpp-python in this process (the default).
* `openai_compatible`: `OpenAICompatibleLLM`, the same API over any OpenAI-compatible server.
* `server`: `running_server`, llama-cpp-python's own server on 127.0.0.1 with the pinned model.
* `factory`: `BackendConfig` (which backend the settings name) and `create_backend`, the one factory.

Notebooks get their model from `lib.get_llm`, which puts the factory's backend behind the
record/replay layer (`lib.recording`).
"""

__all__: list[str] = []
