# Two commands on a fresh machine with python3 and make: `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint env clean docs tools

# Programs the tests run (program:package). Missing ones are installed from the
# distribution when possible; otherwise make test stops here, saying which.
TOOLS := sqlite3:sqlite3 strace:strace setpriv:util-linux unshare:util-linux

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

env: $(STAMP)

demo: $(STAMP)
	$(BIN)/ledger demo --store .demo/store

docs: $(STAMP)
	$(BIN)/python -m tools.clidoc > docs/cli.md.tmp && mv docs/cli.md.tmp docs/cli.md

lint: $(STAMP)
	$(BIN)/ruff check ledger tests migrations tools
	$(BIN)/ruff format --check ledger tests migrations tools
	$(BIN)/mypy

tools:
	@missing=""; for t in $(TOOLS); do command -v "$${t%%:*}" >/dev/null 2>&1 || missing="$$missing $${t#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing the programs the tests need:$$missing"; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
	    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  elif command -v dnf >/dev/null 2>&1; then \
	    dnf install -y $$missing; \
	  fi; \
	  for t in $(TOOLS); do command -v "$${t%%:*}" >/dev/null 2>&1 || \
	    { echo "make test needs $${t%%:*} (package $${t#*:}): install it and run make test again" >&2; exit 1; }; done; \
	fi

test: lint tools
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .demo dist build .pytest_cache .mypy_cache .ruff_cache .hypothesis
