# Two entry points (see README): `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/alexandria demo

test: $(STAMP)
	$(BIN)/ruff check alexandria tests cli.py bench genesis
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python -m bench.admission

clean:
	rm -rf $(VENV) alexandria-data alexandria-demo
