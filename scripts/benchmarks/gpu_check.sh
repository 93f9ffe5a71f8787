#!/usr/bin/env bash
# The GPU check, one command for the device tool (at most 5 minutes on the
# H200; JAX and PyTorch there, no TensorFlow, no Keras). Wheels first, here:
#   bash scripts/benchmarks/fetch_gpu_wheels.sh          # -> .whl/ (git-ignored, ~10 MiB)
# then the device tool's run, with carry [".whl"]:
#   bash scripts/benchmarks/gpu_check.sh
# It installs Keras and those of its dependencies the machine lacks from
# .whl/ into /tmp/site, imports keras_gresnet from this checkout
# (PYTHONPATH), and runs scripts/benchmarks/gpu_check.py with KERAS_BACKEND=jax:
# gresnet_cifar(n=5) on JAX float32 / mixed_bfloat16 and its PyTorch twin,
# inference against PyTorch eager, the nets to train next, then
# preact_resnet1001 (each part under its own timeout, 540 s in all). Results
# also go to $OUT/gpu_check-{cifar,infer,recipes,r1001}.json and
# $OUT/gpu_check.log when OUT is set. The tracked tree must stay under the
# device tool's 64 MiB: docs/benchmarks.md ("GPU check") says how.
# CPU smoke test (a TF-free venv): JAX_PLATFORMS=cpu PYTHON=/tmp/tffree/bin/python \
#   WHEELS=/tmp/whl311 bash scripts/benchmarks/gpu_check.sh --tiny
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
export PYTHONUNBUFFERED=1 KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}  # torch shares the GPU
# Keras, namex and optree are always carried; the others only where missing
# (the GPU image has absl-py, h5py, ml-dtypes, rich... : keep its versions).
wheels=()
for w in "$WHEELS"/*.whl; do
  base=$(basename "$w"); name=${base%%-*}
  case $name in
    keras|namex|optree) wheels+=("$w") ;;
    absl_py) $PY -c "import absl" 2>/dev/null || wheels+=("$w") ;;
    markdown_it_py) $PY -c "import markdown_it" 2>/dev/null || wheels+=("$w") ;;
    pygments) $PY -c "import pygments" 2>/dev/null || wheels+=("$w") ;;
    *) $PY -c "import $name" 2>/dev/null || wheels+=("$w") ;;
  esac
done
[ ${#wheels[@]} -gt 0 ] || { echo "no wheels in $WHEELS: run scripts/benchmarks/fetch_gpu_wheels.sh"; exit 1; }
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" "${wheels[@]}" || exit
export PYTHONPATH=$SITE:$PWD
echo "installed into $SITE: $(printf '%s ' "${wheels[@]##*/}")"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import sys, keras, jax; import keras_gresnet.zoo; print('python', sys.version.split()[0], 'keras', keras.__version__, 'jax', jax.__version__, 'tensorflow imported:', 'tensorflow' in sys.modules)" || exit
log=${OUT:+$OUT/gpu_check.log}
log=${log:-/dev/null}
rc=0
timeout "${CIFAR_TIMEOUT:-170}" $PY scripts/benchmarks/gpu_check.py --part cifar "$@" 2>&1 | tee -a "$log" || rc=$?
timeout "${INFER_TIMEOUT:-90}" $PY scripts/benchmarks/gpu_check.py --part infer "$@" 2>&1 | tee -a "$log" || rc=$?
timeout "${RECIPES_TIMEOUT:-180}" $PY scripts/benchmarks/gpu_check.py --part recipes "$@" 2>&1 | tee -a "$log" || rc=$?
timeout "${R1001_TIMEOUT:-100}" $PY scripts/benchmarks/gpu_check.py --part r1001 "$@" 2>&1 | tee -a "$log" || rc=$?
exit $rc
