"""Shared fixtures: the embedded model (loaded once), a real llama-cpp-python server on 127.0.0.1,
and `ScriptedLLM` (the `fake_llm` fixture), the one stand-in for a model in unit tests;
`hand_labels`, the reader of the corpus's hand-label files; `best_seconds`, for checks of how a
time grows; and the scheduler that shares the tests between `make test`'s two workers."""
from __future__ import annotations

import ast
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from threadpoolctl import threadpool_limits

from lib.backends.protocol import Completion, NextTokenLogprobs

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
    `identity` and `backend_name` are what a saved run's header names.
    """

    def __init__(self, replies: Sequence[Completion | str] = (), *, scores: Mapping[str, float] | None = None,
                 seconds: float = 1.0, backend_name: str = "scripted", identity: str = "scripted-model") -> None:
        self.replies = list(replies)
        self.scores = dict(scores or {})
        self.seconds = seconds
        self.backend_name = backend_name
        self.identity = identity
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


def best_seconds(work: Callable[[], object], repeat: int = 3) -> float:
    """The shortest of `repeat` timings of `work()`: what it costs when nothing else interrupts it.

    For growth checks (the seconds at n against those at 4n): a check of how the time grows
    holds on a busy machine, where a fixed bound in seconds does not, and the shortest of a few
    runs keeps a pause of the other worker out of the ratio.
    """
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        timings.append(time.perf_counter() - start)
    return min(timings)


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
test_decisions.py, embeds with it)."""
SERVER_FIXTURES = frozenset({"server_url", "served"})
"""Fixtures over the shared llama_cpp.server (started once by the worker that runs `MODEL_SCOPE`)."""
MODEL_MODULES = frozenset({"test_llm.py", "test_llama_server.py", "test_llama_server_engine.py", "test_reliability_model.py",
                           "test_reliability_server.py", "test_reliability_injection.py"})
"""Test files that load the model throughout (fixtures of their own over it, or a model of their own)."""
ONE_SCOPE_PER_TEST = frozenset({"test_notebook_rerun.py", "test_run_notebooks.py"})
"""Test files whose tests each run whole notebooks in kernels of their own: each test is a scope,
so the two workers share them instead of one worker running the file alone (loadscope hands out
the scopes with the fewest tests last, so a two-test file of slow tests would end the run)."""
MODEL_SCOPE = "model"


def model_scopes(tests: Path = TESTS) -> dict[str, str]:
    """"file::name" -> scope, for every test that loads a model (in `MODEL_MODULES`, or taking a
    fixture of `MODEL_FIXTURES` as a parameter). Read from the source, because the scheduler of
    pytest-xdist (in the controlling process) sees node ids only, never the collected tests.

    They share one scope, `MODEL_SCOPE`, so one worker loads the model and starts the server, once,
    and runs them one after another while the other worker runs notebooks: two model computations
    at once share the memory bandwidth and each ran 15% slower here. Only a test marked slow (a
    minute or more of model time: `make test-slow`) that does not ask the shared server is a
    scope of its own, so that both workers share those minutes; a worker that runs one loads the
    model too (1.5 GB of memory).
    """
    scopes = {}
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            arguments = {argument.arg for argument in node.args.args}
            if path.name not in MODEL_MODULES and not MODEL_FIXTURES & arguments:
                continue
            test = f"{path.name}::{node.name}"
            slow = any(ast.unparse(decorator) == "pytest.mark.slow" for decorator in node.decorator_list)
            scopes[test] = f"{MODEL_SCOPE}: slow {test}" if slow and not SERVER_FIXTURES & arguments else MODEL_SCOPE
    return scopes


def scope_priority(scope: str, tests: int) -> tuple[int, int]:
    """The order in which the scheduler hands out scopes: the longest work first, so that neither
    worker is left running a long scope alone at the end (longest-processing-time-first).

    First the model scope (half of one worker's share of `make test`), then the slow model tests
    (a minute or more each); then the notebooks, which start a kernel each and run seconds of
    cells, the longest (most cells) first; then the tests that run whole notebooks; then the test
    files, which take well under a second each, most tests first. Loadscope's own order (most
    tests first) could leave the model scope for last, with the other worker idle meanwhile.
    """
    if scope == MODEL_SCOPE:
        return 0, 0
    if scope.startswith(f"{MODEL_SCOPE}: slow "):
        return 1, 0
    if scope.endswith(".ipynb"):
        return 2, -tests
    if Path(scope.partition("::")[0]).name in ONE_SCOPE_PER_TEST:
        return 3, -tests
    return 4, -tests


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope` (`make test`, `make test-slow`) with the model tests in the scopes of
    `model_scopes`, handed out in `scope_priority` order.

    The `embedded` and `server_url` fixtures are per worker process: a worker that runs model tests
    loads the model once, and the server's tests stay on one worker. Every other scope is
    loadscope's own: a test file, or a notebook (nbval), whose cells share one kernel; except that
    each test of a file in `ONE_SCOPE_PER_TEST` is a scope of its own.
    """
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    scopes = model_scopes()

    class CourseScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path, _, name = nodeid.partition("::")
            test = f"{Path(path).name}::{name.split('[')[0]}"
            if test in scopes:
                return scopes[test]
            return nodeid if Path(path).name in ONE_SCOPE_PER_TEST else super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            first = min(self.workqueue, key=lambda scope: scope_priority(scope, len(self.workqueue[scope])))
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return CourseScheduling(config, log)


@pytest.fixture(scope="session")
def embedded():
    """The embedded model with the workbook's default context (4,096 tokens: the 77-intent prompt and
    a 2,000-character message need more than 2,048)."""
    from lib.backends.embedded import EmbeddedLLM
    return EmbeddedLLM(n_ctx=4096)


@pytest.fixture(scope="session")
def minilm():
    """MiniLM's `lib.embeddings.embed` (the model loads on the first call). A test that takes it runs
    in the model scope, so only that worker imports torch."""
    from lib.embeddings import embed
    return embed


@pytest.fixture(scope="session")
def server_url():
    """llama-cpp-python's own OpenAI-compatible server with the same GGUF, on a free local port,
    started as `make run-server` starts it but with the server's default 2,048-token context."""
    from lib.backends.server import running_server

    with running_server(n_ctx=2048) as server:
        yield server.base_url


@pytest.fixture(scope="session")
def served(server_url):
    """The workbook's client for that server, with the README's model id and a generous deadline:
    the test server shares two cores with the rest of the suite."""
    from lib.backends.openai_compatible import OpenAICompatibleLLM
    from lib.model_file import DEFAULT_MODEL

    return OpenAICompatibleLLM(server_url, DEFAULT_MODEL.name, timeout=300)
