# Two entry points (see README): `make run [PORT=8080]` and `make test`.
PY ?= python3
PORT ?= 8080
VENV := .venv
BIN := $(VENV)/bin
# `make run` installs the package alone; `make test` adds the dev tools
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP) $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/alexandria demo --port $(PORT)

test: $(STAMP)
	$(BIN)/ruff check alexandria tests cli.py bench genesis
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -n 4

bench: $(STAMP)
	$(BIN)/python -m bench.admission

clean:
	rm -rf $(VENV) alexandria-data alexandria-demo alexandria-demo-homes
