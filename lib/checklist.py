"""The environment checklist that notebook 00 ends with: one green or red line per item."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Callable

import numpy as np

__all__ = [
    "CheckItem", "ENVIRONMENT_CHECKS", "run_checklist", "render_checklist",
]


@dataclass(frozen=True)
class CheckItem:
    """One line of the checklist: what was checked, whether it passed, and what was seen."""

    name: str
    ok: bool
    detail: str


def _python() -> tuple[bool, str]:
    version = sys.version_info
    return version >= (3, 10), f"Python {version.major}.{version.minor} (3.10 or newer needed)"


def _llama_cpp() -> tuple[bool, str]:
    try:
        import llama_cpp  # noqa: F401
    except ImportError as error:
        return False, f"cannot import llama_cpp ({error}); run `make setup`"
    return True, f"llama-cpp-python {metadata.version('llama-cpp-python')}"


def _model_file() -> tuple[bool, str]:
    # here, not at the top: a broken install fails this one check, not the import of the checklist
    from lib.model_file import ModelFileError, configured_model
    try:
        model = configured_model()
    except ModelFileError as error:
        return False, str(error)
    if model.sha256 is None:
        return True, f"{model.path.name} (WORKBOOK_MODEL_PATH, not checked against a known sha256)"
    return True, f"{model.path.name}: {model.path.stat().st_size / 1e9:.2f} GB, sha256 verified"


def _embeddings() -> tuple[bool, str]:
    # here, not at the top: a broken install fails this one check, not the import of the checklist
    from lib.embeddings import embed
    vectors = embed(["Where is my card?", "My card has not arrived."])
    norms = np.linalg.norm(vectors, axis=1)
    ok = vectors.shape == (2, 384) and bool(np.allclose(norms, 1.0, atol=1e-4))
    return ok, f"MiniLM: {vectors.shape[1]} dimensions, unit length, cosine of two paraphrases {vectors[0] @ vectors[1]:.2f}"


def _datasets() -> tuple[bool, str]:
    # here, not at the top: a broken install fails this one check, not the import of the checklist
    from lib.datasets import load_banking77, load_clinc150
    sizes = (len(load_banking77("train")), len(load_banking77("test")), len(load_clinc150("test")))
    return sizes == (10_003, 3_080, 5_500), (f"BANKING77 train {sizes[0]:,} / test {sizes[1]:,}; "
                                             f"CLINC150 test {sizes[2]:,} (with out-of-scope)")


ENVIRONMENT_CHECKS: dict[str, Callable[[], tuple[bool, str]]] = {
    "Python": _python,
    "llama-cpp-python": _llama_cpp,
    "embedded model file": _model_file,
    "sentence embeddings": _embeddings,
    "datasets": _datasets,
}


def run_checklist(extra: dict[str, tuple[bool, str]] | None = None) -> list[CheckItem]:
    """Run every environment check (and add results the notebook computed, e.g. a first answer)."""
    items = [CheckItem(name, *check()) for name, check in ENVIRONMENT_CHECKS.items()]
    items += [CheckItem(name, ok, detail) for name, (ok, detail) in (extra or {}).items()]
    return items


def render_checklist(items: list[CheckItem]) -> str:
    width = max(len(item.name) for item in items)
    lines = [f"{'✅' if item.ok else '❌'} {item.name:<{width}}  {item.detail}" for item in items]
    passed = sum(item.ok for item in items)
    lines.append(f"{passed} of {len(items)} checks passed")
    return "\n".join(lines)
