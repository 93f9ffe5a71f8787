#!/usr/bin/env bash
# GR Table 3's WRN row on Fashion-MNIST in one device-tool call (one lease):
# scripts/benchmarks/gpu_wrn.py trains wide_gresnet(n=4, widen_factor=10) with
# GR's WRN recipe on the JAX backend and writes $OUT/wrn/ (history, test error,
# gates; no weights: model.keras is ~146 MB and stays on the lent machine).
# Here, first:
#   bash scripts/benchmarks/fetch_gpu_wheels.sh     # -> .whl/ (git-ignored, ~10 MiB)
#   bash scripts/benchmarks/gpu_wrn.sh --prepare    # -> .data/fashion_mnist/ (git-ignored, ~30 MiB)
# unstage zoo/results and zoo/weights as for the GPU check (docs/benchmarks.md,
# "GPU check": the tree must stay under the tool's 64 MiB), then the device
# tool's run, with carry [".whl", ".data"] and timeout_s 590:
#   bash scripts/benchmarks/gpu_wrn.sh --budget-s 420
# (arguments after the script go to gpu_wrn.py: --epochs N, --images-per-s R,
# --dtype-policy mixed_bfloat16...). The python step runs under
# WRN_TIMEOUT (default 540 s): what the run folder holds by then is copied to
# $OUT/wrn/ even if it was stopped (history.csv is written every epoch).
# CPU smoke test: JAX_PLATFORMS=cpu SKIP_INSTALL=1 bash scripts/benchmarks/gpu_wrn.sh --smoke
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
DATA=${DATA:-.data/fashion_mnist}
RUN=${RUN:-/tmp/gpu_wrn_run}
if [ "${1:-}" = "--prepare" ]; then
  src=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  mkdir -p "$DATA" || exit
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
           t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -f "$src/$f" ] || { echo "$src/$f: missing (bash scripts/data/ensure_fashion_mnist.sh)" >&2; exit 2; }
    cp "$src/$f" "$DATA/$f" || exit
  done
  du -sh "$DATA"
  exit 0
fi
export PYTHONUNBUFFERED=1 KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3
source scripts/benchmarks/gpu_install.sh
OUT=${OUT:-gpu_wrn_out}
mkdir -p "$OUT/wrn" || exit
rc=0
timeout "${WRN_TIMEOUT:-540}" $PY scripts/benchmarks/gpu_wrn.py --data-dir "$DATA" --run "$RUN" \
  --out "$OUT" "$@" 2>&1 | tee "$OUT/wrn/gpu_wrn.log" || rc=$?
# A run stopped by the timeout still returns what it wrote, every epoch.
for f in config.json history.csv gates.csv results.json; do
  [ -f "$OUT/wrn/$f" ] || { [ -f "$RUN/$f" ] && cp "$RUN/$f" "$OUT/wrn/$f"; }
done
exit $rc
