# Set-up is two commands: `make demo` and `make test`. Each creates .venv when it is missing or
# older than pyproject.toml, so a fresh clone needs nothing else.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-quick demo lint clean gpu-check mutation

install: $(STAMP)

# The dev install takes .ci/constraints.txt's pins, the versions CI tests; pyproject.toml keeps ranges.
# Said before it starts, since it is minutes of silence otherwise (pip -q): what and about how long.
$(STAMP): pyproject.toml .ci/constraints.txt
	@echo "installing into $(VENV), once: torch, torchvision, typer, rich, pyyaml, pydantic, scikit-learn, scipy,"
	@echo "matplotlib and the test tools (pytest, ruff, onnx, pandas), pinned by .ci/constraints.txt; about 2 min"
	@echo "on a quiet machine with the packages cached, longer on a slow network or busy cores"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c .ci/constraints.txt -e '.[dev]'
	touch $(STAMP)
	@echo "installed: $(BIN)/resnet"

# The suite runs on TEST_WORKERS processes (pytest-xdist; CI has 2 cores). Most slow tests wait on
# child processes, so two workers keep both cores busy; tests against the one-node SLURM share one
# worker (conftest.py), since they share its one node.
TEST_WORKERS ?= 2
# Most of a child process's start is imports (torch and its compiler, about 5 s of CPU here); the
# package's own modules are compiled once first, since a machine with PYTHONDONTWRITEBYTECODE set
# (this one) would compile them again in each of the suite's few hundred children.
PRECOMPILE = $(BIN)/python -m compileall -q resnet_cli >/dev/null

test: $(STAMP)
	$(PRECOMPILE)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

test-quick: $(STAMP)  ## the edit-test loop: everything but the tests marked slow (make test runs all of them)
	$(PRECOMPILE)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not slow"

# Its folder is degrade's default (runs/degrade/digits-8-26), so `resnet degrade` afterwards reads it back.
demo: $(STAMP)  ## the seed's degradation experiment on bundled digits, offline: 40 runs, minutes on a CPU
	@echo "resnet degrade: 40 digits runs, 2.3 min at one job on 2 cores (docs/degrade.md, Measured)"
	$(BIN)/resnet degrade

# On one GPU in under five minutes: tests/gpu plus ResNet-110 / ResNet-1001 speed, into gpu-check.json.
# Another Python with its own PyTorch (a cluster's): make gpu-check GPU_PY=python3 (README "GPU check").
GPU_PY ?= $(BIN)/python
# Seconds for the whole check; GPU_BUDGET=900 also reaches the compiled ResNet-1001.
GPU_BUDGET ?= 290
gpu-check: $(if $(filter $(BIN)/python,$(GPU_PY)),$(STAMP))
	$(GPU_PY) tests/gpu/check.py --out gpu-check.json --budget $(GPU_BUDGET)

# Mutation testing (not in CI: minutes to an hour): mutmut plants one small bug at a time in the
# deciding code ([tool.mutmut] in pyproject.toml: which files, which tests) and reruns those tests;
# `mutmut results` lists the survivors. Scores and the equivalent survivors: docs/maintainers.md.
# Each module against its own tests (tools/mutation.py); MODULES=results/study.py for one.
mutation: $(STAMP)
	$(BIN)/python -m pip install -q "mutmut>=3.8,<4"
	$(BIN)/python tools/mutation.py $(MODULES)

lint: $(STAMP)
	$(BIN)/ruff check resnet_cli tests tools

# Every measured table in docs/ is written by tools/docs_tables.py from the commands' --json output
# (between <!-- generated: NAME --> markers), with the machine and wall time beside it.
.PHONY: docs docs-studies docs-fashion docs-fashion-studies

docs: $(STAMP)  ## the quick tables and figures: digits runs, degrade, gradnorm, plot, lesion, landscape (minutes)
	$(BIN)/python tools/docs_tables.py quick

docs-studies: $(STAMP)  ## the CNN studies (the transformer ones: docs/vit.md), quick preset, and the benchmarks (an hour or more on 2 cores)
	$(BIN)/python tools/docs_tables.py studies

docs-fashion: $(STAMP)  ## He 2016a Fig. 1/6 on Fashion-MNIST, with its lesions and landscapes (about 5 hours on 2 cores from scratch, a run at a time; needs the data)
	$(BIN)/python tools/docs_tables.py fashion

docs-fashion-studies: $(STAMP)  ## He 2016b Tables 1, 2 and the depth study on Fashion-MNIST (an hour or more each on 2 cores; needs the data)
	$(BIN)/python tools/docs_tables.py fashion-studies

clean:
	rm -rf $(VENV) runs .pytest_cache gpu-check.json gpu-check.junit.xml mutants

# An offline install bundle (docs/install.md): resnet-cli's wheel and every dependency's but torch and
# torchvision, for the target's Python and platform(s); e.g. make wheelhouse WHEEL_PY=3.12. Needs network here.
WHEEL_PY ?= $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
WHEEL_PLATFORM ?= manylinux2014_x86_64
.PHONY: wheelhouse
wheelhouse: $(STAMP)
	$(BIN)/python tools/wheelhouse.py --out wheelhouse --python $(WHEEL_PY) $(foreach p,$(WHEEL_PLATFORM),--platform $(p))

# As root: start a one-node SLURM on this machine (tools/slurm_local.sh; installs slurm-wlm and munge the
# first time, prints the daemons' logs if it cannot start) and run the SLURM tests against it
# (docs/cluster.md). CI runs this after make test. RESNET_REQUIRE_SLURM=1 makes a skipped test a
# failure (tests/conftest.py): here "no cluster answering" is a broken check, not a pass.
.PHONY: slurm-check
slurm-check: $(STAMP)
	sh tools/slurm_local.sh
	RESNET_REQUIRE_SLURM=1 $(BIN)/python -m pytest tests/test_slurm.py tests/test_slurm_launcher.py
