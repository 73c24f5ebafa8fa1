"""Datasets the workbook uses: BANKING77, CLINC150 and our fictional corpus.

The two intent datasets are shipped unmodified under data/ with their licences (see
data/README.md). Loaders return pandas DataFrames with stripped `text` and a `label`.
The calibration splits are drawn from the *training* data with a fixed seed, so the
official test splits stay held out: nothing is ever fitted on them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
CORPUS_DIR = DATA_DIR / "corpus"
CALIBRATION_SEED = 20240577
OUT_OF_SCOPE = "oos"


def load_banking77(split: str) -> pd.DataFrame:
    """BANKING77 "train" (10,003 rows) or "test" (3,080 rows): columns `text`, `label`.

    The CSV has quoted fields with newlines in them, so it is read with a real CSV parser.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    frame = pd.read_csv(DATA_DIR / "banking77" / f"{split}.csv", dtype=str, keep_default_na=False)
    return pd.DataFrame({"text": frame["text"].str.strip(), "label": frame["category"]})


def banking77_labels() -> list[str]:
    """The 77 intent names, in the dataset's own order."""
    return json.loads((DATA_DIR / "banking77" / "categories.json").read_text(encoding="utf-8"))


def _per_label_sample(frame: pd.DataFrame, per_label: int, seed: int) -> pd.Index:
    """Index of `per_label` rows drawn at random from each label (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    chosen = []
    for label in sorted(frame["label"].unique()):
        rows = frame.index[frame["label"] == label].to_numpy()
        if len(rows) < per_label:
            raise ValueError(f"label {label!r} has {len(rows)} rows, fewer than {per_label}")
        chosen.extend(sorted(rng.choice(rows, size=per_label, replace=False)))
    return pd.Index(chosen)


def banking77_calibration_split(per_label: int = 10, seed: int = CALIBRATION_SEED) -> pd.DataFrame:
    """The calibration split: `per_label` training messages per intent (770 by default).

    Calibrators and thresholds are fitted here; the official test split is only reported.
    `banking77_pool()` is the rest of train, which retrievers, few-shot examples and
    baselines may use, so calibration messages never appear in a prompt.
    """
    train = load_banking77("train")
    return train.loc[_per_label_sample(train, per_label, seed)].reset_index(drop=True)


def banking77_pool(per_label: int = 10, seed: int = CALIBRATION_SEED) -> pd.DataFrame:
    """Training messages outside the calibration split (for retrieval, examples, baselines)."""
    train = load_banking77("train")
    return train.drop(index=_per_label_sample(train, per_label, seed)).reset_index(drop=True)


def load_clinc150(split: str) -> pd.DataFrame:
    """CLINC150 ("full" variant) "train", "val" or "test", in-scope plus out-of-scope rows.

    Columns: `text`, `label` (one of 150 intents, or "oos"), `split`, `out_of_scope` (bool).
    """
    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    data = json.loads((DATA_DIR / "clinc150" / "data_full.json").read_text(encoding="utf-8"))
    rows = data[split] + data[f"oos_{split}"]
    frame = pd.DataFrame(rows, columns=["text", "label"])
    frame["text"] = frame["text"].str.strip()
    frame["split"] = split
    frame["out_of_scope"] = frame["label"] == OUT_OF_SCOPE
    return frame


def clinc150_domains() -> dict[str, list[str]]:
    """The 10 domains, each with its 15 intents (upstream's domains.json)."""
    return json.loads((DATA_DIR / "clinc150" / "domains.json").read_text(encoding="utf-8"))


def clinc150_calibration_split(per_label: int = 5, seed: int = CALIBRATION_SEED) -> pd.DataFrame:
    """`per_label` training messages per in-scope intent (750) plus the 100 out-of-scope validation messages."""
    train = load_clinc150("train")
    in_scope = train[~train["out_of_scope"]]
    sample = in_scope.loc[_per_label_sample(in_scope, per_label, seed)]
    val = load_clinc150("val")
    return pd.concat([sample, val[val["out_of_scope"]]], ignore_index=True)


def clinc150_test_split(per_label: int = 5, n_out_of_scope: int = 250, seed: int = CALIBRATION_SEED) -> pd.DataFrame:
    """`per_label` test messages per in-scope intent (750) plus `n_out_of_scope` out-of-scope test messages."""
    test = load_clinc150("test")
    in_scope = test[~test["out_of_scope"]]
    sample = in_scope.loc[_per_label_sample(in_scope, per_label, seed)]
    out = test[test["out_of_scope"]]
    rng = np.random.default_rng(seed)
    out_sample = out.loc[sorted(rng.choice(out.index.to_numpy(), size=n_out_of_scope, replace=False))]
    return pd.concat([sample, out_sample], ignore_index=True)


def clinc150_pool(per_label: int = 5, seed: int = CALIBRATION_SEED) -> pd.DataFrame:
    """In-scope training messages outside the calibration split (for retrieval and baselines)."""
    train = load_clinc150("train")
    in_scope = train[~train["out_of_scope"]]
    return in_scope.drop(index=_per_label_sample(in_scope, per_label, seed)).reset_index(drop=True)


@dataclass(frozen=True)
class Section:
    """One `##` section of a corpus document.

    `id` is "<doc>/<slug>": `doc` is the file's path under data/corpus without ".md"
    (e.g. "handbook" or "helpdesk/vpn"), `slug` the heading lower-cased with runs of
    non-alphanumerics turned into "-" (e.g. "handbook/thesis-committee").
    `text` is the section body without its heading line, stripped.
    """

    id: str
    doc: str
    title: str
    heading: str
    text: str


def slugify(heading: str) -> str:
    """Lower-case a heading and join its alphanumeric runs with hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def parse_markdown_sections(markdown: str, doc: str) -> list[Section]:
    """Split one Markdown document into its `##` sections (text before the first is dropped)."""
    title_match = re.search(r"^# (.+)$", markdown, flags=re.MULTILINE)
    title = title_match.group(1).strip() if title_match else doc
    parts = re.split(r"^## (.+)$", markdown, flags=re.MULTILINE)
    sections = []
    for heading, body in zip(parts[1::2], parts[2::2]):
        heading = heading.strip()
        sections.append(Section(f"{doc}/{slugify(heading)}", doc, title, heading, body.strip()))
    return sections


def load_corpus(root: Path = CORPUS_DIR) -> list[Section]:
    """Every `##` section of every Markdown document under `root`, in path order."""
    sections: list[Section] = []
    for path in sorted(root.rglob("*.md")):
        if path.name.upper() == "README.MD":
            continue
        doc = path.relative_to(root).with_suffix("").as_posix()
        sections.extend(parse_markdown_sections(path.read_text(encoding="utf-8"), doc))
    ids = [s.id for s in sections]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate section ids in {root}: {duplicates}")
    return sections


QUESTION_TYPES = ("answerable", "unanswerable", "out_of_scope")


def load_questions(split: str | None = None, path: Path = CORPUS_DIR / "questions.jsonl") -> pd.DataFrame:
    """The labelled questions over the corpus: id, question, type, section_ids, answer, split.

    `split` is "dev" (thresholds are fitted here), "test" (only reported) or None for both.
    """
    if split not in (None, "dev", "test"):
        raise ValueError(f"split must be 'dev', 'test' or None, got {split!r}")
    frame = pd.read_json(path, lines=True, dtype={"id": str, "answer": str})
    unknown = set(frame["type"]) - set(QUESTION_TYPES)
    if unknown:
        raise ValueError(f"{path} has unknown question types {sorted(unknown)}")
    if split is not None:
        frame = frame[frame["split"] == split].reset_index(drop=True)
    return frame


def load_scope_examples(path: Path = CORPUS_DIR / "scope_examples.txt") -> list[str]:
    """In-scope example questions for the boundary gate (one per line)."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
