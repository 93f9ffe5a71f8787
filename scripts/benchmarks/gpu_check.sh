#!/usr/bin/env bash
# The GPU check, one command for the device tool (at most 5 minutes on the
# H200; JAX and PyTorch there, no TensorFlow, no Keras). Wheels first, here:
#   bash scripts/benchmarks/fetch_gpu_wheels.sh          # -> .whl/ (git-ignored, ~10 MiB)
# then the device tool's run, with carry [".whl"]:
#   bash scripts/benchmarks/gpu_check.sh
# It installs Keras and those of its dependencies the machine lacks from
# .whl/ into /tmp/site (scripts/benchmarks/gpu_install.sh), imports
# keras_gresnet from this checkout (PYTHONPATH), and runs scripts/benchmarks/gpu_check.py with KERAS_BACKEND=jax:
# gresnet_cifar(n=5) on JAX float32 / mixed_bfloat16 and its PyTorch twin,
# inference against PyTorch eager, the nets to train next, then
# preact_resnet1001 (each part under its own timeout, 540 s in all); with
# PARTS="pipelines ..." the input pipelines at batch 128 and 1024. Results
# also go to $OUT/gpu_check-{cifar,infer,recipes,r1001,pipelines}.json and
# $OUT/gpu_check.log when OUT is set. The tracked tree must stay under the
# device tool's 64 MiB: docs/benchmarks.md ("GPU check") says how.
# CPU smoke test (a TF-free venv): JAX_PLATFORMS=cpu PYTHON=/tmp/tffree/bin/python \
#   WHEELS=/tmp/whl311 bash scripts/benchmarks/gpu_check.sh --tiny
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}  # torch shares the GPU
source scripts/benchmarks/gpu_install.sh
$PY -c "import sys, keras, jax; import keras_gresnet.zoo; print('python', sys.version.split()[0], 'keras', keras.__version__, 'jax', jax.__version__, 'tensorflow imported:', 'tensorflow' in sys.modules)" || exit
log=${OUT:+$OUT/gpu_check.log}
log=${log:-/dev/null}
rc=0
# PARTS picks the parts (default: all but pipelines); issue 54's lease runs
# PARTS="pipelines infer" (pipelines 360 s, three feeds, + infer 90 s: under 8 minutes).
declare -A TIMEOUTS=([cifar]=${CIFAR_TIMEOUT:-170} [infer]=${INFER_TIMEOUT:-90}
  [recipes]=${RECIPES_TIMEOUT:-180} [r1001]=${R1001_TIMEOUT:-100}
  [pipelines]=${PIPELINES_TIMEOUT:-360})
for part in ${PARTS:-cifar infer recipes r1001}; do
  [ -n "${TIMEOUTS[$part]:-}" ] || { echo "PARTS: unknown part $part (${!TIMEOUTS[*]})"; exit 2; }
  timeout "${TIMEOUTS[$part]}" $PY scripts/benchmarks/gpu_check.py --part "$part" "$@" 2>&1 \
    | tee -a "$log" || rc=$?
done
exit $rc
