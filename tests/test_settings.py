"""WORKBOOK_* settings: read in lib/settings.py alone, and a bad value is refused where it is read,
naming the variable, the value and what is accepted."""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from lib.backends.embedded import EmbeddedLLM
from lib.backends.factory import BackendConfig
from lib.model_file import ModelFileError, cache_dir, configured_model
from lib.backends.openai_compatible import OpenAICompatibleLLM
from lib.recording import get_llm
from lib.settings import (MODES, backend_setting, cache_dir_setting, check_base_url, mode_setting,
                          model_path_setting, numeric_setting, run_id_setting, server_settings, timeout_setting)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def server_backend(monkeypatch):
    """The environment of a server backend with good values; a test spoils one of them."""
    monkeypatch.setenv("WORKBOOK_BACKEND", "openai")
    monkeypatch.setenv("WORKBOOK_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("WORKBOOK_MODEL", "m")
    for name in ("WORKBOOK_MAX_TOP_LOGPROBS", "WORKBOOK_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("bad", ["abc", "0", "-4", "2.5", "1e3", "nan", "99999999"])
@pytest.mark.parametrize("name", ["WORKBOOK_THREADS", "WORKBOOK_N_CTX"])
def test_an_embedded_setting_that_is_not_a_whole_number_in_range_is_refused_before_loading(monkeypatch, name, bad):
    monkeypatch.setenv("WORKBOOK_MODEL_PATH", "/nonexistent/model.gguf")  # the setting is refused first
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=rf"{name}='{re.escape(bad)}': .* must be a whole number from \d+ to \d+; fix the value, "
                                         rf"or unset {name} for the default"):
        EmbeddedLLM()


@pytest.mark.parametrize("bad", ["abc", "0", "-1", "twenty", "20.5", "100000"])
def test_a_bad_max_top_logprobs_is_refused(server_backend, monkeypatch, bad):
    monkeypatch.setenv("WORKBOOK_MAX_TOP_LOGPROBS", bad)
    with pytest.raises(ValueError, match=rf"WORKBOOK_MAX_TOP_LOGPROBS='{re.escape(bad)}': .* from 1 to 1000"):
        BackendConfig.from_environment()


@pytest.mark.parametrize("bad", ["soon", "0", "-3", "nan", "inf", "1e9"])
def test_a_bad_timeout_is_refused_with_its_range(monkeypatch, bad):
    monkeypatch.setenv("WORKBOOK_TIMEOUT", bad)
    with pytest.raises(ValueError, match=rf"WORKBOOK_TIMEOUT='{re.escape(bad)}': .* a number from 0.1 to 86400"):
        timeout_setting()


def test_good_values_and_blank_ones_are_read(server_backend, monkeypatch):
    monkeypatch.setenv("WORKBOOK_MAX_TOP_LOGPROBS", " 5 ")
    assert BackendConfig.from_environment().max_top_logprobs == 5
    monkeypatch.setenv("WORKBOOK_MAX_TOP_LOGPROBS", "")
    assert BackendConfig.from_environment().max_top_logprobs == 20
    monkeypatch.setenv("WORKBOOK_THREADS", "3")
    assert numeric_setting("WORKBOOK_THREADS", int, 8, minimum=1, maximum=1024, meaning="threads") == 3
    monkeypatch.delenv("WORKBOOK_THREADS")
    assert numeric_setting("WORKBOOK_THREADS", int, 8, minimum=1, maximum=1024, meaning="threads") == 8


@pytest.mark.parametrize("bad", ["not a url", "127.0.0.1:8080/v1", "localhost:8080/v1", "ftp://127.0.0.1/v1",
                                 "http://", "http:///v1", "http://127.0.0.1:port/v1", "http://127.0.0.1:0/v1",
                                 "http://my host/v1", "http://127.0.0.1:99999/v1"])
def test_a_base_url_that_is_not_a_server_url_is_refused_up_front(server_backend, monkeypatch, bad):
    monkeypatch.setenv("WORKBOOK_BASE_URL", bad)
    with pytest.raises(ValueError, match=rf"WORKBOOK_BASE_URL='{re.escape(bad)}' is not a server URL: give http:// or https://"):
        BackendConfig.from_environment()
    with pytest.raises(ValueError, match=rf"base_url='{re.escape(bad)}' is not a server URL"):
        OpenAICompatibleLLM(bad, "m")


@pytest.mark.parametrize("good", ["http://127.0.0.1:8080/v1", "https://api.openai.com/v1", " http://localhost:8080/v1 ",
                                  "http://[::1]:8080/v1"])
def test_server_urls_pass(server_backend, monkeypatch, good):
    monkeypatch.setenv("WORKBOOK_BASE_URL", good)
    assert BackendConfig.from_environment().base_url == good.strip() == check_base_url(good)


# --------------------------------------------------------------------------- every variable's bad value


@pytest.mark.parametrize("bad", ["rewind", "LIVE!", "recorded"])
def test_a_mode_that_is_not_one_of_the_modes_is_refused(monkeypatch, bad):
    monkeypatch.setenv("WORKBOOK_MODE", bad)
    with pytest.raises(ValueError, match=rf"WORKBOOK_MODE='{re.escape(bad.lower())}': use one of \("):
        mode_setting()
    with pytest.raises(ValueError, match="WORKBOOK_MODE"):
        get_llm("00-setup")


def test_modes_are_read_lower_cased_and_live_by_default(monkeypatch):
    monkeypatch.setenv("WORKBOOK_MODE", " Replay ")
    assert mode_setting() == "replay"
    monkeypatch.delenv("WORKBOOK_MODE")
    assert mode_setting() == "live" == MODES[0]


def test_a_script_passes_its_mode_instead_of_changing_the_environment(monkeypatch):
    monkeypatch.setenv("WORKBOOK_MODE", "replay")
    assert get_llm("00-setup").mode == "replay"
    assert get_llm("00-setup", mode="live").mode == "live"
    assert os.environ["WORKBOOK_MODE"] == "replay"
    with pytest.raises(ValueError, match=r"mode 'rewind': use one of"):
        get_llm("00-setup", mode="rewind")


@pytest.mark.parametrize("bad", ["abc", "0", "-5", "12.5"])
def test_a_run_id_that_is_not_a_process_id_is_refused(monkeypatch, bad):
    monkeypatch.setenv("WORKBOOK_RUN_ID", bad)
    with pytest.raises(ValueError, match=rf"WORKBOOK_RUN_ID='{re.escape(bad)}': it must be the process id of the run"):
        run_id_setting()


def test_the_run_id_is_the_runners_or_this_process(monkeypatch):
    monkeypatch.setenv("WORKBOOK_RUN_ID", "4242")
    assert run_id_setting() == 4242
    monkeypatch.delenv("WORKBOOK_RUN_ID")
    assert run_id_setting() == os.getpid()


@pytest.mark.parametrize("bad", ["llama", "server", "open-ai"])
def test_a_backend_that_is_not_embedded_or_openai_is_refused(monkeypatch, bad):
    monkeypatch.setenv("WORKBOOK_BACKEND", bad)
    with pytest.raises(ValueError, match=rf"WORKBOOK_BACKEND='{bad}': use 'embedded' \(default\) or 'openai'"):
        backend_setting()
    with pytest.raises(ValueError, match="WORKBOOK_BACKEND"):
        BackendConfig.from_environment()


@pytest.mark.parametrize("missing", ["WORKBOOK_BASE_URL", "WORKBOOK_MODEL"])
def test_a_server_backend_without_its_url_or_model_is_refused(server_backend, monkeypatch, missing):
    monkeypatch.setenv(missing, " ")
    with pytest.raises(ValueError, match="WORKBOOK_BACKEND=openai needs WORKBOOK_BASE_URL .* and WORKBOOK_MODEL"):
        server_settings()


def test_the_server_settings_are_read_together(server_backend, monkeypatch):
    monkeypatch.setenv("WORKBOOK_API_KEY", "sk-test")
    server = server_settings()
    assert (server.base_url, server.model, server.api_key, server.max_top_logprobs) == (
        "http://127.0.0.1:8080/v1", "m", "sk-test", 20)
    config = BackendConfig.from_environment()
    assert (config.backend, config.base_url, config.model, config.api_key) == ("openai", *(
        server.base_url, server.model, server.api_key))


def test_a_model_path_that_is_missing_or_a_folder_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBOOK_MODEL_PATH", str(tmp_path / "missing.gguf"))
    assert model_path_setting() == tmp_path / "missing.gguf"
    with pytest.raises(ModelFileError, match=r"WORKBOOK_MODEL_PATH points at .*missing\.gguf, which does not exist"):
        configured_model()
    monkeypatch.setenv("WORKBOOK_MODEL_PATH", str(tmp_path))
    with pytest.raises(ModelFileError, match=r"WORKBOOK_MODEL_PATH points at .*, which is a directory"):
        configured_model()
    monkeypatch.setenv("WORKBOOK_MODEL_PATH", "")
    assert model_path_setting() is None


def test_a_cache_dir_that_is_a_file_is_refused(monkeypatch, tmp_path):
    file = tmp_path / "models"
    file.write_text("not a folder")
    monkeypatch.setenv("WORKBOOK_CACHE_DIR", str(file))
    with pytest.raises(ValueError, match=rf"WORKBOOK_CACHE_DIR='{re.escape(str(file))}' is a file, not a folder"):
        cache_dir()
    monkeypatch.setenv("WORKBOOK_CACHE_DIR", str(tmp_path / "new"))
    assert cache_dir() == cache_dir_setting() == tmp_path / "new"
    monkeypatch.delenv("WORKBOOK_CACHE_DIR")
    assert cache_dir_setting() is None and cache_dir() == REPO / ".cache" / "models"


# --------------------------------------------------------------------------- one reader


ALLOWED_WRITES = {
    ("setup/run_notebooks.py", "WORKBOOK_MODE"),  # the mode of the notebook kernels it starts
    ("setup/run_notebooks.py", "RUN_ID_VARIABLE"),  # the kernels' new recordings belong to the runner
    ("setup/run_server.py", "WORKBOOK_BACKEND"),  # the server, for the kernels run_notebooks starts
    ("setup/run_server.py", "WORKBOOK_BASE_URL"),
    ("setup/run_server.py", "WORKBOOK_MODEL"),
    ("setup/bench_course.py", "WORKBOOK_MODE"),  # the mode of the kernels run_one starts
}
"""(file, variable) of each change to this process's environment, made for the child processes
it starts; a script that wants another setting for itself passes it as an argument instead."""
NOT_CHECKED = {"setup/load_test.py", "lib/backends/server.py"}
"""Modules that read nothing from the environment themselves (the server launcher asks lib.settings)."""


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ")


def _key(node: ast.AST | None) -> str:
    """The variable a key names: the string itself, a constant's name, or "?"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return node.id if isinstance(node, ast.Name) else "?"


def _may_be_workbook(node: ast.AST | None) -> bool:
    """Whether the key may be a WORKBOOK_* name: a literal that starts so, or anything not a literal."""
    return not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or node.value.startswith("WORKBOOK_")


def environment_use(source: str) -> tuple[list[str], list[str]]:
    """(reads, writes) of WORKBOOK_* variables in `source`: reads as "line N: text", writes as the names.

    A read is `os.environ[...]`, `os.environ.get/pop/setdefault(...)`, `os.getenv(...)` or
    `... in os.environ`; a write is `os.environ[...] = ...` or `os.environ.update(...)`. A copy
    for a child process (`{**os.environ, "WORKBOOK_MODE": "replay"}`) is neither.
    """
    reads, writes = [], []
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        key, read = None, False
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            if isinstance(node.ctx, ast.Store):
                writes.append(_key(node.slice))
            else:
                key, read = node.slice, True
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            if _is_environ(owner) and method in ("get", "pop", "setdefault"):
                key, read = (node.args[0] if node.args else None), True
            elif _is_environ(owner) and method == "update":
                writes += [keyword.arg for keyword in node.keywords if keyword.arg]
                writes += [_key(k) for arg in node.args if isinstance(arg, ast.Dict) for k in arg.keys if k]
            elif method == "getenv" and isinstance(owner, ast.Name) and owner.id == "os":
                key, read = (node.args[0] if node.args else None), True
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            key, read = node.left, True
        if read and _may_be_workbook(key):
            reads.append(f"line {node.lineno}: {lines[node.lineno - 1].strip()}")
    return reads, writes


def test_only_lib_settings_reads_workbook_variables():
    reads, writes = {}, set()
    for path in sorted([*(REPO / "lib").rglob("*.py"), *(REPO / "setup").glob("*.py")]):
        name = path.relative_to(REPO).as_posix()
        if name == "lib/settings.py" or name in NOT_CHECKED:
            continue
        found, changed = environment_use(path.read_text(encoding="utf-8"))
        if found:
            reads[name] = found
        writes |= {(name, variable) for variable in changed}
    assert not reads, f"WORKBOOK_* variables read outside lib/settings.py (ask a lib.settings function): {reads}"
    assert writes == ALLOWED_WRITES, (
        f"changes to this process's environment: unlisted {sorted(writes - ALLOWED_WRITES)}, gone "
        f"{sorted(ALLOWED_WRITES - writes)}. Pass a setting for this process as an argument (get_llm(mode=...)); "
        "list a write in ALLOWED_WRITES only when it is how a child process gets the setting")


@pytest.mark.parametrize("source, reads, writes", [
    ('import os\nmode = os.environ.get("WORKBOOK_MODE", "live")\n', 1, []),
    ('import os\nmode = os.environ["WORKBOOK_MODE"]\n', 1, []),
    ('import os\nmode = os.getenv("WORKBOOK_MODE")\n', 1, []),
    ('import os\nset_ = "WORKBOOK_THREADS" in os.environ\n', 1, []),
    ('import os\nNAME = "WORKBOOK_RUN_ID"\nvalue = os.environ.get(NAME)\n', 1, []),
    ('import os\npath = os.environ.get("PYTHONPATH")\nos.environ.setdefault("HF_HUB_OFFLINE", "1")\n', 0, []),
    ('import os\nos.environ["WORKBOOK_MODE"] = "live"\n', 0, ["WORKBOOK_MODE"]),
    ('import os\nos.environ.update(WORKBOOK_BACKEND="openai")\n', 0, ["WORKBOOK_BACKEND"]),
    ('import os\nenv = {**os.environ, "WORKBOOK_MODE": "replay"}\n', 0, []),
])
def test_the_reader_check_sees_reads_and_writes(source, reads, writes):
    found, changed = environment_use(source)
    assert (len(found), changed) == (reads, writes)
