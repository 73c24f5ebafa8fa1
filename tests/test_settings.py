"""WORKBOOK_* settings: a bad number or URL is refused where it is read, naming the variable, value and range."""
from __future__ import annotations

import re

import pytest

from lib.llm import BackendConfig, EmbeddedLLM
from lib.openai_compatible import OpenAICompatibleLLM
from lib.settings import check_base_url, numeric_setting, timeout_setting


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
