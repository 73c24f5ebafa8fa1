"""What the notebooks say about the repository is true: files they name exist, links resolve,
and no notebook reaches for a private ``lib`` name (one with a leading underscore).

A notebook that points the learner at a file that is not there, or teaches with a name the
library does not promise to keep, breaks the first time someone follows it. These checks read
the committed notebooks only; they run no cell.
"""
from __future__ import annotations

import ast
import json
import os
import re
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]-*.ipynb"))
SKIPPED_DIRS = {".git", ".venv", ".cache", "build", "__pycache__", ".ipynb_checkpoints", ".pytest_cache"}
REPOSITORY_DIRS = ("data", "lib", "setup", "tests", "notebooks", ".ci")
FILE_EXTENSIONS = ("md", "py", "txt", "json", "jsonl", "csv", "yml", "yaml", "toml", "ipynb", "sh")

# A path that starts at a repository folder, e.g. `data/results/`, lib/saved_runs/decisions.py, ../setup/x.py.
PATH_PATTERN = re.compile(r"(?<![\w/.~-])((?:\.\./)*(?:%s)/[\w./*<>{}-]*)" % "|".join(re.escape(d) for d in REPOSITORY_DIRS))
# A bare file name with a known extension, e.g. COURSE.md, scope_examples.txt.
NAME_PATTERN = re.compile(r"(?<![\w/.~-])([\w-]+(?:\.[\w-]+)*\.(?:%s))(?![\w/])" % "|".join(FILE_EXTENSIONS))
# A path that climbs out of the notebooks folder, e.g. ../shared/COURSE.md (not a link target).
OUTSIDE_PATTERN = re.compile(r"(?<![\w/.(-])((?:\.\./)+[\w./-]+)")
# A markdown link target: [text](target).
LINK_PATTERN = re.compile(r"\]\(([^)\s]+)\)")
# A dotted private lib name written out, e.g. lib.saved_runs.decisions._shortlist_variants.
PRIVATE_DOTTED = re.compile(r"\blib(?:\.\w+)*\._[A-Za-z]\w*")


@lru_cache(maxsize=1)
def repository_file_names() -> frozenset[str]:
    """Base names of every file in the checkout (build outputs, caches and the venv left out)."""
    names = set()
    for _folder, subfolders, files in os.walk(REPO):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED_DIRS]
        names.update(files)
    return frozenset(names)


def cells(path: Path, kind: str) -> list[tuple[int, str]]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [(i, "".join(cell["source"])) for i, cell in enumerate(notebook["cells"]) if cell["cell_type"] == kind]


def path_exists(path: str) -> bool:
    """Whether a repository-relative path (or glob) names something in the checkout."""
    path = path.rstrip(".,;:")
    if re.search(r"[<>{}]", path):  # a template such as data/results/<task>-<split>.jsonl
        return True
    resolved = (REPO / path).resolve()
    if REPO.resolve() not in resolved.parents and resolved != REPO.resolve():
        return False  # outside the repository
    if "*" in path:
        return any(REPO.glob(path))
    return resolved.exists()


def missing_files(markdown: str) -> list[str]:
    """Names of repository files, folders and link targets in ``markdown`` that do not exist."""
    names = repository_file_names()
    missing = [m.group(1) for m in PATH_PATTERN.finditer(markdown) if not path_exists(m.group(1))]
    for match in OUTSIDE_PATTERN.finditer(markdown):  # ../x from the notebooks folder: must stay inside
        resolved = (REPO / "notebooks" / match.group(1).rstrip(".,;:")).resolve()
        if REPO.resolve() not in resolved.parents or not resolved.exists():
            missing.append(match.group(1))
    missing += [m.group(1) for m in NAME_PATTERN.finditer(markdown) if m.group(1) not in names]
    for match in LINK_PATTERN.finditer(markdown):
        target = match.group(1).split("#")[0]
        if not target or re.match(r"^[a-z]+:", target):  # an anchor, http:, https:, mailto:
            continue
        resolved = (REPO / "notebooks" / target).resolve()
        if REPO.resolve() not in resolved.parents or not resolved.exists():
            missing.append(target)
    return sorted(set(missing))


def private_names(code: str) -> list[str]:
    """Private names the code imports from lib or reads as attributes (``x._name``, not dunders)."""
    source = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
    found = [match.group(0) for match in PRIVATE_DOTTED.finditer(source)]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lib":
            found += [f"from {node.module} import {alias.name}" for alias in node.names
                      if alias.name.startswith("_") or any(part.startswith("_") for part in node.module.split("."))]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names
                      if alias.name.split(".")[0] == "lib" and any(p.startswith("_") for p in alias.name.split("."))]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
            found.append(f"{ast.unparse(node.value)}.{node.attr}")
    return sorted(set(found))


def test_the_checks_catch_what_they_should():
    assert missing_files("see `data/results/` and lib/saved_runs/decisions.py and setup/run_saved.py, "
                         "data/LABEL_GROUPS.md.") == []
    assert missing_files("see lib/runs.py and setup/run_results.py") == ["lib/runs.py", "setup/run_results.py"]
    assert missing_files("see `data/no-such-file.jsonl` and COURSE.md") == ["COURSE.md", "data/no-such-file.jsonl"]
    assert missing_files("[next](11-reliability.ipynb), [web](https://example.org), [here](#top), [up](../README.md)") == []
    assert missing_files("[gone](99-nothing.ipynb) and ../shared/COURSE.md") == ["../shared/COURSE.md", "99-nothing.ipynb"]
    assert missing_files("files like data/results/<task>-<split>-<method>.jsonl") == []
    assert private_names("import lib.runs as R\nR._helper(1)\nfrom lib.runs import _x, load_results\nlib.runs._y") == [
        "R._helper", "from lib.runs import _x", "lib.runs._y"]
    assert private_names("%matplotlib inline\nx = frame.__class__\nfig.isotonic_.X_thresholds_") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_names_only_files_that_exist(path):
    problems = [f"cell {i}: {name}" for i, text in cells(path, "markdown") for name in missing_files(text)]
    assert not problems, f"{path.name} names files that are not in the repository: {problems}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_private_lib_names(path):
    problems = [f"cell {i}: {name}" for i, text in cells(path, "code") for name in private_names(text)]
    problems += [f"cell {i}: {match.group(0)}" for i, text in cells(path, "markdown") for match in PRIVATE_DOTTED.finditer(text)]
    assert not problems, f"{path.name} uses private lib names: {problems}"


@pytest.mark.parametrize("index", range(len(NOTEBOOKS)), ids=lambda i: NOTEBOOKS[i].stem)
def test_each_notebook_links_to_the_previous_and_the_next(index):
    notebook = json.loads(NOTEBOOKS[index].read_text(encoding="utf-8"))
    first, last = ("".join(notebook["cells"][k]["source"]) for k in (0, -1))
    if index > 0:
        assert f"]({NOTEBOOKS[index - 1].name})" in first.split("\n\n")[0], \
            f"{NOTEBOOKS[index].name} should start with a link to {NOTEBOOKS[index - 1].name}"
    if index < len(NOTEBOOKS) - 1:
        assert f"]({NOTEBOOKS[index + 1].name})" in last, \
            f"{NOTEBOOKS[index].name} should end with a link to {NOTEBOOKS[index + 1].name}"


# A link into a section of a notebook: [the argument](10-semantic-entropy.ipynb#Some-heading).
SECTION_LINK = re.compile(r"\]\(([\w-]+\.ipynb)#([^)\s]+)\)")


def heading_anchors(markdown_cells: list[str]) -> frozenset[str]:
    """Jupyter's anchor for each Markdown heading: its text with spaces written as '-'."""
    return frozenset(re.sub(r"\s+", "-", line.lstrip("#").strip())
                     for text in markdown_cells for line in text.splitlines() if re.match(r"#{1,6}\s", line))


def broken_section_links(markdown: str, anchors_of) -> list[str]:
    """Section links in ``markdown`` whose notebook has no heading with that anchor (``anchors_of(name)``)."""
    return sorted({f"{name}#{anchor}" for name, anchor in SECTION_LINK.findall(markdown) if anchor not in anchors_of(name)})


def test_the_section_link_check_catches_what_it_should():
    anchors = {"08-x.ipynb": heading_anchors(["## Why calibration cannot raise AUROC\n\ntext # not a heading"])}.get
    assert broken_section_links("[a](08-x.ipynb#Why-calibration-cannot-raise-AUROC)", anchors) == []
    assert broken_section_links("[a](08-x.ipynb#A-monotone-calibrator)", anchors) == ["08-x.ipynb#A-monotone-calibrator"]
    assert broken_section_links("[a](08-x.ipynb#not-a-heading)", anchors) == ["08-x.ipynb#not-a-heading"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_section_links_name_a_heading_that_exists(path):
    """A heading renamed in one notebook must not leave another notebook's link to it pointing nowhere."""
    def anchors_of(name: str) -> frozenset[str]:
        target = path.parent / name
        return heading_anchors([text for _, text in cells(target, "markdown")]) if target.exists() else frozenset()

    problems = [f"cell {i}: {link}" for i, text in cells(path, "markdown") for link in broken_section_links(text, anchors_of)]
    assert not problems, f"{path.name} links to sections that no heading names: {problems}"


# "notebook 07", "notebooks 06 and 08-12", "Notebooks 09-11": every number must be a notebook.
NOTEBOOK_NUMBERS = re.compile(r"\b[Nn]otebooks?\s+(\d\d(?:(?:,\s*|\s+and\s+|\s+or\s+|-|–|\s+to\s+)\d\d)*)\b")
# A link to a notebook whose text carries a number: [Next: 10 · Semantic entropy →](10-semantic-entropy.ipynb).
NUMBERED_LINK = re.compile(r"\[[^\]]*?(?<![\d.])(\d\d) · [^\]]*\]\((\d\d)-[\w-]+\.ipynb\)")
# A dotted lib name written out, e.g. lib.intervals.bootstrap_interval, lib.saved_runs.decisions or lib.backends.
LIB_NAME = re.compile(r"(?<![\w.])lib(?:\.[A-Za-z_]\w*)+")
MAX_CELLS = 60
"""One notebook is one class session: at most about 90 minutes and 60 cells (the syllabus)."""


def existing_notebook_numbers(paths=NOTEBOOKS) -> frozenset[str]:
    return frozenset(path.name[:2] for path in paths)


def missing_notebook_numbers(markdown: str, numbers: frozenset[str]) -> list[str]:
    """Notebook numbers that ``markdown`` names but no notebook has, and links whose number is not their target's."""
    missing = [f"notebook {number}" for match in NOTEBOOK_NUMBERS.finditer(markdown)
               for number in re.findall(r"\d\d", match.group(1)) if number not in numbers]
    missing += [f"link text {text} to {target}-*.ipynb" for text, target in NUMBERED_LINK.findall(markdown) if text != target]
    return sorted(set(missing))


def module_path(dotted: str) -> Path | None:
    """The file of the lib module or package `dotted` (`saved_runs.decisions`, `backends`), or None."""
    base = REPO / "lib" / Path(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=None)
def module_names(module: str) -> dict[str, frozenset[str] | None]:
    """Top-level names of the lib module `module` (dotted, `saved_runs.decisions`); for a class, the names
    its body defines (None for anything else)."""
    path = module_path(module)
    names: dict[str, frozenset[str] | None] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):  # methods, class attributes, fields, and self.x set in a method
            names[node.name] = frozenset(
                item.name if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else
                item.id if isinstance(item, ast.Name) else item.attr
                for item in ast.walk(node)
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                or (isinstance(item, ast.Name) and isinstance(item.ctx, ast.Store))
                or (isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store)
                    and isinstance(item.value, ast.Name) and item.value.id == "self"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Name):
                    names[target.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(alias.asname or alias.name).split(".")[0]: None for alias in node.names})
    return names


def missing_lib_names(markdown: str) -> list[str]:
    """Dotted lib names in ``markdown`` (lib.module, lib.package.module.name, lib.module.Class.method) that lib
    does not define: the longest start that is a module or package, then a name it defines, then a member."""
    missing = []
    for match in LIB_NAME.finditer(markdown):
        parts = match.group(0).split(".")[1:]
        depth = next((end for end in range(len(parts), 0, -1) if module_path(".".join(parts[:end]))), 0)
        if depth == 0:
            if not (len(parts) == 1 and parts[0] in module_names("__init__")):
                missing.append(match.group(0))
            continue
        module, rest = ".".join(parts[:depth]), parts[depth:]
        if rest:
            names = module_names(module)
            if rest[0] not in names:
                missing.append(match.group(0))
            elif len(rest) >= 2 and names[rest[0]] is not None and rest[1] not in names[rest[0]]:
                missing.append(match.group(0))
    return sorted(set(missing))


def test_the_name_checks_catch_what_they_should():
    numbers = frozenset({"06", "07", "08", "09"})
    assert missing_notebook_numbers("notebook 07, notebooks 06 and 08-09, Notebook 09", numbers) == []
    assert missing_notebook_numbers("as notebook 13 shows; notebooks 06 and\n08-12", numbers) == [
        "notebook 12", "notebook 13"]
    assert missing_notebook_numbers("[Next: 09 · Semantic entropy →](09-semantic-entropy.ipynb)", numbers) == []
    assert missing_notebook_numbers("[Next: 08 · Semantic entropy →](09-semantic-entropy.ipynb)", numbers) == [
        "link text 08 to 09-*.ipynb"]
    assert missing_lib_names("`lib.intervals.bootstrap_interval`, `lib.saved_runs.decisions`, `lib.backends`, "
                             "lib.decisions.FullListDecider.decide, `lib.selective.auroc`, "
                             "`lib.saved_runs.decisions.load_results`, lib.backends.embedded.EmbeddedLLM.chat.") == []
    assert missing_lib_names("`lib.runs.load_results`, `lib.saved_runs.nothing`, lib.backends.embedded.EmbeddedLLM.x") == [
        "lib.backends.embedded.EmbeddedLLM.x", "lib.runs.load_results", "lib.saved_runs.nothing"]
    assert missing_lib_names("`lib.calibration.fit_x`, `lib.nothing`, lib.decisions.FullListDecider.no_such_method") == [
        "lib.calibration.fit_x", "lib.decisions.FullListDecider.no_such_method", "lib.nothing"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_names_only_notebooks_and_lib_names_that_exist(path):
    numbers = existing_notebook_numbers()
    problems = [f"cell {i}: {name}" for i, text in cells(path, "markdown")
                for name in missing_notebook_numbers(text, numbers) + missing_lib_names(text)]
    assert not problems, f"{path.name} names notebooks or lib names that do not exist: {problems}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_fits_one_class_session(path):
    count = len(json.loads(path.read_text(encoding="utf-8"))["cells"])
    assert count <= MAX_CELLS, (f"{path.name} has {count} cells, more than {MAX_CELLS}: one notebook is one class "
                                "session; split it, or merge adjacent short cells")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_states_its_learner_time_at_the_top(path):
    first = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    stated = re.search(r"\*About (\d+) minutes\.\*", first)
    assert stated, f"{path.name}: its first cell should say how long it takes a learner, as *About 60 minutes.*"
    assert int(stated.group(1)) <= 90, f"{path.name} says {stated.group(0)}: more than one class session of 90 minutes"


def rebound_names(code: str) -> list[str]:
    """Names a cell reads from earlier cells and then rebinds, so that running it twice reads its own result.

    E.g. ``tokens = [t for answer in tokens for t in answer]``: the second run flattens the flat
    list. A name the cell assigns before reading it (``rows = []`` ... ``rows.append``) is fine,
    and so are names a comprehension, lambda or function binds for itself.
    """
    source = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    local = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
             and any(node in ast.walk(scope) for scope in ast.walk(tree)
                     if isinstance(scope, (ast.comprehension, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)))}
    bound, rebound = set(), []
    for statement in tree.body:
        stores = {node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
        reads = {node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
            reads.add(statement.target.id)
        if not isinstance(statement, (ast.For, ast.While, ast.If, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef)):
            rebound += sorted((stores & reads) - bound - local)
        bound |= stores
    return rebound


def test_the_rerun_check_catches_what_it_should():
    assert rebound_names("tokens = [t for answer in tokens for t in answer]\nprint(len(tokens))") == ["tokens"]
    assert rebound_names("total += 1") == ["total"]
    assert rebound_names("rows = []\nfor r in data:\n    rows.append(r)\nrows = sorted(rows)") == []
    assert rebound_names("flat = [t for answer in tokens for t in answer]\nsquare = lambda x: x * x") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_code_cell_can_run_twice(path):
    problems = [f"cell {i}: {name}" for i, text in cells(path, "code") for name in rebound_names(text)]
    assert not problems, (f"{path.name}: these cells rebind a name they read from an earlier cell, so a second run "
                          f"reads their own result; give the result a new name: {problems}")
