"""Keep the outputs stored in a notebook stable from one re-execution to the next.

An ipywidgets cell stores a widget view: an output whose data holds
``application/vnd.jupyter.widget-view+json`` with a ``model_id`` that is random on every run,
and the widgets' state in the notebook metadata under ``widgets``. Neither can be shown
without a live kernel, and both change on every refresh, so the diff of a re-executed notebook
is never empty. `strip_widget_views` removes them and keeps everything else (the static
figure or text a widget cell also displays).

A cell's printed text arrives as stream messages whose split depends on timing (a busy machine
delivers one `print` as two chunks), so `merge_streams` joins adjacent chunks of the same
stream: the stored output then depends only on what the cell printed.
"""
from __future__ import annotations

from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

__all__ = ["WIDGET_VIEW", "strip_widget_views", "merge_streams"]


def strip_widget_views(notebook: dict[str, Any]) -> dict[str, Any]:
    """Remove widget views and widget state from a notebook (a dict or nbformat node), in place.

    For every code cell output with a ``data`` bundle, the widget-view entry is dropped; an
    output left with no data at all is dropped too, while one that still has a static
    representation (``text/plain``, ``image/png``, ...) is kept without the view. The
    ``widgets`` entry of the notebook metadata is removed. Returns the same notebook, so the
    call can be chained before writing.
    """
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data")
            if data is not None and WIDGET_VIEW in data:
                del data[WIDGET_VIEW]
                if not data:
                    continue
            kept.append(output)
        cell["outputs"] = kept
    notebook.get("metadata", {}).pop("widgets", None)
    return notebook


def merge_streams(notebook: dict[str, Any]) -> dict[str, Any]:
    """Join adjacent stream outputs of the same name (stdout, stderr) in every code cell, in place.

    Returns the same notebook, so the call can be chained before writing.
    """
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        merged: list[Any] = []
        for output in cell.get("outputs", []):
            previous = merged[-1] if merged else None
            if (output.get("output_type") == "stream" and previous is not None
                    and previous.get("output_type") == "stream" and previous.get("name") == output.get("name")):
                previous["text"] = _text(previous["text"]) + _text(output["text"])
                continue
            merged.append(output)
        cell["outputs"] = merged
    return notebook


def _text(text: str | list[str]) -> str:
    """A stream's text as one string (nbformat allows a list of lines on disk)."""
    return text if isinstance(text, str) else "".join(text)
