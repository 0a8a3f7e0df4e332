# The two commands of the README's quick start:
#   make demo   create .venv, install, log a simulated RL run, query it, sync it to MLflow, show it
#   make test   create .venv, install everything the tests need, lint and type-check, run the whole suite
#               (then the framework tests: make test-frameworks, and the Spark test: make test-spark,
#               each in its own venv)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO_ROOT ?= demo-store

.PHONY: demo test lint install install-test install-browser clean bench install-frameworks test-frameworks \
        install-spark test-spark

# The framework test environment (verl, Ray, Transformers, TRL, Lightning on CPU torch) is a
# separate venv so the main one stays small; torch==2.13.0 is the CPU build (docs/integrations.md).
FW_VENV ?= .venv-frameworks
FW_BIN  := $(FW_VENV)/bin
# Where the CPU torch wheel comes from: the development/CI machines have it in pip's find-links;
# elsewhere use  make test TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_PIP_ARGS ?=

# The Spark test (a replica read by Spark in local mode, tests/spark) has its own venv too:
# pyspark is a 456 MB download that makes a 688 MB venv, and needs a Java (17) on the machine.
SPARK_VENV ?= .venv-spark
SPARK_BIN  := $(SPARK_VENV)/bin

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[mlflow]"

# SwanLab's local dashboard needs swanboard at exactly the version its client names, whose
# rich<14 pin conflicts with ours: installed without its pins, its own deps by hand.
install-test: $(BIN)/python
# MLflow 3.18 for the tests (users get any mlflow>=2.16): tests/test_ui_platforms.py drives
# MLflow's own UI, which a minor release may redraw (3.18.0, on the registry 7 December 2026,
# replaced the trace list's filter menu with a filter box); the tests follow 3.18's, and move to
# the next one when they are rewritten for it
	$(BIN)/pip install --quiet -e ".[all,test]" "mlflow>=3.18,<3.19"
	$(BIN)/pip install --quiet --no-deps swanboard==0.1.10b2
	$(BIN)/pip install --quiet fastapi uvicorn "peewee>3,<4" ujson psutil

# The browser tests (the dashboard's, tests/test_ui_browser.py, and the platforms' own UIs,
# tests/test_ui_platforms.py) drive the system's Chromium with Selenium.
# Installed from the distribution's packages (Debian: chromium, chromium-driver) when missing: a
# no-op when both are there; as root, else through sudo; without either the browser tests skip
# and say why.
BROWSER_PACKAGES ?= chromium chromium-driver
install-browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=sudo; \
	else echo "install-browser: not root and no sudo: cannot install $(BROWSER_PACKAGES); the browser tests will be skipped"; exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then echo "install-browser: no apt-get: install Chromium and chromedriver yourself"; exit 0; fi; \
	echo "installing $(BROWSER_PACKAGES) for the browser tests"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(BROWSER_PACKAGES) >/dev/null 2>&1 || \
	  { $$sudo apt-get update -q >/dev/null 2>&1 && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(BROWSER_PACKAGES) >/dev/null; } || \
	  echo "install-browser: apt-get could not install $(BROWSER_PACKAGES); the browser tests will be skipped"

demo: install
	$(BIN)/trackstore demo --root $(DEMO_ROOT)
	$(BIN)/trackstore runs --root $(DEMO_ROOT)
	$(BIN)/trackstore sql "SELECT key, count(*) AS points, round(min(value), 3) AS first, round(max(value), 3) AS best FROM metrics WHERE key LIKE 'critic/score/%' OR key LIKE 'val-core/%' GROUP BY key ORDER BY key" --root $(DEMO_ROOT)
	$(BIN)/trackstore sync --to mlflow --verify --root $(DEMO_ROOT)
	$(BIN)/trackstore status --root $(DEMO_ROOT)
	@echo "MLflow store: $(DEMO_ROOT)/_mlflow/mlflow.db  (browse: $(BIN)/mlflow ui --backend-store-uri sqlite:///$(DEMO_ROOT)/_mlflow/mlflow.db)"
	@echo ""
	@echo "Look around yourself: paste these two lines, then the README's next block"
	@echo "  source $(VENV)/bin/activate                  # puts trackstore on PATH"
	@echo "  export TRACKSTORE_DIR=$(abspath $(DEMO_ROOT))   # the demo's store (the default is ./tsruns)"

# The suite's tests often wait (on servers, browsers, a sync's retry back-off, a process to
# reach a point where it is killed): three workers keep the 2 cores of the CI machine busy
# (measured on such a machine: 17:52 with the framework venv installing beside it; two workers:
# about 19 minutes before this round's CPU cuts). PYTEST_WORKERS=0 runs it in one process.
# --dist loadgroup: tests spread one at a time, except the modules marked xdist_group (those
# sharing a server, browser or store), which stay on one worker so it starts once.
# --max-worker-restart=0: a worker that dies (a crash in native code) ends the run at once, with
# "worker 'gwN' crashed while running <test>"; replacing it under --dist loadgroup hangs the run
# for good with pytest-xdist 3.8 (pytest-dev/pytest-xdist#1323 and #1327, fixed after 3.8),
# which CI would only see as its 90-minute timeout.
PYTEST_WORKERS ?= 3

# The framework venv (torch, verl: a few minutes of pip) installs and its tests run in the
# background while lint and the main suite run, which keeps the whole of `make test` within CI's
# 15 minutes (run one after the other, the framework tests alone added about 100 s). Their output
# is in $(FW_VENV).test.log; its summary is printed at the end, and the whole log if they failed.
# The Spark venv (about 40 s of pip) and its test (about 20 s) run beside them the same way, their
# output in $(SPARK_VENV).test.log.
test: install-test install-browser
	@rm -f $(FW_VENV).test.rc $(SPARK_VENV).test.rc; \
	( { $(MAKE) --no-print-directory install-frameworks && $(MAKE) --no-print-directory test-frameworks; } \
	  > $(FW_VENV).test.log 2>&1; echo $$? > $(FW_VENV).test.rc ) & \
	( { $(MAKE) --no-print-directory install-spark && $(MAKE) --no-print-directory test-spark; } \
	  > $(SPARK_VENV).test.log 2>&1; echo $$? > $(SPARK_VENV).test.rc ) & \
	status=0; \
	$(MAKE) --no-print-directory lint && $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --max-worker-restart=0 || status=$$?; \
	echo "waiting for the framework and Spark tests (logs: $(FW_VENV).test.log, $(SPARK_VENV).test.log)"; wait; \
	failed=0; \
	if [ "$$(cat $(FW_VENV).test.rc 2>/dev/null)" != 0 ]; then \
	  tail -n 80 $(FW_VENV).test.log; echo "the framework venv or its tests failed"; failed=1; \
	else echo "framework tests:"; tail -n 3 $(FW_VENV).test.log; fi; \
	if [ "$$(cat $(SPARK_VENV).test.rc 2>/dev/null)" != 0 ]; then \
	  tail -n 80 $(SPARK_VENV).test.log; echo "the Spark venv or its test failed"; failed=1; \
	else echo "Spark test:"; tail -n 3 $(SPARK_VENV).test.log; fi; \
	[ $$failed = 0 ] || exit 1; \
	[ $$status = 0 ] || exit $$status

# ruff (lint + import order) over everything, mypy over the core package; both configured in pyproject.toml
lint: install-test
	$(BIN)/ruff check .
	$(BIN)/mypy

$(FW_BIN)/python:
	$(PYTHON) -m venv $(FW_VENV)
	$(FW_BIN)/python -m pip install --quiet --upgrade pip

$(FW_VENV)/.installed: pyproject.toml | $(FW_BIN)/python
	$(FW_BIN)/pip install --quiet $(TORCH_PIP_ARGS) torch==2.13.0
	flock .pip-editable.lock $(FW_BIN)/pip install --quiet -e ".[frameworks]"
	touch $@

install-frameworks: $(FW_VENV)/.installed

test-frameworks: install-frameworks
	$(FW_BIN)/python -m pytest -q tests/integrations

$(SPARK_BIN)/python:
	$(PYTHON) -m venv $(SPARK_VENV)
	$(SPARK_BIN)/python -m pip install --quiet --upgrade pip

# pyspark, pytest and trackstore itself (its core dependencies: DuckDB and pyarrow, no extras).
# The framework and Spark venvs install this checkout in the background at the same time: the
# editable builds share its build folders, so they take turns (flock, util-linux).
$(SPARK_VENV)/.installed: pyproject.toml | $(SPARK_BIN)/python
	$(SPARK_BIN)/pip install --quiet pyspark==4.3.0 "pytest>=8,<9.2"
	flock .pip-editable.lock $(SPARK_BIN)/pip install --quiet -e .
	touch $@

install-spark: $(SPARK_VENV)/.installed

test-spark: install-spark
	$(SPARK_BIN)/python -m pytest -q tests/spark

bench: install-test
	$(BIN)/python benchmarks/log_throughput.py

clean:
	rm -rf .pip-editable.lock $(VENV) $(FW_VENV) $(FW_VENV).install.* $(FW_VENV).test.* $(SPARK_VENV) $(SPARK_VENV).test.* \
	  $(DEMO_ROOT) build dist *.egg-info
