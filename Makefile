# The workbook's commands. Each one sets up .venv (and the model) first if anything is missing.
PY := .venv/bin/python
# The arguments a learner types (NB=, NAME=, PORT=, ...) reach the scripts through the environment
# as "$$NB", taken as typed ($(value ...): make expands nothing in them either): never pasted into
# the shell line, so NB='00"; rm -rf x; "', a backquote or $(shell ...) stays text that the script
# refuses, instead of a command that runs. Only the arguments given are exported: an empty PORT in
# the environment would reach llama_cpp.server, which reads it.
define pass_as_text
ifdef $(1)
override $(1) := $$(value $(1))
export $(1)
endif
endef
$(foreach name,NB NAME LEARNERS NOTEBOOK ONLY HOST PORT SLOTS THREADS ENGINE LEVELS SECONDS JSON,$(eval $(call pass_as_text,$(name))))

.PHONY: setup model run run-server serve load-test lint test test-slow test-all record update refresh results lab smoke site site-smoke bench bench-course drift clean

setup:
	@bash setup/install.sh

model: setup          ## install a second pinned model (opt-in): make model NAME=qwen2.5-coder-0.5b-instruct
	$(PY) setup/get_model.py --name "$$NAME"

run: setup            ## execute every notebook live against the embedded model (copies in build/)
	$(PY) setup/run_notebooks.py

run-server: setup     ## execute every notebook live against the same model behind llama_cpp.server (copies in build/server/)
	$(PY) setup/run_server.py --only "$$NB"

serve: setup          ## the class server: llama-server (xllamacpp) with the model; HOST, PORT (8080), SLOTS (4), THREADS; Ctrl+C stops it
	$(PY) setup/serve.py --host "$${HOST:-127.0.0.1}" --port "$${PORT:-8080}" --slots "$${SLOTS:-4}" $${THREADS:+--threads "$$THREADS"}

load-test: setup      ## LEARNERS (default 30) learners Run All one notebook (NOTEBOOK=00-setup) on each ENGINE (llama-server, llama-cpp-python; default both); LEVELS=1,5 SECONDS=120 SLOTS=4 JSON=file
	$(PY) setup/load_test.py --learners "$${LEARNERS:-30}" --notebook "$${NOTEBOOK:-00-setup}" $${ENGINE:+--engine "$$ENGINE"} $${LEVELS:+--levels "$$LEVELS"} $${SECONDS:+--seconds "$$SECONDS"} $${SLOTS:+--slots "$$SLOTS"} $${JSON:+--json "$$JSON"}

# Two workers; the tests that load the model share one of them (tests/conftest.py groups them and
# hands out the longest work first), and each notebook's cells stay on one worker.
# PYTHONDONTWRITEBYTECODE= : Python keeps its compiled modules (__pycache__/, ignored by git) even
# where the environment turns that off, so a second run does not compile lib/ and tests/ again in
# every worker, kernel and runner (3 s of each worker's start here).
TEST := PYTHONDONTWRITEBYTECODE= WORKBOOK_MODE=replay $(PY) -m pytest -n 2 --dist loadscope tests --nbval notebooks -p no:cacheprovider

lint: setup           ## ruff on lib, setup and tests (the rules are chosen in pyproject.toml)
	$(PY) -m ruff check lib setup tests

test: lint            ## ruff, then unit tests of lib + nbval on every notebook in replay mode, without the tests marked slow
	$(TEST) -m "not slow"

test-slow: setup      ## only the tests marked slow (the 77-intent prompt, the deciders on the embedded model, second and damaged model loads, every notebook run twice), on two workers
	$(TEST) -m slow

test-all: lint        ## ruff, then every test, the slow ones included, in one run (.ci/run runs make test, then make test-slow)
	$(TEST)

record: setup         ## re-record notebooks (all, or NB=06-grammars) and rewrite their outputs
	$(PY) setup/run_notebooks.py --record --only "$$NB"

update: setup         ## like record, but only requests not yet recorded call the model (NB=06-grammars)
	$(PY) setup/run_notebooks.py --update --only "$$NB"

refresh: setup        ## rewrite notebook outputs from recordings and the current data/results (no model)
	$(PY) setup/run_notebooks.py --refresh --only "$$NB"

results: setup       ## run or resume every saved run (resumable; setup/run_saved.py --list names them): committees (minutes), tool conversations (about an hour), BANKING77 / CLINC150 (hours on 2 cores), the questions of 06-10/18-20, asking, drift (hours)
	$(PY) setup/run_saved.py

# Serves the repository (so links to ../README.md and data/ open too) and opens on notebooks/.
# --allow-root only as root (containers, cloud machines, CI); LAB_ARGS adds options, e.g. --port=8890.
lab: setup            ## open JupyterLab on notebooks/ (the URL with its token is printed below)
	@echo "Starting JupyterLab on notebooks/: open the URL ending in ?token=... that it prints below. Ctrl+C stops it."
	.venv/bin/jupyter lab --LabApp.default_url=/lab/tree/notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

smoke: setup          ## JupyterLab in headless Chromium: Run All in notebooks 00, 02, 11, 17 and those with widgets
	$(PY) setup/smoke.py

site: setup           ## the course as a static, read-only site in build/site/, built offline (REPO_URL=https://.../blob/main: source links there)
	$(PY) setup/site.py $(if $(REPO_URL),--repo-url "$(REPO_URL)")

site-smoke: site      ## the site in headless Chromium: home page, three notebooks' figures, search, previous/next; screenshots in build/site-smoke/
	$(PY) setup/site_smoke.py

bench: setup          ## speed ratios measured side by side in one run
	$(PY) setup/bench.py
	$(PY) setup/bench_decisions.py

bench-course: setup   ## seconds against the classroom targets: notebooks live, make test, install (ONLY=00, REUSE=1)
	$(PY) setup/bench_course.py --only "$$ONLY" $(if $(REUSE),--reuse)

drift: setup          ## run or resume the drift measurement (data/results/drift-*.jsonl, notebook 07; hours) and print its table
	$(PY) setup/run_saved.py --family drift

clean:
	rm -rf build
