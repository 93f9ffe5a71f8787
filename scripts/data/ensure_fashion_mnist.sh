#!/usr/bin/env bash
# Real Fashion-MNIST for offline runs and tests: Debian's dataset-fashion-mnist.
set -eu
dir=/usr/share/datasets/fashion-mnist
if [ -f "$dir/train-images-idx3-ubyte.gz" ] && [ -f "$dir/t10k-labels-idx1-ubyte.gz" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "Fashion-MNIST not found in $dir and no apt-get here: pass --data-dir with the IDX files" >&2
  exit 0
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
echo "installing Debian's dataset-fashion-mnist into $dir" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null
