# Sourced by scripts/benchmarks/gpu_check.sh and gpu_wrn.sh (the GPU machine
# has JAX and PyTorch, no Keras, no package registry): installs Keras and
# those of its dependencies the machine lacks from $WHEELS (default .whl/,
# made here by scripts/benchmarks/fetch_gpu_wheels.sh) into $SITE (default
# /tmp/site) and puts it and this checkout on PYTHONPATH. Keras, namex and
# optree always; the others only where missing (the GPU image has absl-py,
# h5py, ml-dtypes, rich...: keep its versions). SKIP_INSTALL=1: nothing
# installed, the checkout on PYTHONPATH (a CPU smoke test in a venv that has
# Keras). Needs $PY; exits 2 without wheels.
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
if [ -z "${SKIP_INSTALL:-}" ]; then
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
  [ ${#wheels[@]} -gt 0 ] || { echo "no wheels in $WHEELS: run scripts/benchmarks/fetch_gpu_wheels.sh" >&2; exit 2; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "${wheels[@]}" || exit
  export PYTHONPATH=$SITE:$PWD
  echo "installed into $SITE: $(printf '%s ' "${wheels[@]##*/}")"
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
