"""Tests for setup/notebook_outputs.py: widget views and widget state leave a notebook's stored outputs,
and printed text is stored the same however the kernel split it."""
from __future__ import annotations

import copy

import nbformat

from setup.notebook_outputs import WIDGET_VIEW, merge_streams, strip_widget_views


def notebook_with_widget() -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    view = {WIDGET_VIEW: {"model_id": "47baabf2f5a046d094ed32f5a2e0b1bb", "version_major": 2, "version_minor": 0}}
    notebook.cells = [
        nbformat.v4.new_markdown_cell("text"),
        nbformat.v4.new_code_cell("controls", outputs=[
            nbformat.v4.new_output("display_data", data={**view, "text/plain": "VBox(children=(...))"}),
            nbformat.v4.new_output("display_data", data=dict(view)),
            nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}),
            nbformat.v4.new_output("stream", name="stdout", text="printed\n"),
        ]),
    ]
    return notebook


def test_strip_widget_views_keeps_static_outputs():
    notebook = strip_widget_views(notebook_with_widget())
    outputs = notebook.cells[1].outputs
    assert [sorted(o.get("data", {})) for o in outputs] == [["text/plain"], ["image/png", "text/plain"], []]
    assert outputs[2]["text"] == "printed\n"
    assert "widgets" not in notebook.metadata and "kernelspec" in notebook.metadata
    nbformat.validate(notebook)


def test_strip_widget_views_is_stable_and_leaves_plain_notebooks_alone():
    stripped = strip_widget_views(notebook_with_widget())
    assert strip_widget_views(copy.deepcopy(stripped)) == stripped
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1", outputs=[
        nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=1)])])
    assert strip_widget_views(copy.deepcopy(plain)) == plain


def test_merge_streams_joins_adjacent_chunks_of_one_stream_only():
    figure = nbformat.v4.new_output("display_data", data={"text/plain": "<Figure>"})
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="a"),
        nbformat.v4.new_output("stream", name="stdout", text="b\n"),
        nbformat.v4.new_output("stream", name="stderr", text="warning\n"),
        nbformat.v4.new_output("stream", name="stdout", text="c\n"),
        figure,
        nbformat.v4.new_output("stream", name="stdout", text=["d\n", "e\n"]),
    ])])
    outputs = merge_streams(notebook).cells[0].outputs
    assert [(o.get("name"), o.get("text")) for o in outputs] == [
        ("stdout", "ab\n"), ("stderr", "warning\n"), ("stdout", "c\n"), (None, None), ("stdout", ["d\n", "e\n"])]
    nbformat.validate(notebook)
    assert merge_streams(copy.deepcopy(notebook)) == notebook
