#!/usr/bin/env bash
# Download the wheels that scripts/benchmarks/gpu_check.sh installs on the GPU machine
# (Python 3.12, JAX and PyTorch, no TensorFlow, no Keras, no registry): Keras
# and its dependencies (keras 3.15's Requires-Dist: absl-py, numpy, rich,
# namex, h5py, optree, ml-dtypes, packaging; rich's markdown-it-py, mdurl,
# pygments). numpy is not carried (the machine has it). The versions are the
# ones this checkout is tested with. .whl/ is git-ignored; about 10 MiB.
#
#   bash scripts/benchmarks/fetch_gpu_wheels.sh [DEST=.whl] [PYTHON_VERSION=3.12]
#
# A local test on this machine's Python 3.11: bash scripts/benchmarks/fetch_gpu_wheels.sh /tmp/whl311 3.11
set -euo pipefail
dest=${1:-.whl}
pyver=${2:-3.12}
PACKAGES=(
  keras==3.15.1 namex==0.1.0 optree==0.20.0 absl-py==2.5.1 rich==15.0.0
  markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.20.0 ml-dtypes==0.7.0
  h5py==3.14.0 packaging==26.2
)
mkdir -p "$dest"
python3 -m pip download --no-deps --only-binary=:all: --python-version "$pyver" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d "$dest" "${PACKAGES[@]}"
ls -la "$dest"
du -sh "$dest"
