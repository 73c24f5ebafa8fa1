"""Shared fixtures: the embedded model (loaded once) and a real llama-cpp-python server on 127.0.0.1."""
from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# `make test` runs two pytest-xdist workers; the tests that load the model all run on one of them
# (`pytest_xdist_make_scheduler`), with one llama.cpp thread, so the two workers on two cores do
# not make llama.cpp's spinning threads wait for each other. WORKBOOK_THREADS set by the caller wins.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("WORKBOOK_THREADS", "1")


TESTS = Path(__file__).resolve().parent
MODEL_FIXTURES = frozenset({"embedded", "server_url"})
MODEL_MODULES = frozenset({"test_llm.py", "test_llama_server.py", "test_reliability_model.py",
                           "test_reliability_server.py", "test_reliability_injection.py"})
"""Test files that load the model throughout (fixtures of their own over it, or a model of their own)."""
ONE_SCOPE_PER_TEST = frozenset({"test_notebook_rerun.py"})
"""Test files whose tests each run a whole notebook in a kernel of their own: each test is a scope,
so the two workers share them instead of one worker running the file's minutes alone."""


def model_tests(tests: Path = TESTS) -> frozenset[str]:
    """"file::name" of every test that loads the model: in `MODEL_MODULES`, or taking a fixture of
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
    """`--dist loadscope` (`make test`) with every test that loads the model in one scope, on one worker.

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
def server_url():
    """llama-cpp-python's own OpenAI-compatible server with the same GGUF, on a free local port,
    started as `make run-server` starts it but with the server's default 2,048-token context."""
    from setup.llama_server import running_server

    with running_server(n_ctx=2048) as server:
        yield server.base_url