# Set-up in one command each: `make demo` (the environment, then the pretrained demo) and `make test`
# (the environment if needed, then lint and the tests; CI runs the same through .ci/run).
# The environment is .venv; torch comes first, from PyTorch's CPU index (a plain `torch` requirement on a
# machine without torch pulls a multi-GB CUDA build). --retries 0: where that index cannot be reached,
# the install fails fast, then the indexes pip is configured with (PyPI, extra indexes, find-links with
# a local wheel) serve torch==2.13.0 instead. Override with `make PYTHON=python3.12 test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test env clean-env

demo: $(STAMP)
	$(BIN)/python scripts/pretrained_demo.py

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

env: $(STAMP)

# openai-whisper ships GPT-2's BPE ranks (the VAE's tokenizer; never imported) and supar is a benchmark
# baseline: both without their heavy dependencies (--no-deps)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --retries 0 torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
		|| $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[all,dev,bench]"
	$(BIN)/python -m pip install -q --no-deps openai-whisper==20250625 supar==1.1.4
	touch $(STAMP)

clean-env:
	rm -rf $(VENV)
