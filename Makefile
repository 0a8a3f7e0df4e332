# The two commands of the README's quick start:
#   make demo   create .venv, install, log a simulated RL run, query it, sync it to MLflow, show it
#   make test   create .venv, install everything the tests need, run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO_ROOT ?= demo-store

.PHONY: demo test install install-test clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[mlflow]"

install-test: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[all,test]"

demo: install
	$(BIN)/trackstore demo --root $(DEMO_ROOT)
	$(BIN)/trackstore runs --root $(DEMO_ROOT)

test: install-test
	$(BIN)/python -m pytest -q

bench: install-test
	$(BIN)/python benchmarks/log_throughput.py

clean:
	rm -rf $(VENV) $(DEMO_ROOT) build dist *.egg-info
