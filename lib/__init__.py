"""The workbook's shared package: every helper a notebook needs lives here, with a unit test.

One module per idea; lib/README.md is the map (three paths through `lib`, the import tower, a line
on each module). The model: the `backends` package (the API `backends.protocol.LLM`, the embedded
model, the OpenAI-compatible client, the server launcher and the one factory), `recording`
(record/replay), `model_file`, `settings` (the one reader of the WORKBOOK_* variables),
`embeddings`, `hashing`, `checklist`, `source`. Part I: `datasets`, `text`, `indexes`, `retrieval`,
`quotes`, `structured`, `grounding`, `citations`, `model_citations`, `fallback_answers`,
`extraction`, `rules`, `tools`. Part II: `grammar`, `code_steps`, `logprobs`, `decisions`,
`asking`, `semantic_entropy`. Part III: `checks`, `intervals`, `calibration`, `selective` (the one
threshold fitter, the threshold-estimator base and `Gate`), `guarantees`, `actions`,
`out_of_scope`, `routing`, `plots`, `assistant`, `assistant_fitting`. The `saved_runs` package
makes and reads every saved run under data/results/ (`python setup/run_saved.py --list`). And
`answers` and `exercises` for every notebook. Notebooks start with `from lib import get_llm`.
"""
from lib.recording import get_llm

__all__ = ["get_llm"]
