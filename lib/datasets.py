"""Datasets the workbook uses: BANKING77, CLINC150 and our fictional corpus.

The two intent datasets are shipped unmodified under data/ with their licences (see
data/README.md). Loaders return pandas DataFrames with stripped `text` and a `label`.
The calibration splits are drawn from the *training* data with a fixed seed, so the
official test splits stay held out: nothing is ever fitted on them.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "DATA_DIR", "CORPUS_DIR", "CALIBRATION_SEED", "OUT_OF_SCOPE", "load_banking77", "banking77_labels",
    "banking77_calibration_split", "banking77_pool", "load_clinc150", "clinc150_domains",
    "clinc150_calibration_split", "clinc150_test_split", "clinc150_pool", "Section", "slugify",
    "parse_markdown_sections", "load_corpus", "QUESTION_TYPES", "load_questions", "gold_section_ids",
    "load_scope_examples", "OUT_OF_SCOPE_GROUP", "repeated_items", "LabelGroups", "load_label_groups",
]

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
    positions = frame.groupby("label", sort=True).indices  # label -> its rows' positions, in frame order
    for label in sorted(positions):
        rows = frame.index[positions[label]].to_numpy()
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


def gold_section_ids(value: object) -> list[str]:
    """One question's gold section ids as a list: the `section_ids` cell of `load_questions`.

    The column holds lists; a lone id string and a missing value (None or NaN, for questions
    with no gold section) are accepted too, so callers need not care how a row was built.
    """
    if isinstance(value, str):
        return [value]
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    return list(value)


def load_scope_examples(path: Path = CORPUS_DIR / "scope_examples.txt") -> list[str]:
    """In-scope example questions for the boundary gate (one per line)."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------- label groups


OUT_OF_SCOPE_GROUP = "out_of_scope"
"""The group `load_label_groups("clinc150")` adds last, holding only `OUT_OF_SCOPE`."""
_GROUP_FILES = {"banking77": "banking77_groups.json", "clinc150": "clinc150_groups.json"}


def repeated_items(items: Iterable[str]) -> list[str]:
    """The items that occur more than once, sorted."""
    return sorted(item for item, count in Counter(items).items() if count > 1)


@dataclass(frozen=True)
class LabelGroups:
    """A dataset's labels sorted into named groups, with a one-line description of each.

    groups: group name -> its labels, in the order that `assign_codes` letters them.
    descriptions: label -> what a user asking for this label wants.
    group_descriptions: group name -> what the group's labels have in common.
    """

    groups: dict[str, list[str]]
    descriptions: dict[str, str]
    group_descriptions: dict[str, str]


def _dataset_labels(name: str) -> list[str]:
    """Every label of the dataset, read from the upstream files under data/."""
    if name == "banking77":
        return banking77_labels()
    return [label for labels in clinc150_domains().values() for label in labels] + [OUT_OF_SCOPE]


def load_label_groups(name: str) -> LabelGroups:
    """Our label groups for "banking77" (8 groups) or "clinc150" (10 domains + out of scope).

    Read from data/<name>_groups.json and checked against the dataset's own label list:
    every label in exactly one group, no label that the dataset lacks.

    For CLINC150 the JSON file holds the 10 upstream domains only, exactly as in
    data/clinc150/domains.json. This function appends an 11th group, "out_of_scope",
    holding the single label "oos", so that `assign_codes` gives out-of-scope a code of
    its own (K-A) that a model can answer. It comes last, so the in-scope codes are the
    same with or without it.
    """
    if name not in _GROUP_FILES:
        raise ValueError(f"name must be one of {sorted(_GROUP_FILES)}, got {name!r}")
    path = DATA_DIR / _GROUP_FILES[name]
    entries = json.loads(path.read_text(encoding="utf-8"))["groups"]
    groups: dict[str, list[str]] = {}
    descriptions: dict[str, str] = {}
    group_descriptions: dict[str, str] = {}
    for entry in entries:
        groups[entry["name"]] = [intent["label"] for intent in entry["intents"]]
        group_descriptions[entry["name"]] = entry["description"]
        descriptions.update((intent["label"], intent["description"]) for intent in entry["intents"])
    if len(groups) != len(entries):
        raise ValueError(f"{path} repeats group names: {repeated_items(entry['name'] for entry in entries)}")
    if name == "clinc150":
        groups[OUT_OF_SCOPE_GROUP] = [OUT_OF_SCOPE]
        group_descriptions[OUT_OF_SCOPE_GROUP] = "Anything outside the ten domains; the assistant cannot help."
        descriptions[OUT_OF_SCOPE] = "Asks for something that none of the 150 intents covers."
    grouped = [label for labels in groups.values() for label in labels]
    expected = _dataset_labels(name)
    problems = {
        "in more than one group": repeated_items(grouped),
        "missing": sorted(set(expected) - set(grouped)),
        "not in the dataset": sorted(set(grouped) - set(expected)),
    }
    found = {problem: labels for problem, labels in problems.items() if labels}
    if found:
        raise ValueError(f"{path} does not cover the {name} labels exactly once: {found}")
    return LabelGroups(groups, descriptions, group_descriptions)
