# Two entry points (see README): `make demo` runs the main job, `make test` runs the tests.
# Both create or reuse .venv and install what they need into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.runwright-installed

.PHONY: demo test lint setup clean

# The compiled data kernels are built by the editable install, so their source is a prerequisite.
$(STAMP): pyproject.toml $(wildcard src/runwright/data/read/csrc/*)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU machines: pin torch to the CPU wheel first; an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/runwright demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -m "not slow" -q -n 2 --dist loadgroup --durations=25

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) .runwright .pytest_cache
