# Two commands on a fresh machine with python3 and make: `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint env clean docs

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

env: $(STAMP)

demo: $(STAMP)
	$(BIN)/ledger demo --store .demo/store

docs: $(STAMP)
	$(BIN)/python -m ledger._clidoc > docs/cli.md.tmp && mv docs/cli.md.tmp docs/cli.md

lint: $(STAMP)
	$(BIN)/ruff check ledger tests migrations
	$(BIN)/ruff format --check ledger tests migrations
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .demo dist build .pytest_cache .mypy_cache .ruff_cache .hypothesis
