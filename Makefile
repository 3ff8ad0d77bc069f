# Set-up and checks. `make test` builds .venv on a fresh machine and runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch; installed first and then pinned, so no dependency can
# pull a CUDA build. Override for a GPU machine, e.g. TORCH_SPEC='torch==2.13.0+cu128'.
TORCH_SPEC ?= torch==2.13.0

.PHONY: run test test-fast install install-dev browser screenshot bench clean

# What a run needs (torch, the package and its dependencies).
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet '$(TORCH_SPEC)' numpy
	$(BIN)/python -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/torch-pin.txt
	$(BIN)/pip install --quiet -c $(VENV)/torch-pin.txt -e .
	touch $@

# What the tests add: the test tools and the independent implementations they compare against.
install-dev: $(VENV)/.installed-dev

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install --quiet -c $(VENV)/torch-pin.txt -e '.[dev]'
	# Test oracle for the network definitions; it pins numpy<=1.19.5, so no deps.
	$(BIN)/pip install --quiet --no-deps xautodl==1.0.0
	# Test oracle for Dirichlet calibration (docs/recalibration.md). 0.5.3 declares
	# Python >= 3.12 but runs on 3.11 (tested); it needs jax on the CPU.
	$(BIN)/pip install --quiet -c $(VENV)/torch-pin.txt --ignore-requires-python dirichletcal==0.5.3
	touch $@

# The main job: the whole workflow on the embedded mini benchmark (demo numbers, not
# NATS-Bench results), outputs under results/.
run: install
	$(BIN)/calibench run --cores 2

test: install-dev browser
	$(BIN)/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder

# The quick subset (about a minute on 2 cores): the numeric core, config and CLI checks, the
# package's shape and its documentation; no workflow run (tests/conftest.py, FAST_FILES).
test-fast: install-dev
	$(BIN)/python -m pytest -m fast -n 2

# A headless browser for `make screenshot` and the report-rendering tests: Debian's
# chromium-headless-shell (about 100 MB download, 300 MB installed, 20 s; needs root and apt).
# Where it cannot be installed the rendering tests skip, saying why.
browser:
	@command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium-headless-shell >/dev/null; } || echo "no headless browser installed: the rendering tests will skip"

# The standalone report in a headless Chromium, the whole page as one PNG; fails on a missing or
# undecodable figure or a blank page, warns of what sticks out past the 1400 px window.
screenshot: install browser
	$(BIN)/calibench screenshot --report results/report.html --out results/report.png

bench: install-dev
	$(BIN)/python bench/bench_metrics.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
