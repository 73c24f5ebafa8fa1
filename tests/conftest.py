"""Shared fixtures: the embedded model (loaded once), a real llama-cpp-python server on 127.0.0.1,
and `ScriptedLLM` (the `fake_llm` fixture), the one stand-in for a model in unit tests; and
`hand_labels`, the reader of the corpus's hand-label files."""
from __future__ import annotations

import ast
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from threadpoolctl import threadpool_limits

from lib.llm import Completion, NextTokenLogprobs

os.environ.setdefault("MPLBACKEND", "Agg")
# `make test` runs two pytest-xdist workers; the tests that load the model all run on one of them
# (`pytest_xdist_make_scheduler`), with one llama.cpp thread, so the two workers on two cores do
# not make llama.cpp's spinning threads wait for each other. WORKBOOK_THREADS set by the caller wins.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("WORKBOOK_THREADS", "1")
    # numpy's OpenBLAS and scikit-learn's OpenMP also start a thread per core, and theirs spin
    # while they wait too: one thread each, in this worker and in what it starts (the notebooks'
    # kernels, the runners). Measured on two cores: 30 s less CPU time over `make test`.
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    threadpool_limits(limits=1)


class ScriptedLLM:
    """The one stand-in for a model in unit tests: `chat` and `next_token_logprobs` answer from a script.

    `chat` returns the next of `replies` (a `Completion`, or a text made into one that took
    `seconds`) and records the request (the messages and every keyword argument) in `requests`;
    a call past the script fails the test. `next_token_logprobs` returns the log-probabilities
    `scores` of the asked `score_tokens` (all of them when none are asked; a token without a
    score is left out, as a backend leaves out tokens it cannot score) and records the request
    in `probes`. Tests import it (`from conftest import ScriptedLLM`) or take the `fake_llm` fixture.
    """

    def __init__(self, replies: Sequence[Completion | str] = (), *, scores: Mapping[str, float] | None = None,
                 seconds: float = 1.0, backend_name: str = "scripted") -> None:
        self.replies = list(replies)
        self.scores = dict(scores or {})
        self.seconds = seconds
        self.backend_name = backend_name
        self.requests: list[dict[str, Any]] = []
        self.probes: list[dict[str, Any]] = []

    def chat(self, messages: Sequence[Mapping[str, str]], **options: Any) -> Completion:
        self.requests.append({"messages": list(messages), **options})
        if not self.replies:
            raise AssertionError(f"ScriptedLLM: chat call {len(self.requests)} has no scripted reply left")
        reply = self.replies.pop(0)
        return reply if isinstance(reply, Completion) else Completion(reply, "stop", 100, 20, self.seconds)

    def next_token_logprobs(self, messages: Sequence[Mapping[str, str]], *, prefix: str = "", top_k: int = 20,
                            score_tokens: Sequence[str] = ()) -> NextTokenLogprobs:
        self.probes.append({"messages": list(messages), "prefix": prefix, "top_k": top_k,
                            "score_tokens": tuple(score_tokens)})
        asked = {token: value for token, value in self.scores.items() if not score_tokens or token in score_tokens}
        return NextTokenLogprobs((), asked, self.seconds)


def hand_labels(path: Path) -> list[dict]:
    """The rows of a hand-label file (JSON Lines: id, label, reason), blank lines skipped."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def require_installed(module: str) -> Any:
    """Import `module`, a pinned dependency: a test fails, never skips, when it is missing or broken.

    `pytest.importorskip` would turn a broken install of a package the workbook pins
    (pyproject.toml, setup/install.sh) into a quiet skip; here it is a failure that says how to repair it.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except Exception as error:  # ImportError, or a broken package failing while it imports
        pytest.fail(f"{module} is pinned by the workbook but does not import ({type(error).__name__}: {error}); "
                    "reinstall with `make setup` (setup/install.sh)", pytrace=False)


@pytest.fixture
def fake_llm() -> type[ScriptedLLM]:
    """`ScriptedLLM`, to build with the replies and scores a test needs: `fake_llm(["text"], scores={"yes": -0.1})`."""
    return ScriptedLLM


TESTS = Path(__file__).resolve().parent
MODEL_FIXTURES = frozenset({"embedded", "server_url", "served", "demo_recording", "minilm", "retriever"})
"""Fixtures that load a model: the language model (`served` asks the server of `server_url`;
`demo_recording`, in test_recording.py, records on `embedded`) or MiniLM (`minilm`; `retriever`, in
test_decisions.py, embeds with it). Importing torch and sentence-transformers takes about 7 s, so
the tests that need MiniLM share the model scope's worker too."""
MODEL_MODULES = frozenset({"test_llm.py", "test_llama_server.py", "test_reliability_model.py",
                           "test_reliability_server.py", "test_reliability_injection.py"})
"""Test files that load the model throughout (fixtures of their own over it, or a model of their own)."""
ONE_SCOPE_PER_TEST = frozenset({"test_notebook_rerun.py", "test_run_notebooks.py"})
"""Test files whose tests each run whole notebooks in kernels of their own: each test is a scope,
so the two workers share them instead of one worker running the file alone (loadscope hands out
the scopes with the fewest tests last, so a two-test file of slow tests would end the run)."""


def model_tests(tests: Path = TESTS) -> frozenset[str]:
    """"file::name" of every test that loads a model: in `MODEL_MODULES`, or taking a fixture of
    `MODEL_FIXTURES` as a parameter. Read from the source, because the scheduler of pytest-xdist
    (in the controlling process) sees node ids only, never the collected tests and their fixtures."""
    found = set()
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and (
                    path.name in MODEL_MODULES or MODEL_FIXTURES & {a.arg for a in node.args.args}):
                found.add(f"{path.name}::{node.name}")
    return frozenset(found)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope` (`make test`) with every test that loads a model in one scope, on one worker.

    The `embedded` and `server_url` fixtures are per worker process, so model tests spread over
    two workers load the model twice and start two servers, on two cores. Every other scope is
    loadscope's own: a test file, or a notebook (nbval), whose cells share one kernel; except that
    each test of a file in `ONE_SCOPE_PER_TEST` is a scope of its own.
    """
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    grouped = model_tests()

    class ModelTestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path, _, name = nodeid.partition("::")
            if f"{Path(path).name}::{name.split('[')[0]}" in grouped:
                return "model"
            return nodeid if Path(path).name in ONE_SCOPE_PER_TEST else super()._split_scope(nodeid)

    return ModelTestsTogether(config, log)


@pytest.fixture(scope="session")
def embedded():
    """The embedded model with the workbook's default context (4,096 tokens: the 77-intent prompt and
    a 2,000-character message need more than 2,048)."""
    from lib.llm import EmbeddedLLM
    return EmbeddedLLM(n_ctx=4096)


@pytest.fixture(scope="session")
def minilm():
    """MiniLM's `lib.embeddings.embed` (the model loads on the first call). A test that takes it runs
    in the model scope, so only that worker imports torch and sentence-transformers."""
    from lib.embeddings import embed
    return embed


@pytest.fixture(scope="session")
def server_url():
    """llama-cpp-python's own OpenAI-compatible server with the same GGUF, on a free local port,
    started as `make run-server` starts it but with the server's default 2,048-token context."""
    from setup.llama_server import running_server

    with running_server(n_ctx=2048) as server:
        yield server.base_url


@pytest.fixture(scope="session")
def served(server_url):
    """The workbook's client for that server, with the README's model id and a generous deadline:
    the test server shares two cores with the rest of the suite."""
    from lib.openai_compatible import OpenAICompatibleLLM
    from lib.model_file import DEFAULT_MODEL

    return OpenAICompatibleLLM(server_url, DEFAULT_MODEL.name, timeout=300)
