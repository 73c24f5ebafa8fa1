"""The notebooks store the kernelspec ipykernel installs, so JupyterLab opens them unmodified.

JupyterLab writes the running kernel's spec into a notebook's metadata on connect; a stored spec
that differs marks the notebook modified before anything runs, and autosave rewrites the file.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "setup"))

import fix_kernelspec  # noqa: E402  (a script in setup/, imported for its functions)
import run_notebooks  # noqa: E402

NOTEBOOKS = fix_kernelspec.notebook_paths()


def test_installed_kernelspec_is_read_from_the_environment():
    spec = fix_kernelspec.installed_kernelspec()
    assert spec["name"] == "python3"
    assert spec["language"] == "python"
    assert spec["display_name"].strip(), "the installed python3 kernel has no display name"


def test_there_are_notebooks_to_check():
    assert len(NOTEBOOKS) >= 14, [path.name for path in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_stores_the_installed_kernelspec(path: Path):
    stored = dict(nbformat.read(path, as_version=4).metadata.get("kernelspec", {}))
    assert stored == fix_kernelspec.installed_kernelspec(), (
        f"{path.name} stores kernelspec {stored}; run `python setup/fix_kernelspec.py` to store "
        "the installed one, or JupyterLab marks the notebook modified when it opens")


def _notebook(kernelspec: dict[str, str]) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# A title"), nbformat.v4.new_code_cell("print(6 * 7)")]
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    notebook.metadata["kernelspec"] = kernelspec
    notebook.metadata["language_info"] = {"name": "python"}
    return notebook


def test_fix_rewrites_only_the_kernelspec(tmp_path: Path):
    installed = fix_kernelspec.installed_kernelspec()
    stale = {**installed, "display_name": "Python 3"}
    path = tmp_path / "00-toy.ipynb"
    nbformat.write(_notebook(stale), path)
    before = path.read_text(encoding="utf-8").splitlines()

    assert fix_kernelspec.fix(path, installed) is True
    after = path.read_text(encoding="utf-8").splitlines()
    changed = [(old, new) for old, new in zip(before, after) if old != new]
    assert len(before) == len(after)
    assert changed == [('   "display_name": "Python 3",',
                        f'   "display_name": "{installed["display_name"]}",')]
    assert fix_kernelspec.fix(path, installed) is False  # a second run finds nothing to do


def test_check_mode_writes_nothing(tmp_path: Path):
    installed = fix_kernelspec.installed_kernelspec()
    path = tmp_path / "00-toy.ipynb"
    nbformat.write(_notebook({**installed, "display_name": "Python 3"}), path)
    text = path.read_text(encoding="utf-8")
    assert fix_kernelspec.fix(path, installed, write=False) is True
    assert path.read_text(encoding="utf-8") == text


def test_executing_a_notebook_keeps_its_kernelspec(tmp_path: Path):
    """setup/run_notebooks.py (nbclient) writes outputs and language_info, never the kernelspec."""
    installed = fix_kernelspec.installed_kernelspec()
    source, target = tmp_path / "00-toy.ipynb", tmp_path / "out" / "00-toy.ipynb"
    nbformat.write(_notebook(installed), source)
    run = run_notebooks.run_one(source, target, timeout=60)
    assert run.ok, run.error
    executed = nbformat.read(target, as_version=4)
    assert executed.cells[1].outputs[0]["text"] == "42\n"
    assert dict(executed.metadata["kernelspec"]) == installed

