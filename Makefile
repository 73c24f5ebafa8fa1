# The workbook's commands. Each one sets up .venv (and the model) first if anything is missing.
PY := .venv/bin/python
NB ?=

.PHONY: setup run test record update refresh results lab bench drift clean

setup:
	@bash setup/install.sh

run: setup            ## execute every notebook live against the embedded model (copies in build/)
	$(PY) setup/run_notebooks.py

test: setup           ## unit tests of lib + nbval on every notebook in replay mode
	WORKBOOK_MODE=replay $(PY) -m pytest tests --nbval notebooks -p no:cacheprovider

record: setup         ## re-record notebooks (all, or NB=05-grammars) and rewrite their outputs
	$(PY) setup/run_notebooks.py --record --only "$(NB)"

update: setup         ## like record, but only requests not yet recorded call the model (NB=05-grammars)
	$(PY) setup/run_notebooks.py --update --only "$(NB)"

refresh: setup        ## rewrite notebook outputs from recordings and the current data/results (no model)
	$(PY) setup/run_notebooks.py --refresh --only "$(NB)"

results: setup       ## run or resume the saved runs: committees (minutes), BANKING77 / CLINC150 (hours on 2 cores); resumable
	$(PY) setup/run_committees.py
	$(PY) setup/run_results.py

lab: setup            ## open JupyterLab on notebooks/
	.venv/bin/jupyter lab notebooks

bench: setup          ## speed ratios measured side by side in one run
	$(PY) setup/bench.py
	$(PY) setup/bench_decisions.py

drift: setup          ## re-run a sample of recordings live and print the largest changes
	$(PY) setup/drift.py

clean:
	rm -rf build
