# The README's two commands: `make run` (main job) and `make test` (tests).
# Both install what they need first.
PYTHON ?= python3

.PHONY: install data run test test-slow bench

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e ".[test]"

data:
	bash scripts/ensure_fashion_mnist.sh

run: install data
	keras-gresnet list --build

test: install data
	$(PYTHON) -m pytest -q

test-slow: install data
	$(PYTHON) -m pytest -q -m slow

bench: install
	$(PYTHON) scripts/bench_layers.py
