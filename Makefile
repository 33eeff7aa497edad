# Two commands on a fresh machine with python3 and make: `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint env clean docs tools mutants

# Programs the tests run (program:package). Missing ones are installed from the
# distribution when possible; otherwise make test stops here, saying which.
TOOLS := sqlite3:sqlite3 strace:strace setpriv:util-linux unshare:util-linux chromium:chromium fusermount3:fuse3

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,mcp,otel,postgresql]'
	touch $(STAMP)

env: $(STAMP)

demo: $(STAMP)
	$(BIN)/ledger demo --store .demo/store --report .demo/report.html

docs: $(STAMP)
	$(BIN)/python -m tools.clidoc > docs/cli.md.tmp && mv docs/cli.md.tmp docs/cli.md

lint: $(STAMP)
	$(BIN)/ruff check ledger tests migrations tools
	$(BIN)/ruff format --check ledger tests migrations tools
	$(BIN)/mypy

# The PostgreSQL server (initdb, pg_ctl) for the tests of PostgreSQL stores: on PATH, in
# pg_config --bindir, or where Debian's package puts it (not on PATH).
PG_SERVER := postgresql
have_pg = command -v pg_ctl >/dev/null 2>&1 || [ -x "$$(pg_config --bindir 2>/dev/null)/pg_ctl" ] || \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1

tools:
	@missing=""; for t in $(TOOLS); do command -v "$${t%%:*}" >/dev/null 2>&1 || missing="$$missing $${t#*:}"; done; \
	$(have_pg) || missing="$$missing $(PG_SERVER)"; \
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
	  $(have_pg) || { echo "make test needs the PostgreSQL server, initdb and pg_ctl (package $(PG_SERVER)): install it and run make test again" >&2; exit 1; }; \
	fi

# The suite is mostly child processes and fsyncs: one worker per CPU (pytest-xdist).
# Its many child processes import the package: compiled once here, as an installed wheel
# is, they need not compile it again each (PYTHONDONTWRITEBYTECODE keeps imports from
# writing it).
test: lint tools
	$(BIN)/python -m compileall -q ledger migrations tests >/dev/null
	$(BIN)/pytest -n auto

# Mutation testing, on demand (docs/reliability.md, "Mutation testing"). Its own venv
# holds the dependencies but not the ledger package: mutmut runs the tests on its
# mutated copy in mutants/, which an installed ledger would shadow.
MUT_VENV  := .venv-mutants
MUT_STAMP := $(MUT_VENV)/.installed
# What is mutated: the verdict and decision rules, the hash chain, the file checks, recovery,
# how the write queue's lock helpers hold back a signal, and the MCP proxy's reading and
# answering of messages. Not the queue itself nor the run locks: every test reaches them,
# so each mutant that survives or deadlocks costs minutes (their bugs have tests of their own).
MUT_NAMES := 'ledger._core.assessment.x_current*' 'ledger._core.assessment.x_settled_clean*' \
	'ledger._core.decision.x_decide*' 'ledger._core.assessment.x_in_flight*' \
	'ledger._core.assessment.x_is_stale*' 'ledger._core.assessment.x__in_flight_until*' \
	'ledger._core.assessment.x__stale_until*' 'ledger._core.assessment.x__terminals*' \
	'ledger._core.assessment.x_assess*' 'ledger._core.assessment.x__evidence*' \
	'ledger._core.decision.x_newest_attempt*' 'ledger._core.decision.x__same_state*' \
	'ledger._core.decision.x__before*' 'ledger._core.decision.x__unchanged*' \
	'ledger._core.decision.x__step*' 'ledger._chain.*' 'ledger.sqlite.trust.*' \
	'ledger.effect_log.x*_recover*' 'ledger._run.writes.x*recover*' \
	'ledger._run.state.x*recovery*' 'ledger._run.journal.x*hold_exclusive*' \
	'ledger.sqlite.rows.x_preconditions*' 'ledger._combiner.x_acquire_uninterrupted*' \
	'ledger._combiner.x_wait_for_gate*' 'ledger._mcp.wire.*'
MUT_JOBS  ?= 2

$(MUT_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(MUT_VENV)
	$(MUT_VENV)/bin/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	  print(*p["dependencies"], *p["optional-dependencies"]["mutants"], \
	  *p["optional-dependencies"]["mcp"], *p["optional-dependencies"]["postgresql"], \
	  *p["optional-dependencies"]["otel"], "opentelemetry-sdk", \
	  "pytest", "hypothesis", sep="\n")' \
	  > $(MUT_VENV)/requirements.txt
	$(MUT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
	  -r $(MUT_VENV)/requirements.txt
	touch $(MUT_STAMP)

mutants: $(MUT_STAMP)
	rm -rf mutants && mkdir mutants
	@start=$$(date +%s); \
	$(MUT_VENV)/bin/mutmut run --max-children $(MUT_JOBS) $(MUT_NAMES) > mutants/run.log 2>&1 || \
	  { tail -n 40 mutants/run.log; exit 1; }; \
	echo "mutmut run took $$(( $$(date +%s) - start ))s (log: mutants/run.log)"
	@$(MUT_VENV)/bin/mutmut results --all true | grep -v ': not checked$$' > mutants/results.txt
	@grep -v ': killed$$' mutants/results.txt || true
	@awk -F': ' '{n[$$NF]++; t++} END {for (s in n) printf "%s: %d\n", s, n[s]; printf "mutants: %d\n", t}' \
	  mutants/results.txt

clean:
	rm -rf $(VENV) $(MUT_VENV) mutants .demo dist build .pytest_cache .mypy_cache .ruff_cache .hypothesis
