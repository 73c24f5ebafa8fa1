"""Running a notebook's cells again in the same kernel shows the same outputs.

A learner re-runs cells all the time: after changing one, or to look at an output again. A cell
that rebinds a name an earlier cell made, or whose result depends on state left by other cells
(a random generator, a solver's history), then shows something else than the notebook says.
Each notebook is executed in replay mode top to bottom, each cell twice in a row, then every
cell again, in order, in the same kernel, and the later outputs must equal the first. Outputs
nbval is told to ignore (`NBVAL_IGNORE_OUTPUT`) are not compared, and cells it skips
(`NBVAL_SKIP`) are not run.

A solver's model is the one state that a second pass may miss by luck: Z3's answer to an
under-determined search depends on every term made before in its context, so a cell that reads
`.model()` is also run after other Z3 work in the kernel (as cells run again, or in another
order, leave) and must show the same answer as without it.
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "setup"))

from notebook_outputs import WIDGET_VIEW, merge_streams  # noqa: E402  (a script folder, imported for its functions)

NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]-*.ipynb"))


def nbval_markers(cell: Any) -> set[str]:
    """nbval's markers on a cell: its tags, and `# NBVAL_...` comments on the cell's first lines."""
    comments = {line.strip().lstrip("#").strip() for line in cell.source.splitlines()[:3] if line.strip().startswith("#")}
    return {marker for marker in set(cell.metadata.get("tags", [])) | comments if marker.startswith("NBVAL_")}


def comparable(cell: Any) -> list[tuple]:
    """A cell's outputs without what may differ between identical runs (execution counts, widget ids)."""
    merged = merge_streams({"cells": [copy.deepcopy(cell)]})["cells"][0]
    shown = []
    for output in merged.get("outputs", []):
        kind = output["output_type"]
        if kind == "stream":
            shown.append((kind, output["name"], output["text"]))
        elif kind == "error":
            shown.append((kind, output["ename"], output["evalue"]))
        else:
            shown.append((kind, {mime: value for mime, value in output.get("data", {}).items() if mime != WIDGET_VIEW}))
    return shown


def run_every_cell(client: NotebookClient, notebook: Any, before: int | None = None,
                   each_twice: bool = False) -> tuple[dict[int, list[tuple]], dict[int, list[tuple]]]:
    """Execute every code cell in order (only those above cell `before` when given).

    Returns each cell's comparable outputs by cell index, and with `each_twice` also the outputs
    of running each cell a second time right after the first (else an empty dict).
    """
    outputs, right_away = {}, {}
    for index, cell in enumerate(notebook.cells[:before]):
        if cell.cell_type != "code" or "NBVAL_SKIP" in nbval_markers(cell):
            continue
        for shown in (outputs, right_away) if each_twice else (outputs,):
            cell.outputs = []
            client.execute_cell(cell, index)
            shown[index] = comparable(cell)
    return outputs, right_away


def replay_client(path: Path, notebook: Any) -> NotebookClient:
    return NotebookClient(notebook, timeout=600, kernel_name="python3", allow_errors=True,
                          resources={"metadata": {"path": str(path.parent)}})


REPLAY = {**os.environ, "WORKBOOK_MODE": "replay"}
SOLVER_CELLS = [(path, index) for path in NOTEBOOKS
                for index, cell in enumerate(nbformat.read(path, as_version=4).cells)
                if cell.cell_type == "code" and ".model()" in cell.source]
"""Every code cell that reads a Z3 model, as (notebook, cell index)."""
OTHER_Z3_WORK = ("import z3\n\nearlier = [z3.Bool(f'earlier_{i}') for i in range(200)]\nsolver = z3.Solver()\n"
                 "solver.add(z3.Sum([z3.If(b, 1, 0) for b in earlier]) == 50)\nsolver.check()\nsolver.model()")
"""Z3 terms and a solve unrelated to any notebook's, made in the kernel's default context."""


def first_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip()), "")[:60]


def shorten(outputs: list[tuple], width: int = 300) -> str:
    text = repr(outputs)
    return text if len(text) <= width else text[:width] + "..."


def test_there_are_notebooks_to_rerun() -> None:
    assert NOTEBOOKS, "no notebooks/NN-*.ipynb found"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_running_every_cell_again_shows_the_same_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = replay_client(path, notebook)
    with client.setup_kernel(env=REPLAY):
        first, right_away = run_every_cell(client, notebook, each_twice=True)
        again, _ = run_every_cell(client, notebook)
    changed = [f"cell {index} (`{first_line(notebook.cells[index].source)}`), {when}:\n"
               f"    first: {shorten(first[index])}\n    again: {shorten(second[index])}"
               for when, second in (("run again right away", right_away), ("run again after the whole notebook", again))
               for index in first
               if first[index] != second[index] and "NBVAL_IGNORE_OUTPUT" not in nbval_markers(notebook.cells[index])]
    assert not changed, f"{path.name}: running cells a second time changes {len(changed)} outputs:\n" + "\n".join(changed)


@pytest.mark.slow
@pytest.mark.parametrize("path, index", SOLVER_CELLS, ids=lambda value: getattr(value, "stem", str(value)))
def test_a_solver_cell_shows_the_same_answer_after_other_z3_work(path: Path, index: int) -> None:
    shown = []
    for other_work in (False, True):
        notebook = nbformat.read(path, as_version=4)
        client = replay_client(path, notebook)
        with client.setup_kernel(env=REPLAY):
            run_every_cell(client, notebook, before=index)
            if other_work:
                notebook.cells.append(new_code_cell(OTHER_Z3_WORK))
                client.execute_cell(notebook.cells[-1], len(notebook.cells) - 1)
            notebook.cells[index].outputs = []
            client.execute_cell(notebook.cells[index], index)
        shown.append(comparable(notebook.cells[index]))
    assert shown[0] == shown[1], (f"{path.name}, cell {index} (`{first_line(notebook.cells[index].source)}`): "
                                  f"after the cells above: {shorten(shown[0])}\n    after other Z3 work too: "
                                  f"{shorten(shown[1])}")
