"""Saved embeddings: read what was saved for the same text and model, embed only the rest, never trust a stale row."""
from __future__ import annotations

import numpy as np
import pytest

from lib.embeddings import SavedEmbeddings


class CountingEmbedder:
    """A deterministic fake model: a unit vector per text derived from its characters; counts texts embedded."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset
        self.texts: list[str] = []

    def __call__(self, texts):
        self.texts += list(texts)
        rows = [np.array([len(t), sum(map(ord, t)) % 97, self.offset + 1.0], dtype=np.float32) for t in texts]
        return np.array([r / np.linalg.norm(r) for r in rows], dtype=np.float32).reshape(len(texts), 3)


def test_second_store_reads_everything_from_the_file(tmp_path):
    path = tmp_path / "vectors.npz"
    first_model = CountingEmbedder()
    first = SavedEmbeddings(path, embed_texts=first_model, model_id="fake-1")
    texts = ["alpha", "beta", "alpha", "gamma"]
    vectors = first.embed(texts)
    assert vectors.shape == (4, 3) and vectors.dtype == np.float32
    assert sorted(first_model.texts) == ["alpha", "beta", "gamma"]  # a repeated text is embedded once
    assert first.computed == 3 and path.is_file()

    second_model = CountingEmbedder()
    second = SavedEmbeddings(path, embed_texts=second_model, model_id="fake-1")
    assert np.array_equal(second.embed(texts), vectors)
    assert second_model.texts == [] and second.computed == 0


def test_only_new_or_edited_texts_are_embedded(tmp_path):
    path = tmp_path / "vectors.npz"
    SavedEmbeddings(path, embed_texts=CountingEmbedder(), model_id="fake-1").embed(["one chunk", "two chunk"])
    model = CountingEmbedder()
    store = SavedEmbeddings(path, embed_texts=model, model_id="fake-1")
    store.embed(["one chunk", "two chunk, edited"])
    assert model.texts == ["two chunk, edited"]
    assert len(SavedEmbeddings(path, embed_texts=CountingEmbedder(), model_id="fake-1")) == 3


def test_vectors_of_another_model_are_never_used(tmp_path):
    path = tmp_path / "vectors.npz"
    old = SavedEmbeddings(path, embed_texts=CountingEmbedder(offset=0.0), model_id="fake-1").embed(["text"])
    new_model = CountingEmbedder(offset=5.0)
    with pytest.warns(UserWarning, match="made by model fake-1"):
        store = SavedEmbeddings(path, embed_texts=new_model, model_id="fake-2")
    fresh = store.embed(["text"])
    assert new_model.texts == ["text"] and not np.allclose(fresh, old)
    assert np.array_equal(SavedEmbeddings(path, embed_texts=CountingEmbedder(), model_id="fake-2").embed(["text"]),
                          fresh)


def test_unreadable_file_is_rebuilt_with_a_warning(tmp_path):
    path = tmp_path / "vectors.npz"
    path.write_bytes(b"not a numpy file")
    with pytest.warns(UserWarning, match="cannot be read"):
        store = SavedEmbeddings(path, embed_texts=CountingEmbedder(), model_id="fake-1")
    store.embed(["text"])
    assert len(SavedEmbeddings(path, embed_texts=CountingEmbedder(), model_id="fake-1")) == 1
    assert not path.with_name(path.name + ".partial").exists()


def test_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="together"):
        SavedEmbeddings(tmp_path / "v.npz", embed_texts=CountingEmbedder())
    store = SavedEmbeddings(tmp_path / "v.npz", embed_texts=CountingEmbedder(), model_id="fake-1")
    with pytest.raises(TypeError, match="list of texts"):
        store.embed("a single string")
    assert store.embed([]).shape[0] == 0 and not (tmp_path / "v.npz").exists()


def test_a_read_only_store_embeds_what_it_lacks_and_never_writes(tmp_path):
    path = tmp_path / "vectors.npz"
    saved = SavedEmbeddings(path, embed_texts=CountingEmbedder(), model_id="fake-1").embed(["kept"])
    before = path.read_bytes()
    model = CountingEmbedder()
    store = SavedEmbeddings(path, embed_texts=model, model_id="fake-1", read_only=True)
    vectors = store.embed(["kept", "new"])
    assert model.texts == ["new"] and store.computed == 1
    assert np.array_equal(vectors[0], saved[0])
    assert path.read_bytes() == before and len(SavedEmbeddings(path, embed_texts=model, model_id="fake-1")) == 1
    SavedEmbeddings(tmp_path / "absent.npz", embed_texts=model, model_id="fake-1", read_only=True).embed(["x"])
    assert not (tmp_path / "absent.npz").exists()


def _not_saved(name: str, texts: list[str]) -> list[str]:
    """The texts that `data/embeddings/<name>` holds no vector for, after checking that the file was
    made by the installed MiniLM and holds one unit vector of 384 dimensions per key."""
    from lib.datasets import DATA_DIR
    from lib.embeddings import model_fingerprint, text_key

    with np.load(DATA_DIR / "embeddings" / name, allow_pickle=False) as saved:
        assert str(saved["model_id"]) == model_fingerprint()
        keys = set(saved["keys"].tolist())
        assert saved["vectors"].shape == (len(keys), 384)
        assert np.allclose(np.linalg.norm(saved["vectors"], axis=1), 1.0, atol=1e-4)
    return [text for text in texts if text_key(text) not in keys]


def test_the_handbook_vectors_are_complete_and_current():
    """The committed vectors cover every handbook text the notebooks embed (notebook 02's chunkings,
    the questions, the in-scope examples) and were made by the installed MiniLM, so the notebooks
    read them all: notebook 02 never writes the file, and 05, 07, 09, 10 and 18 read it without writing (`read_only=True`)."""
    from lib import indexes
    from lib.datasets import load_corpus, load_questions, load_scope_examples

    sections = load_corpus()
    texts = [c.text for c in indexes.chunk_by_heading(sections)] + [c.text for c in indexes.chunk_whole_document(sections)]
    texts += load_questions()["question"].tolist() + load_scope_examples()
    missing = _not_saved("handbook.npz", texts)
    assert not missing, f"{len(missing)} handbook texts are not saved; run notebook 02 and commit data/embeddings/handbook.npz"


def test_the_semantic_entropy_answer_vectors_are_complete_and_current():
    """Notebook 10 clusters every saved short answer by embedding; the committed vectors cover
    them all and were made by the installed MiniLM, so a run of 10 reads them and never writes."""
    from lib.saved_runs.items import load_run
    from lib.saved_runs.questions import HANDBOOK

    _, answers = load_run(HANDBOOK)
    texts = answers["greedy"].tolist() + [text for samples in answers["samples"] for text in samples]
    missing = _not_saved("semantic-entropy.npz", texts)
    assert not missing, (f"{len(missing)} answers of {HANDBOOK} have no saved vector; run notebook 10 "
                         "and commit data/embeddings/semantic-entropy.npz")


def test_minilm_computes_with_the_threads_of_workbook_threads(minilm):
    """Two test workers on two cores: torch's default of every core makes its threads spin
    waiting for each other; WORKBOOK_THREADS (1 in every test worker, see conftest.py) must reach
    MiniLM as it reaches llama.cpp."""
    import torch

    from lib.settings import threads_setting

    minilm(["a text"])
    assert torch.get_num_threads() == threads_setting()


def test_minilm_gives_the_vectors_sentence_transformers_saved(minilm):
    """lib.embeddings' own MiniLM against the committed vectors, which sentence-transformers made:
    the handbook's 60 questions, in one batch of mixed lengths, and one of them alone (no padding)."""
    from lib.datasets import DATA_DIR, load_questions
    from lib.embeddings import text_key

    questions = load_questions()["question"].tolist()
    with np.load(DATA_DIR / "embeddings" / "handbook.npz", allow_pickle=False) as saved:
        rows = dict(zip(saved["keys"].tolist(), saved["vectors"]))
    expected = np.stack([rows[text_key(question)] for question in questions])
    assert np.abs(minilm(questions) - expected).max() < 1e-6
    assert np.abs(minilm(questions[-1:]) - expected[-1:]).max() < 1e-6
    long_text = " ".join(questions)  # over 256 tokens: cut at the model's maximum, so more words change nothing
    assert np.array_equal(minilm([long_text]), minilm([long_text + " and the stipend is paid monthly"]))
    assert not np.array_equal(minilm(questions[:3]), minilm(questions[:2] + [questions[2] + " monthly"]))
