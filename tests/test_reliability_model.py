"""A damaged model file is refused before it answers (issue 14, items 3 and 4)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from lib.model_file import DEFAULT_MODEL, ModelFile, ModelFileError, configured_model, default_model_path, ensure_model

MODEL_FILENAME, MODEL_SHA256, MODEL_SIZE = DEFAULT_MODEL.filename, DEFAULT_MODEL.sha256, DEFAULT_MODEL.size


def _stamped_file_of_the_right_size(folder):
    """A file of exactly MODEL_SIZE bytes (sparse zeros) with a stamp matching its size and mtime:
    what a model damaged in place with its mtime restored looks like to the stamp."""
    path = folder / MODEL_FILENAME
    with open(path, "wb") as handle:
        handle.truncate(MODEL_SIZE)
    stat = path.stat()
    path.with_name(path.name + ".sha256").write_text(f"{MODEL_SHA256} {stat.st_size} {stat.st_mtime_ns}\n")
    return path


def test_a_damaged_default_model_is_refused_when_first_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("WORKBOOK_MODEL_PATH", raising=False)
    path = _stamped_file_of_the_right_size(tmp_path)
    assert ensure_model(progress=False).path == path  # make setup trusts a current stamp: it runs before every target
    with pytest.raises(ModelFileError, match=rf"{path} has sha256 [0-9a-f]{{64}}, expected {MODEL_SHA256}"):
        configured_model()  # what every process that loads the model asks for
    with pytest.raises(ModelFileError, match="refusing to use it"):
        ensure_model(progress=False, full_check=True)  # python setup/get_model.py --verify


def test_the_genuine_default_model_is_verified_once_per_process(monkeypatch):
    monkeypatch.delenv("WORKBOOK_MODEL_PATH", raising=False)
    monkeypatch.delenv("WORKBOOK_CACHE_DIR", raising=False)
    assert configured_model() == ModelFile(default_model_path(), MODEL_SHA256)


@pytest.fixture(scope="module")
def damaged_copy(tmp_path_factory):
    """A copy of the real model with 32 MiB of seeded random bytes written over tensor data."""
    path = tmp_path_factory.mktemp("damaged") / "damaged.gguf"
    shutil.copyfile(default_model_path(), path)
    noise = np.random.default_rng(14).integers(0, 256, size=32 << 20, dtype=np.uint8).tobytes()
    with open(path, "r+b") as handle:
        handle.seek(MODEL_SIZE - (200 << 20))  # the last tensors (output layers), far past the metadata
        handle.write(noise)
    yield path
    path.unlink()


@pytest.mark.slow  # copies the 1.1 GB model and loads the damaged copy: a second model of its own
def test_a_damaged_gguf_fails_the_load_time_sanity_probe(damaged_copy, monkeypatch):
    from lib.backends.embedded import EmbeddedLLM

    monkeypatch.setenv("WORKBOOK_MODEL_PATH", str(damaged_copy))
    with pytest.raises(ModelFileError, match=rf"{damaged_copy.name} failed the load-time sanity check"):
        EmbeddedLLM(n_ctx=256, n_threads=1)


def test_the_genuine_model_passes_the_probe_with_the_known_answer(embedded):
    from lib.backends.embedded import SANITY_PINNED_ANSWER, SANITY_PINNED_MIN_LOGPROB, SANITY_PROMPT

    top = embedded.next_token_logprobs(SANITY_PROMPT, top_k=1).top[0]
    assert top[0] == SANITY_PINNED_ANSWER and top[1] > SANITY_PINNED_MIN_LOGPROB[DEFAULT_MODEL.name]
