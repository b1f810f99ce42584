# Two entry points for people and CI: `make demo` and `make test`.
# Both set up everything they need on a fresh machine (Python 3.11, pip, venv).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup system demo test static unit bench fit manifests clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, exactly pinned, so that the local CPU wheel is taken.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,train]'
	# torchtitan's JobConfig and argument parser, for the launcher's flags to be parsed by
	# it in tests; without its dependencies (datasets, tensorboard...), which parsing needs
	# none of (tyro is a dev dependency).
	$(BIN)/python -m pip install --quiet --no-deps torchtitan==0.2.2
	# llm-analysis, the peer benchmarks/peers.py compares with; without its dependencies
	# (pinned transformers and huggingface-hub releases its analysis does not import; fire,
	# which it does, is a dev dependency).
	$(BIN)/python -m pip install --quiet --no-deps llm-analysis==0.2.2
	touch $(STAMP)

setup: $(STAMP)

# Debian packages the tests use: a real Prometheus server (tests start it on 127.0.0.1).
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
system:
	@command -v prometheus >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus; }

# Plans every example, then runs the tiny one here (2 CPU processes, about 75 s on 2
# cores) with a live ETA; the ETA log and the report (summary.json, eta.png) go to build/demo/.
demo: setup
	$(BIN)/trainplan plan deploy/examples/*.yaml
	$(BIN)/trainplan run deploy/examples/tiny-local.yaml --local \
		--eta-log build/demo/eta.jsonl --report build/demo

static: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The tiers without processes or servers run on two workers (pytest-xdist); the tiers
# that start the operator, Prometheus, torchrun and trainers run one test at a time, as
# their waits are bounded in wall time. Every directory of tests/ is in one of the two
# (tests/unit/test_test_tiers.py); a plain `pytest` runs them all, in one process.
PURE_TESTS := tests/unit tests/reference tests/contract tests/chart tests/golden
PROCESS_TESTS := tests/integration tests/local tests/runtime

unit: setup system
	$(BIN)/pytest -n 2 $(PURE_TESTS)
	$(BIN)/pytest $(PROCESS_TESTS)

# pytest exits 5 when it collects no test; make treats that as a failure.
test: static unit

# Speed and accuracy goals (results and machine in BENCHMARKS.md).
bench: setup
	$(BIN)/python -m benchmarks

# Refit the planner's efficiency constants to tests/data and store them.
fit: setup
	$(BIN)/python -m benchmarks.fit_calibration --write

# After changing charts/trainplan or crds/: copy crds/ into the chart and render
# deploy/manifests/ from the chart (offline, helm-python-sdk); tests/chart checks both.
manifests: setup
	cp crds/*.yaml charts/trainplan/files/crds/
	$(BIN)/python -m tests.chart.helm_render --write

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .benchmarks
