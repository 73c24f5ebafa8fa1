"""Keep the outputs stored in a notebook stable from one re-execution to the next.

An ipywidgets cell stores a widget view: an output whose data holds
``application/vnd.jupyter.widget-view+json`` with a ``model_id`` that is random on every run,
and the widgets' state in the notebook metadata under ``widgets``. Neither can be shown
without a live kernel, and both change on every refresh, so the diff of a re-executed notebook
is never empty. :func:`strip_widget_views` removes them and keeps everything else (the static
figure or text a widget cell also displays).
"""
from __future__ import annotations

from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

__all__ = ["WIDGET_VIEW", "strip_widget_views"]


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
