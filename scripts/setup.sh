#!/usr/bin/env bash
# Installs what the build needs on a fresh Debian machine (idempotent):
# CMake >= 3.25, Ninja, GoogleTest, Python 3 with venv (the Python package's
# tests install their own packages into a venv), and checks for the CUDA 13 compiler.
set -euo pipefail
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
python3 -c 'import os, sysconfig; assert os.path.isfile(sysconfig.get_paths()["include"] + "/Python.h")' \
  2>/dev/null || missing+=(python3-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null; then
  for dir in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
    [ -x "$dir/nvcc" ] && export PATH="$dir:$PATH"
  done
fi
command -v nvcc >/dev/null || { echo "setup: nvcc (CUDA 13) not found; install the CUDA toolkit" >&2; exit 1; }
echo "setup: $(cmake --version | head -1), ninja $(ninja --version), $(nvcc --version | tail -1), $(python3 --version)"
