# The README's commands. Each creates .venv when it is missing and (re)installs the project
# whenever pyproject.toml is newer than the last install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint bench bench-submit bench-decision bench-pages clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(RUN_STAMP)

# SQLite under var/, the demo approvers, agents and example rules, then the ASGI server.
run: $(RUN_STAMP)
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/python manage.py demo_setup --url http://$(HOST):$(PORT)
	DEBUG=1 $(BIN)/python -m daphne -b $(HOST) -p $(PORT) config.asgi:application

test: $(TEST_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

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

bench-pages: $(TEST_STAMP)
	$(BIN)/python bench/pages_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
