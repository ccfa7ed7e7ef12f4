# Set-up is two commands: `make demo` and `make test`. Each creates .venv when it is missing or
# older than pyproject.toml, so a fresh clone needs nothing else.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test demo lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

demo: $(STAMP)  ## the seed's degradation experiment on bundled digits, offline, a few minutes on a CPU
	$(BIN)/resnet degrade

lint: $(STAMP)
	$(BIN)/ruff check resnet_cli tests tools

# Every measured table in docs/ is written by tools/docs_tables.py from the commands' --json output
# (between <!-- generated: NAME --> markers), with the machine and wall time beside it.
.PHONY: docs docs-studies

docs: $(STAMP)  ## the quick tables and figures: digits runs, degrade, gradnorm, plot, lesion, landscape (minutes)
	$(BIN)/python tools/docs_tables.py quick

docs-studies: $(STAMP)  ## the five quick ablation studies and the benchmarks (an hour or more on 2 cores)
	$(BIN)/python tools/docs_tables.py studies

clean:
	rm -rf $(VENV) runs .pytest_cache
