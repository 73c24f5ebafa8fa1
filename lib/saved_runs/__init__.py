"""The saved runs under data/results/, in one package: one module per family, one registry, one command.

A saved run is one JSON-lines file made once by asking the model about a whole list of items (hours
for some), then read by the notebooks instead of asking again. Every one is made or resumed by
`python setup/run_saved.py --run NAME` (`make results` runs them all; `--list` names them).

* `store`: the one reader and writer of the files (`ResultsStore`: header, rows, resume, one writer
  at a time) and the one place the command line is written (`run_command`).
* `items`: a run over a list of items (`run_items`, `load_item_run`) and what every producer takes
  (`RunOptions`).
* the families, each the producer and the reader of its runs: `decisions` (a decider over a whole
  BANKING77 or CLINC150 split, notebooks 07-17 and 21), `questions` (questions and messages,
  notebooks 06-10 and 14-21), `asking` (09, 21), `committees` (04), `tools` (05), `drift` (07, 21).
* `registry`: every run by name, with its family, the notebooks that read it, its inputs, its
  producer and its command (`RUNS`, `saved_run`, `produce`).
"""

__all__: list[str] = []
