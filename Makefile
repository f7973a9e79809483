# The README's commands. Each creates .venv when it is missing and (re)installs the project
# whenever pyproject.toml (the server's or the client's) is newer than the last install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
# The server requires the client (countersign-client, in clients/python/), installed from here.
CLIENT := ./clients/python
PROJECTS := pyproject.toml $(CLIENT)/pyproject.toml
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-stock test-ts screenshots lint bench bench-submit bench-decision bench-ts bench-pages clean

# pip quiet: errors still print, and a failing install still fails. The one warning left on a
# good install is setuptools' "Editable installation" block (folders named like the package may
# shadow it: here they are the package), dropped by its message in pip's build subprocess too.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet

$(BIN)/python:
	@echo "Creating the virtual environment $(VENV)…"
	@$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): $(PROJECTS) | $(BIN)/python
	@echo "Installing Countersign into $(VENV) (first run: about a minute)…"
	@$(PIP_INSTALL) --upgrade pip
	@$(PIP_INSTALL) -e $(CLIENT) -e .
	@touch $@

$(TEST_STAMP): $(PROJECTS) | $(BIN)/python
	@echo "Installing Countersign and its test tools into $(VENV) (first time: a few minutes)…"
	@$(PIP_INSTALL) --upgrade pip
	@$(PIP_INSTALL) -e $(CLIENT) -e '.[test]'
	@touch $@ $(RUN_STAMP)

# SQLite under var/, the demo approvers, admin, agents and example rules, then the ASGI server.
# Commands are not echoed, so the banner demo_setup prints is the last thing before the
# server's log; demo_setup stops first when the port is taken (no banner, no token touched).
run: $(RUN_STAMP)
	@echo "Preparing the database and static files under var/…"
	@$(BIN)/python manage.py migrate --noinput -v0
	@$(BIN)/python manage.py collectstatic --noinput -v0
	@$(BIN)/python manage.py demo_setup --url http://$(HOST):$(PORT)
	@DEBUG=1 COUNTERSIGN_PUBLIC_URL=$${COUNTERSIGN_PUBLIC_URL:-http://$(HOST):$(PORT)} $(BIN)/python -m config.serve --host $(HOST) --port $(PORT)

test: $(TEST_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The tests that reach every config/runtime piece, with each piece switched back to its stock
# component (config/runtime/README.md).
STOCK_TESTS := tests/config/runtime tests/approvals/test_consumers.py \
	tests/approvals/test_longpoll.py tests/approvals/test_queue_consumer.py \
	tests/approvals/test_api.py tests/approvals/test_api_races.py tests/approvals/test_views.py \
	tests/approvals/test_batch_decisions.py tests/test_live.py tests/scale/test_hostile_sockets.py
test-stock: $(TEST_STAMP)
	COUNTERSIGN_STOCK=all $(BIN)/python -m pytest $(PYTEST_ARGS) $(STOCK_TESTS)

# The browser tests, writing their pictures into docs/screenshots/ (a plain run keeps them apart).
screenshots: $(TEST_STAMP)
	COUNTERSIGN_SCREENSHOTS=1 $(BIN)/python -m pytest $(PYTEST_ARGS) tests/browser

# The TypeScript client (clients/typescript/): its locked packages, then its Vitest suite against
# a server it starts with this virtualenv's Python.
test-ts: $(TEST_STAMP)
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error
	cd clients/typescript && COUNTERSIGN_PYTHON=$(abspath $(BIN))/python npm test

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(TEST_STAMP)
	$(BIN)/python bench/capcore_bench.py

# The service benchmarks (docs/performance.md); pass flags in BENCH_ARGS, e.g.
# make bench-decision BENCH_ARGS="--agents 5000 --mode bulk"
bench-submit: $(TEST_STAMP)
	$(BIN)/python bench/submit_bench.py $(BENCH_ARGS)

bench-decision: $(TEST_STAMP)
	$(BIN)/python bench/decision_bench.py $(BENCH_ARGS)

# The same decision latency with the agents waiting through the TypeScript client, in Node.
bench-ts: $(TEST_STAMP)
	test -d clients/typescript/node_modules || (cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error)
	$(BIN)/python bench/ts_decision_bench.py $(BENCH_ARGS)

bench-pages: $(TEST_STAMP)
	$(BIN)/python bench/pages_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
