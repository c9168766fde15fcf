# Two entry points: `make demo` and `make test`; each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/safepoint demo

# pytest exits 5 when it collects no test: that is a failure here, never a silent pass.
# One worker per core (at most 4: each starts its own throwaway PostgreSQL); worksteal evens out the long crash tests.
test: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto --maxprocesses 4 --dist worksteal; code=$$?; \
	if [ $$code -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$code

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

# storage.py (issue 10's figures) compares with LangGraph's SqliteSaver: the bench extra brings it.
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/storage.py --reports

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
