"""The workbook's shared package: every helper a notebook needs lives here, with a unit test.

One module per idea. The model: `llm` (backends), `recording` (record/replay), `model_file`,
`embeddings`, `checklist`. Part I: `datasets`, `retrieval`, `quotes`, `structured`, `grounding`,
`extraction` (committee facts read by the model), `rules` (the committee rules in Python and Z3).
Part II: `grammar`, `code_steps`, `logprobs`, `decisions`, `runs`, `semantic_entropy`.
Part III: `calibration`, `selective`, `routing`, `plots`. And `exercises` for every notebook.
Notebooks start with `from lib import get_llm`.
"""
from lib.recording import get_llm

__all__ = ["get_llm"]
