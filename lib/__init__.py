"""The workbook's shared package: every helper a notebook needs lives here, with a unit test.

One module per idea: `llm` (backends), `recording` (record/replay), `datasets`, `retrieval`,
`quotes`, `rules`, `grammar`, `logprobs`, `calibration`, `selective`, `routing`, `plots`,
`exercises`. Notebooks start with `from lib import get_llm`.
"""
from lib.llm import get_llm

__all__ = ["get_llm"]
