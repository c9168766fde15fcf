# Two entry points: `make demo` and `make test`; each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test checks lint bench clean browser

# uv installs the same packages pip would (same resolver answers, checked: the two venvs list the same versions) in
# 10 s with their bytecode compiled, where pip took 60-70 s of a CI run's 6 minutes.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check 'uv>=0.9,<1'
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/safepoint demo

# pytest exits 5 when it collects no test: that is a failure here, never a silent pass.
# Four workers whatever the cores (each starts its own throwaway PostgreSQL): many tests wait on a child process or
# a server, so two cores keep four busy (-n auto gave two workers: 385 s against 307 s); worksteal evens them out.
# The review page's browser tests drive Debian's chromium through its chromedriver (in CI they fail without it):
# installed here when missing, as root or with sudo when either is at hand (else the tests say what is missing).
# A fresh install took 108 s with recommends (the apt log); --no-install-recommends leaves out cups, samba, perl.
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else \
		echo "chromium is missing and neither root nor sudo is at hand: the browser tests will say so" >&2; exit 0; fi; \
	start=$$(date +%s); \
	$$sudo apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver \
		>/dev/null && \
	echo "chromium and chromium-driver installed in $$(( $$(date +%s) - start )) s"

# The browser's install overlaps the venv's (apt waits on the network and dpkg, pip mostly on the network); mypy
# runs beside pytest, whose workers often wait on a child or a server, instead of before it (a cold mypy is 40 s of
# CPU on its own); its verdict counts as much as pytest's.
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=line $(STAMP) browser
	$(BIN)/ruff check src tests bench examples
	@$(BIN)/mypy >$(VENV)/mypy.log 2>&1 & mypy=$$!; \
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 4 --dist worksteal; code=$$?; \
	wait $$mypy; typed=$$?; cat $(VENV)/mypy.log; \
	if [ $$code -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	if [ $$typed -ne 0 ]; then echo "mypy failed (above)" >&2; [ $$code -ne 0 ] || code=$$typed; fi; exit $$code

checks: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

lint: checks

# storage.py (issue 10's figures) compares with LangGraph's SqliteSaver: the bench extra brings it.
bench: $(STAMP)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev,bench]'
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/storage.py --reports

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
