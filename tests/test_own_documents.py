"""A learner's own documents: the shipped example loads and is grounded, the split is seeded and
stratified, and every kind of bad input is refused with its file, its line and what is wrong."""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from lib.datasets import CORPUS_DIR, QUESTION_TYPES, load_corpus, slugify
from lib.own_documents import (EXAMPLE_CORPUS_DIR, EXAMPLE_QUESTIONS, MAX_PROBLEMS_SHOWN, MIN_DEV_PER_TYPE,
                               QUESTION_FIELDS, CorpusFolderError, OwnDocumentsError, Problem, QuestionsFileError,
                               load_own_corpus, load_own_questions)
from lib.text import matches_gold

DOC = "# Tool library\n\n## Opening Hours\n\nOpen 9:00 to 17:00.\n\n## Borrowing Limits\n\nAt most 3 tools for 7 days.\n"
"""A small document: two sections, `tools/opening-hours` and `tools/borrowing-limits`."""


@pytest.fixture(scope="module")
def example_corpus():
    return load_own_corpus(EXAMPLE_CORPUS_DIR)


@pytest.fixture(scope="module")
def example_questions(example_corpus):
    return load_own_questions(EXAMPLE_QUESTIONS, example_corpus)


def folder_with(tmp_path: Path, files: dict[str, str | bytes], name: str = "my documents") -> Path:
    """A folder (with a space in its name, outside the repository) holding `files`."""
    folder = tmp_path / name
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return folder


@pytest.fixture
def small_corpus(tmp_path):
    return load_own_corpus(folder_with(tmp_path, {"tools.md": DOC}))


def question(number: int, kind: str = "answerable", split: str | None = "dev", **fields) -> dict:
    """One valid question of `kind` (answerable ones cite `tools/borrowing-limits`)."""
    row = {"id": f"t{number:03d}", "question": f"Question {number}?", "type": kind,
           "section_ids": ["tools/borrowing-limits"] if kind == "answerable" else [],
           "answer": "3 tools" if kind == "answerable" else ""}
    if split is not None:
        row["split"] = split
    return row | fields


def enough_questions(split_of=lambda n: "dev" if n % 2 == 0 else "test") -> list[dict]:
    """Twelve questions of each type, half dev and half test: a file that loads."""
    return [question(12 * t + n, kind, split_of(n)) for t, kind in enumerate(QUESTION_TYPES) for n in range(12)]


def questions_file(tmp_path: Path, rows: list[dict | str], name: str = "my questions.jsonl") -> Path:
    """A JSON-lines file of `rows` (a string row is written as it is, for lines that are not JSON)."""
    path = tmp_path / name
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows), encoding="utf-8")
    return path


def problems_of(error: pytest.ExceptionInfo) -> list[tuple[int | None, str]]:
    return [(problem.line, problem.message) for problem in error.value.problems]


# --------------------------------------------------------------------------- the shipped example


def test_example_corpus_has_five_documents_and_25_to_35_sections(example_corpus):
    assert len({section.doc for section in example_corpus}) == 5
    assert 25 <= len(example_corpus) <= 35
    assert all(section.text for section in example_corpus)


def test_example_section_ids_are_file_stem_and_heading_slug(example_corpus):
    headings = {f"{path.stem}/{slugify(heading)}" for path in EXAMPLE_CORPUS_DIR.glob("*.md")
                for heading in re.findall(r"^## (.+)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)}
    assert {section.id for section in example_corpus} == headings


def test_own_corpus_reads_the_handbook_as_the_handbook_loader_does():
    assert load_own_corpus(CORPUS_DIR) == load_corpus(CORPUS_DIR)


def test_example_questions_have_the_planned_shares_of_each_type(example_questions):
    counts = Counter(example_questions["type"])
    assert 85 <= len(example_questions) <= 95
    assert counts["answerable"] / len(example_questions) == pytest.approx(0.5, abs=0.05)
    for kind in ("unanswerable", "out_of_scope"):
        assert counts[kind] / len(example_questions) == pytest.approx(0.25, abs=0.05)
    assert list(example_questions.columns) == list(QUESTION_FIELDS)
    assert example_questions["id"].is_unique and example_questions["question"].is_unique


def test_example_split_is_even_within_every_type(example_questions):
    for kind, group in example_questions.groupby("type"):
        dev, test = (group["split"] == "dev").sum(), (group["split"] == "test").sum()
        assert abs(dev - test) <= 1, kind
        assert dev >= MIN_DEV_PER_TYPE


def test_example_answers_are_stated_in_their_cited_sections(example_corpus, example_questions):
    # matches_gold: the whole answer, its numbers included, as whole words of the sections after
    # normalisation ("$0.05 per gram", "1220 by 2440 mm"), the rule a model's answer is judged by
    text = {section.id: section.text for section in example_corpus}
    answerable = example_questions[example_questions["type"] == "answerable"]
    assert len(answerable) > 0
    for row in answerable.itertuples():
        cited = " ".join(text[section_id] for section_id in row.section_ids)
        assert matches_gold(cited, row.answer), f"{row.id}: {row.answer!r} is not in {row.section_ids}"


def test_example_questions_other_than_answerable_carry_no_gold(example_questions):
    others = example_questions[example_questions["type"] != "answerable"]
    assert set(others["type"]) == {"unanswerable", "out_of_scope"}
    assert (others["section_ids"].map(len) == 0).all() and (others["answer"] == "").all()


def test_example_answers_cite_sections_of_every_document(example_corpus, example_questions):
    cited_docs = {section_id.split("/")[0] for ids in example_questions["section_ids"] for section_id in ids}
    assert cited_docs == {section.doc for section in example_corpus}


# --------------------------------------------------------------------------- the corpus folder


def test_folder_with_spaces_outside_the_repository_loads(tmp_path):
    folder = folder_with(tmp_path, {"tools.md": DOC, "notes.txt": "not Markdown", "README.md": "# About\n",
                                    "sub dir/rules.md": "## Late Returns\n\n50 cents a day.\n"})
    sections = load_own_corpus(str(folder))
    assert [s.id for s in sections] == ["sub dir/rules/late-returns", "tools/opening-hours", "tools/borrowing-limits"]
    assert sections[2].text == "At most 3 tools for 7 days." and sections[2].title == "Tool library"


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(CorpusFolderError, match="no such folder") as error:
        load_own_corpus(tmp_path / "not there")
    assert error.value.problems == (Problem(tmp_path / "not there", None, "no such folder"),)


def test_a_file_given_as_the_folder(tmp_path):
    path = folder_with(tmp_path, {"tools.md": DOC}) / "tools.md"
    with pytest.raises(CorpusFolderError, match="is a file"):
        load_own_corpus(path)


@pytest.mark.parametrize("files", [{}, {"README.md": DOC, "notes.txt": "x"}], ids=["empty", "only README"])
def test_folder_without_markdown_documents(tmp_path, files):
    folder = folder_with(tmp_path, files)
    folder.mkdir(parents=True, exist_ok=True)
    with pytest.raises(CorpusFolderError, match=r"holds no Markdown \(\.md\) files"):
        load_own_corpus(folder)


def test_document_without_sections_names_the_file(tmp_path):
    folder = folder_with(tmp_path, {"tools.md": DOC, "plain.md": "# Plain\n\nJust text, ### no section.\n"})
    with pytest.raises(CorpusFolderError) as error:
        load_own_corpus(folder)
    assert str(error.value).startswith(f"{folder / 'plain.md'}: has no `## ` section headings")


def test_non_utf8_document_gives_the_line_of_the_bad_byte(tmp_path):
    folder = folder_with(tmp_path, {"tools.md": "# T\n\n## Fees\n\nCaf\xe9 costs 3.\n".encode("latin-1")})
    with pytest.raises(CorpusFolderError) as error:
        load_own_corpus(folder)
    assert problems_of(error) == [(5, "is not UTF-8 text (byte 0xe9); save the file as UTF-8")]
    assert str(error.value).startswith(f"{folder / 'tools.md'}:5: ")


def test_byte_order_mark_is_refused(tmp_path):
    folder = folder_with(tmp_path, {"tools.md": "\ufeff" + DOC})
    with pytest.raises(CorpusFolderError, match="byte-order mark"):
        load_own_corpus(folder)


def test_duplicate_headings_give_both_lines(tmp_path):
    folder = folder_with(tmp_path, {"tools.md": DOC + "\n## Opening hours!\n\nClosed on Sundays.\n"})
    with pytest.raises(CorpusFolderError) as error:
        load_own_corpus(folder)
    assert problems_of(error) == [(11, "heading 'Opening hours!' gives section id 'tools/opening-hours', like the "
                                       "heading on line 3; rename one of them")]


def test_empty_section_and_heading_without_letters(tmp_path):
    folder = folder_with(tmp_path, {"tools.md": "## Fees\n\n## ???\n\nSome text.\n"})
    with pytest.raises(CorpusFolderError) as error:
        load_own_corpus(folder)
    assert problems_of(error) == [(1, "section 'Fees' has no text under its heading"),
                                  (3, "heading '## ???' has no letters or digits, so it gives no section id")]


def test_every_bad_file_is_listed_at_once(tmp_path):
    folder = folder_with(tmp_path, {"a.md": "no headings", "b.md": b"## X\n\n\xff\n", "c.md": DOC})
    with pytest.raises(CorpusFolderError) as error:
        load_own_corpus(folder)
    assert [problem.path.name for problem in error.value.problems] == ["a.md", "b.md"]
    assert isinstance(error.value, OwnDocumentsError) and isinstance(error.value, ValueError)


# --------------------------------------------------------------------------- the questions file


def test_valid_file_loads_in_file_order(tmp_path, small_corpus):
    rows = enough_questions()
    frame = load_own_questions(questions_file(tmp_path, rows), small_corpus)
    assert frame["id"].tolist() == [row["id"] for row in rows]
    assert frame.loc[0, "section_ids"] == ["tools/borrowing-limits"] and frame.loc[0, "answer"] == "3 tools"


def test_blank_lines_and_missing_gold_of_other_types_are_accepted(tmp_path, small_corpus):
    rows = enough_questions()
    for row in rows[12:]:
        del row["section_ids"], row["answer"]
    path = questions_file(tmp_path, rows[:5] + ["", "   "] + rows[5:])
    frame = load_own_questions(path, small_corpus)
    assert len(frame) == 36
    assert (frame.loc[12:, "section_ids"].map(len) == 0).all() and (frame.loc[12:, "answer"] == "").all()


def line_problems(tmp_path, small_corpus, bad: dict | str, at: int = 3) -> list[tuple[int | None, str]]:
    """The problems `load_own_questions` finds when `bad` is line `at` of an otherwise valid file."""
    rows: list[dict | str] = enough_questions()
    rows.insert(at - 1, bad)
    path = questions_file(tmp_path, rows)
    with pytest.raises(QuestionsFileError) as error:
        load_own_questions(path, small_corpus)
    assert str(error.value).startswith(f"{path}:{at}: ")
    return problems_of(error)


LINE_CASES = {
    "bad JSON": ('{"id": "x1", "question": "Why?",', "not valid JSON: Expecting property name enclosed in double "
                 "quotes (column 33)"),
    "not an object": ('["x1", "Why?"]', "each line must be one JSON object {...}, not a list"),
    "missing field": ({"id": "x1", "type": "unanswerable"}, "missing field 'question'"),
    "answerable without an answer field": ({"id": "x1", "question": "Q?", "type": "answerable", "section_ids":
                                            ["tools/opening-hours"]}, "missing field 'answer'"),
    "unknown field": (question(99, section_id=["tools/opening-hours"]),
                      "unknown field 'section_id' (did you mean 'section_ids'?)"),
    "unknown type": (question(99, kind="unanswerible"), "unknown type \"unanswerible\" (did you mean "
                     "'unanswerable'?); a type is one of answerable, unanswerable, out_of_scope"),
    "unknown split": (question(99, split="train"), "unknown split \"train\"; a split is dev or test, or leave it out "
                      "to have one drawn"),
    "section id not in the corpus": (question(99, section_ids=["tools/borrowing-limit"]),
                                     "section id 'tools/borrowing-limit' is not in the corpus (did you mean "
                                     "'tools/borrowing-limits'?)"),
    "section ids as a string": (question(99, section_ids="tools/opening-hours"),
                                "'section_ids' must be a list of section ids, got \"tools/opening-hours\""),
    "answerable without sections": (question(99, section_ids=[]),
                                    "an answerable question needs at least one section id in 'section_ids'"),
    "answerable with an empty answer": (question(99, answer=" "), "an answerable question needs its short answer "
                                        "in 'answer'"),
    "answer a number": (question(99, answer=3), "'answer' must be a string, got 3"),
    "empty question": (question(99, question=""), "'question' must be a non-empty string, got \"\""),
    "id a number": (question(99, id=7), "'id' must be a non-empty string, got 7"),
    "gold section on an unanswerable question": (question(99, kind="unanswerable", section_ids=["tools/opening-hours"]),
                                                 "a question of type unanswerable has no gold section; leave "
                                                 "'section_ids' empty"),
    "answer on an out-of-scope question": (question(99, kind="out_of_scope", answer="Paris"),
                                           "a question of type out_of_scope has no gold answer; leave 'answer' empty"),
}


@pytest.mark.parametrize("case", LINE_CASES, ids=list(LINE_CASES))
def test_bad_line_is_refused_with_its_line_and_what_is_wrong(tmp_path, small_corpus, case):
    bad, message = LINE_CASES[case]
    assert line_problems(tmp_path, small_corpus, bad) == [(3, message)]


def test_duplicate_id_names_both_lines(tmp_path, small_corpus):
    assert line_problems(tmp_path, small_corpus, question(5), at=10) == [(10, "id 't005' is used already on line 6")]


def test_non_utf8_line_is_named(tmp_path, small_corpus):
    path = questions_file(tmp_path, enough_questions())
    path.write_bytes(path.read_bytes() + b'{"id": "x1", "question": "Caf\xe9?", "type": "out_of_scope"}\n')
    with pytest.raises(QuestionsFileError) as error:
        load_own_questions(path, small_corpus)
    assert problems_of(error) == [(37, "is not UTF-8 text (byte 0xe9); save the file as UTF-8")]


def test_every_bad_line_is_listed_and_a_long_list_is_cut(tmp_path, small_corpus):
    path = questions_file(tmp_path, enough_questions() + ["not json"] * (MAX_PROBLEMS_SHOWN + 5))
    with pytest.raises(QuestionsFileError) as error:
        load_own_questions(path, small_corpus)
    assert [line for line, _ in problems_of(error)] == list(range(37, 37 + MAX_PROBLEMS_SHOWN + 5))
    assert str(error.value).splitlines()[-1] == "... and 5 more problems"
    assert len(str(error.value).splitlines()) == MAX_PROBLEMS_SHOWN + 1


@pytest.mark.parametrize("kind", QUESTION_TYPES)
def test_too_few_dev_questions_of_a_type(tmp_path, small_corpus, kind):
    rows = [row for row in enough_questions() if row["type"] != kind or row["split"] == "test"]
    rows += [question(100 + n, kind, "dev") for n in range(MIN_DEV_PER_TYPE - 1)]
    path = questions_file(tmp_path, rows)
    with pytest.raises(QuestionsFileError) as error:
        load_own_questions(path, small_corpus)
    assert problems_of(error) == [(None, f"only {MIN_DEV_PER_TYPE - 1} dev questions of type {kind}; at least "
                                         f"{MIN_DEV_PER_TYPE} are needed to fit the gates on dev (add some, or move "
                                         "some from test)")]
    assert str(error.value).startswith(f"{path}: only")
    rows.append(question(200, kind, "dev"))
    assert len(load_own_questions(questions_file(tmp_path, rows), small_corpus)) == len(rows)


def test_no_test_questions(tmp_path, small_corpus):
    with pytest.raises(QuestionsFileError, match="has no test questions"):
        load_own_questions(questions_file(tmp_path, enough_questions(lambda n: "dev")), small_corpus)


def test_min_dev_per_type_is_a_parameter(tmp_path, small_corpus):
    path = questions_file(tmp_path, enough_questions())
    with pytest.raises(QuestionsFileError, match="only 6 dev questions of type answerable"):
        load_own_questions(path, small_corpus, min_dev_per_type=7)


@pytest.mark.parametrize(("content", "message"), [("", "holds no questions"), ("\n\n", "holds no questions")])
def test_empty_questions_file(tmp_path, small_corpus, content, message):
    path = tmp_path / "questions.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(QuestionsFileError, match=message):
        load_own_questions(path, small_corpus)


def test_missing_questions_file_and_a_folder(tmp_path, small_corpus):
    with pytest.raises(QuestionsFileError, match="no such file"):
        load_own_questions(tmp_path / "nothing here.jsonl", small_corpus)
    with pytest.raises(QuestionsFileError, match="is a folder"):
        load_own_questions(tmp_path, small_corpus)


# --------------------------------------------------------------------------- the drawn split


def test_missing_split_is_drawn_stratified_by_type(tmp_path, small_corpus):
    rows = [question(100 * t + n, kind, None) for t, (kind, count) in enumerate(zip(QUESTION_TYPES, (21, 10, 13)))
            for n in range(count)]
    frame = load_own_questions(questions_file(tmp_path, rows), small_corpus)
    for kind, count in zip(QUESTION_TYPES, (21, 10, 13)):
        splits = Counter(frame.loc[frame["type"] == kind, "split"])
        assert splits == {"dev": math.ceil(count / 2), "test": count // 2}, kind


def test_drawn_split_is_seeded_and_does_not_depend_on_line_order(tmp_path, small_corpus):
    rows = enough_questions(lambda n: None)
    first = load_own_questions(questions_file(tmp_path, rows, "a.jsonl"), small_corpus)
    again = load_own_questions(questions_file(tmp_path, rows[::-1], "b.jsonl"), small_corpus)
    assert dict(zip(first["id"], first["split"])) == dict(zip(again["id"], again["split"]))
    other_seeds = [load_own_questions(questions_file(tmp_path, rows, "a.jsonl"), small_corpus, seed=seed)
                   for seed in (1, 2, 3)]
    assert any(frame["split"].tolist() != first["split"].tolist() for frame in other_seeds)


def test_drawn_split_of_one_type_ignores_the_others(tmp_path, small_corpus):
    rows = enough_questions(lambda n: None)
    more = rows + [question(500 + n, "out_of_scope", None) for n in range(4)]
    first = load_own_questions(questions_file(tmp_path, rows, "a.jsonl"), small_corpus)
    second = load_own_questions(questions_file(tmp_path, more, "b.jsonl"), small_corpus)
    for kind in ("answerable", "unanswerable"):
        assert (first.loc[first["type"] == kind, "split"].tolist()
                == second.loc[second["type"] == kind, "split"].tolist())


def test_given_splits_are_kept_and_the_rest_balanced(tmp_path, small_corpus):
    rows = enough_questions(lambda n: "dev" if n < 4 else None)  # 4 of each type already dev
    frame = load_own_questions(questions_file(tmp_path, rows), small_corpus)
    assert (frame.groupby("type")["split"].apply(lambda s: (s == "dev").sum()) == 6).all()
    kept = [row["id"] for row in rows if row.get("split") == "dev"]
    assert (frame.set_index("id").loc[kept, "split"] == "dev").all()


def test_null_fields_count_as_left_out(tmp_path, small_corpus):
    rows = enough_questions(lambda n: None)
    for row in rows:
        row["split"] = None
        if row["type"] != "answerable":
            row["section_ids"] = row["answer"] = None
    frame = load_own_questions(questions_file(tmp_path, rows), small_corpus)
    assert set(frame["split"]) == {"dev", "test"}
    assert frame.loc[12:, "section_ids"].tolist() == [[]] * 24 and set(frame.loc[12:, "answer"]) == {""}
    rows[0]["answer"] = None
    assert line_problems(tmp_path, small_corpus, rows[0], at=1)[0] == (1, "missing field 'answer'")
