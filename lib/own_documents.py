"""A learner's own documents: a folder of Markdown files and a file of labelled questions, checked.

The course's assistant is built for one handbook (data/corpus). To take it home, a learner
points it at their own folder of Markdown documents and a JSON-lines file of labelled
questions in the handbook's format. This module reads both and refuses bad input with an
error a learner can act on: every problem found, each naming the file, the line and what is
wrong, so that one run lists everything to fix.

- `load_own_corpus(folder)`: the folder's `##` sections, read by `lib.datasets.load_corpus`
  (so section ids follow the handbook's rule, `<file path without .md>/<slug of the heading>`),
  after checking that every file decodes as UTF-8 and has non-empty `##` sections with
  unique ids.
- `load_own_questions(path, corpus)`: the questions as `lib.datasets.load_questions` returns
  them (one row per question: id, question, type, section_ids, answer, split), every field
  checked against the format and the corpus; a missing `split` is drawn with a seed,
  stratified by type, so that dev and test each hold about half of every type.

The example shipped with the course is `data/own-documents/example/` (see the README there).
"""
from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lib.datasets import DATA_DIR, QUESTION_TYPES, Section, load_corpus, parse_markdown_sections

__all__ = [
    "OWN_DOCUMENTS_DIR", "EXAMPLE_CORPUS_DIR", "EXAMPLE_QUESTIONS", "OWN_SPLIT_SEED", "MIN_DEV_PER_TYPE",
    "QUESTION_FIELDS", "MAX_PROBLEMS_SHOWN", "Problem", "OwnDocumentsError", "CorpusFolderError",
    "QuestionsFileError", "load_own_corpus", "load_own_questions",
]

OWN_DOCUMENTS_DIR = DATA_DIR / "own-documents"
EXAMPLE_CORPUS_DIR = OWN_DOCUMENTS_DIR / "example"
"""The shipped example: the member handbook of a fictional community makerspace (five files)."""
EXAMPLE_QUESTIONS = EXAMPLE_CORPUS_DIR / "questions.jsonl"
OWN_SPLIT_SEED = 20261207
"""Seed of the dev/test split drawn for questions whose `split` is missing."""
MIN_DEV_PER_TYPE = 5
"""Fewest dev questions of each type: the gates and thresholds are fitted on dev, type by type,
and with fewer than this a fitted threshold says nothing."""
QUESTION_FIELDS = ("id", "question", "type", "section_ids", "answer", "split")
"""The fields of one question, in the order of data/corpus/questions.jsonl."""
MAX_PROBLEMS_SHOWN = 20
"""Most problems an error's message lists (all of them stay in its `problems`)."""

_HEADING = re.compile(r"^## (.+)$", flags=re.MULTILINE)  # the `##` heading of lib.datasets.parse_markdown_sections
_SPLITS = ("dev", "test")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: the file, the line (1-based; None when it is the whole file) and what."""

    path: Path
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line is not None else f"{self.path}: {self.message}"


class OwnDocumentsError(ValueError):
    """Input that cannot be used, with every problem found (`problems`), one per line of the message."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        shown = [str(problem) for problem in self.problems[:MAX_PROBLEMS_SHOWN]]
        if len(self.problems) > MAX_PROBLEMS_SHOWN:
            shown.append(f"... and {len(self.problems) - MAX_PROBLEMS_SHOWN} more problems")
        super().__init__("\n".join(shown))


class CorpusFolderError(OwnDocumentsError):
    """The folder of Markdown documents cannot be used."""


class QuestionsFileError(OwnDocumentsError):
    """The questions file cannot be used."""


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _decoded(data: bytes, path: Path) -> tuple[str | None, Problem | None]:
    """The file's text, or the problem that it is not UTF-8 (on the line of the first bad byte)."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        return None, Problem(path, line, f"is not UTF-8 text (byte {data[error.start]:#04x}); save the file as UTF-8")


def _document_problems(path: Path, doc: str) -> list[Problem]:
    """What keeps one Markdown document from giving sections with unique, non-empty ids and text."""
    text, problem = _decoded(path.read_bytes(), path)
    if problem is not None:
        return [problem]
    assert text is not None
    if text.startswith("\ufeff"):
        return [Problem(path, 1, "starts with a byte-order mark, which hides its first line; save it as UTF-8 "
                                 "without a byte-order mark")]
    headings = list(_HEADING.finditer(text))
    if not headings:
        return [Problem(path, None, "has no `## ` section headings; each section a question can be answered from "
                                    "starts with a line `## Heading`")]
    problems = []
    first_line: dict[str, int] = {}
    for match, section in zip(headings, parse_markdown_sections(text, doc)):
        line = _line_of(text, match.start())
        if not section.id.removeprefix(f"{doc}/"):
            problems.append(Problem(path, line, f"heading {match.group(0).strip()!r} has no letters or digits, "
                                                "so it gives no section id"))
        elif section.id in first_line:
            problems.append(Problem(path, line, f"heading {section.heading!r} gives section id {section.id!r}, like "
                                                f"the heading on line {first_line[section.id]}; rename one of them"))
        else:
            first_line[section.id] = line
        if not section.text:
            problems.append(Problem(path, line, f"section {section.heading!r} has no text under its heading"))
    return problems


def load_own_corpus(folder: str | os.PathLike[str]) -> list[Section]:
    """Every `##` section of the Markdown files under `folder` (README files skipped), in path order.

    The sections are those of `lib.datasets.load_corpus(folder)`: id `<doc>/<slug>`, `doc` the
    file's path under `folder` without ".md" (the file's stem for a flat folder). Before that,
    every file is checked, and `CorpusFolderError` lists each problem with its file and line:
    a folder that is missing or holds no Markdown file, a file that is not UTF-8 (or starts with
    a byte-order mark), a file with no `##` heading, a heading with no letters or digits, two
    headings of one file with the same id, a section with no text. Files other than `.md` are
    ignored, so the questions file may sit in the folder.
    """
    root = Path(folder)
    if not root.exists():
        raise CorpusFolderError([Problem(root, None, "no such folder")])
    if not root.is_dir():
        raise CorpusFolderError([Problem(root, None, "is a file; give the folder that holds the Markdown (.md) files")])
    paths = [path for path in sorted(root.rglob("*.md")) if path.name.upper() != "README.MD"]
    if not paths:
        raise CorpusFolderError([Problem(root, None, "holds no Markdown (.md) files other than README.md")])
    problems = [problem for path in paths
                for problem in _document_problems(path, path.relative_to(root).with_suffix("").as_posix())]
    if problems:
        raise CorpusFolderError(problems)
    return load_corpus(root)


def _suggestion(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _row_problems(row: object, section_ids: set[str]) -> list[str]:
    """What is wrong with one parsed line of the questions file, against the format and the corpus's ids."""
    if not isinstance(row, dict):
        return [f"each line must be one JSON object {{...}}, not a {type(row).__name__}"]
    problems = [f"unknown field {name!r}{_suggestion(name, QUESTION_FIELDS)}" for name in row if name not in QUESTION_FIELDS]
    kind = row.get("type")
    required = ("id", "question", "type") + (("section_ids", "answer") if kind == "answerable" else ())
    problems += [f"missing field {name!r}" for name in required if name not in row]
    for name in ("id", "question"):
        if name in row and (not isinstance(row[name], str) or not row[name].strip()):
            problems.append(f"{name!r} must be a non-empty string, got {json.dumps(row[name])}")
    if "type" in row and kind not in QUESTION_TYPES:
        hint = _suggestion(kind, QUESTION_TYPES) if isinstance(kind, str) else ""
        problems.append(f"unknown type {json.dumps(kind)}{hint}; a type is one of {', '.join(QUESTION_TYPES)}")
    if "split" in row and row["split"] not in _SPLITS:
        problems.append(f"unknown split {json.dumps(row['split'])}; a split is dev or test, or leave it out "
                        "to have one drawn")
    cited = row.get("section_ids", [])
    if not isinstance(cited, list) or not all(isinstance(i, str) for i in cited):
        problems.append(f"'section_ids' must be a list of section ids, got {json.dumps(cited)}")
        cited = []
    answer = row.get("answer", "")
    if not isinstance(answer, str):
        problems.append(f"'answer' must be a string, got {json.dumps(answer)}")
        answer = ""
    if kind == "answerable":
        if "section_ids" in row and not cited and isinstance(row["section_ids"], list):
            problems.append("an answerable question needs at least one section id in 'section_ids'")
        if "answer" in row and isinstance(row["answer"], str) and not answer.strip():
            problems.append("an answerable question needs its short answer in 'answer'")
        problems += [f"section id {i!r} is not in the corpus{_suggestion(i, sorted(section_ids))}"
                     for i in cited if i not in section_ids]
    elif kind in QUESTION_TYPES:
        if cited:
            problems.append(f"a question of type {kind} has no gold section; leave 'section_ids' empty")
        if answer.strip():
            problems.append(f"a question of type {kind} has no gold answer; leave 'answer' empty")
    return problems


def _drawn_splits(frame: pd.DataFrame, seed: int) -> pd.Series:
    """`frame["split"]` with its missing values drawn, type by type, so each type is half dev (rounded up).

    Within a type the questions without a split are taken in order of id (so the draw does not
    depend on the order of the lines) and shuffled with a generator seeded by `seed` and the
    type: adding questions of one type leaves the others' splits alone.
    """
    splits = frame["split"].copy()
    for number, kind in enumerate(QUESTION_TYPES):
        of_kind = frame["type"] == kind
        missing = frame.index[of_kind & splits.isna()]
        if missing.empty:
            continue
        ordered = frame.loc[missing].sort_values("id").index.to_numpy()
        shuffled = ordered[np.random.default_rng([seed, number]).permutation(len(ordered))]
        dev_wanted = math.ceil(int(of_kind.sum()) / 2) - int((splits[of_kind] == "dev").sum())
        n_dev = min(max(dev_wanted, 0), len(shuffled))
        splits.loc[shuffled[:n_dev]] = "dev"
        splits.loc[shuffled[n_dev:]] = "test"
    return splits


def load_own_questions(path: str | os.PathLike[str], corpus: Sequence[Section], *, seed: int = OWN_SPLIT_SEED,
                       min_dev_per_type: int = MIN_DEV_PER_TYPE) -> pd.DataFrame:
    """The labelled questions of a JSON-lines file over `corpus`, checked, in file order.

    Columns `QUESTION_FIELDS` (id, question, type, section_ids, answer, split), as
    `lib.datasets.load_questions` gives for the handbook: `section_ids` a list (empty for
    unanswerable and out-of-scope questions), `answer` a string (empty for them). Blank lines
    are skipped, and a field that is null counts as left out. A question whose `split` is
    missing gets one drawn with `seed`, stratified by type (see `_drawn_splits`); given splits
    are kept.

    `QuestionsFileError` lists every problem, each with its line: not UTF-8, not JSON, not an
    object, an unknown field, a missing field, a field of the wrong kind, an unknown type or
    split, an answerable question without sections or answer, a section id that is not in
    `corpus`, gold sections or an answer on another type, an id used twice; then, for the file
    as a whole, no questions, fewer than `min_dev_per_type` dev questions of a type, or no test
    questions.
    """
    source = Path(path)
    if not source.is_file():
        raise QuestionsFileError([Problem(source, None, "is a folder, not a questions file" if source.is_dir()
                                                        else "no such file")])
    section_ids = {section.id for section in corpus}
    problems: list[Problem] = []
    rows: list[dict] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(source.read_bytes().split(b"\n"), 1):
        text, problem = _decoded(raw, source)
        if problem is not None:
            problems.append(Problem(source, number, problem.message))
            continue
        assert text is not None
        text = text.removeprefix("\ufeff") if number == 1 else text
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as error:
            problems.append(Problem(source, number, f"not valid JSON: {error.msg} (column {error.colno})"))
            continue
        if isinstance(row, dict):
            row = {name: value for name, value in row.items() if value is not None}  # null: left out
        line_problems = _row_problems(row, section_ids)
        problems += [Problem(source, number, message) for message in line_problems]
        if isinstance(row, dict) and isinstance(row.get("id"), str):
            if row["id"] in first_line:
                problems.append(Problem(source, number, f"id {row['id']!r} is used already on line {first_line[row['id']]}"))
            first_line.setdefault(row["id"], number)
        if not line_problems:
            rows.append(row)
    if problems:
        raise QuestionsFileError(problems)
    if not rows:
        raise QuestionsFileError([Problem(source, None, "holds no questions")])
    frame = pd.DataFrame({
        "id": [row["id"] for row in rows],
        "question": [row["question"] for row in rows],
        "type": [row["type"] for row in rows],
        "section_ids": [list(row.get("section_ids", [])) for row in rows],
        "answer": [row.get("answer", "") for row in rows],
        "split": [row.get("split") for row in rows],
    })
    frame["split"] = _drawn_splits(frame, seed)
    dev = Counter(frame.loc[frame["split"] == "dev", "type"])
    problems = [Problem(source, None, f"only {dev[kind]} dev questions of type {kind}; at least {min_dev_per_type} "
                                      "are needed to fit the gates on dev (add some, or move some from test)")
                for kind in QUESTION_TYPES if dev[kind] < min_dev_per_type]
    if not (frame["split"] == "test").any():
        problems.append(Problem(source, None, "has no test questions, so nothing would be reported; "
                                              "mark some 'split': 'test' or leave 'split' out to have one drawn"))
    if problems:
        raise QuestionsFileError(problems)
    return frame
