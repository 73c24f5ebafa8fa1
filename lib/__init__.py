"""The workbook's shared package: every helper a notebook needs lives here, with a unit test.

One module per idea (lib/README.md has a line on each). The model: `llm` (the API and the
embedded backend), `openai_compatible` (the server backend), `recording` (record/replay),
`model_file`, `settings` (the one reader of the WORKBOOK_* variables), `embeddings`, `hashing`,
`checklist`, `source`. Part I: `datasets`, `text`, `indexes`, `retrieval`, `quotes`, `structured`,
`grounding`, `citations`, `extraction` (committee facts read by the model), `rules` (the committee rules in Python and Z3). Part II: `grammar`, `code_steps`,
`logprobs`, `decisions`, `runs`, `question_runs`, `asking`, `semantic_entropy`. Part III: `checks` (the
shared input checks), `intervals` (binomial and bootstrap intervals), `calibration`, `selective` (with the one threshold fitter),
`out_of_scope`, `routing`, `plots`, `assistant`, `assistant_fitting`. And `exercises` for every notebook.
Notebooks start with `from lib import get_llm`.
"""
from lib.recording import get_llm

__all__ = ["get_llm"]
