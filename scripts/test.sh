#!/usr/bin/env bash
# Builds everything (CUDA code for sm_90a included) and runs every test.
# Without a GPU the GPU tests are reported as skipped, never as passed.
#
# Python part (python/, tests/python/): a virtual environment
# ($SPARSE_DECODE_VENV, default build-python/venv) gets the build and test
# requirements from PyPI, and torch too unless SPARSE_DECODE_PY_TORCH=0 (then
# the torch tests are skipped, the NumPy ones still run). The extension is
# built against the library compiled above, installed to build-python/library,
# so the CUDA sources are compiled once; SPARSE_DECODE_PY_BUILD=full instead
# runs `pip install --no-build-isolation .` as an offline machine does (a
# second, independent build of everything).
#
# `scripts/test.sh --plan` prints the phases and what they download, and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${SPARSE_DECODE_VENV:-build-python/venv}
py="$venv/bin/python"
with_torch=${SPARSE_DECODE_PY_TORCH:-1}
# PyPI's Linux wheel (CUDA 13 build): its CPU side runs the torch tests here,
# the same version as on the GPU machine.
torch_version=2.11

torch_present() {
  [ -x "$py" ] && "$py" -c "import importlib.metadata as m, sys
sys.exit(not m.version('torch').startswith('$torch_version.'))" 2>/dev/null
}

plan() {
  echo "test.sh: 1/4 build (CMake preset release, CUDA for sm_90a), 2/4 C++ tests (ctest),"
  echo "test.sh: 3/4 Python package into $venv (numpy, pytest, ml_dtypes, nanobind and"
  echo "test.sh:     scikit-build-core from PyPI, about 30 MB), 4/4 Python tests (pytest)"
  if [ "$with_torch" = 0 ]; then
    echo "test.sh: torch: skipped (SPARSE_DECODE_PY_TORCH=0); the torch tests are skipped, the NumPy ones run"
  elif torch_present; then
    echo "test.sh: torch $torch_version: already in $venv, nothing to download"
  else
    echo "test.sh: torch $torch_version: phase 3 downloads it from PyPI with its CUDA libraries, about 3-5 GB"
    echo "test.sh:     (once, into $venv); to skip it: SPARSE_DECODE_PY_TORCH=0 scripts/test.sh"
  fi
}

phase() { printf '\n== test.sh %s ==\n' "$*"; }

case "${1:-}" in
  "") ;;
  --plan) plan; exit 0 ;;
  *) echo "usage: scripts/test.sh [--plan]" >&2; exit 2 ;;
esac
plan

phase "1/4 build: setup, cmake --preset release, cmake --build build"
scripts/setup.sh
cmake --preset release
cmake --build build -j"$(nproc)"

phase "2/4 C++ tests: ctest --preset release"
ctest --preset release -j"$(nproc)"

phase "3/4 Python package: $venv, the extension"
[ -x "$py" ] || python3 -m venv "$venv"
pip=("$py" -m pip --disable-pip-version-check -q)
"${pip[@]}" install numpy pytest ml_dtypes "nanobind>=2.0" "scikit-build-core>=0.10"
if [ "$with_torch" != 0 ]; then
  if ! torch_present; then
    echo "test.sh: downloading torch $torch_version with its CUDA libraries (about 3-5 GB);" \
      "Ctrl-C, then SPARSE_DECODE_PY_TORCH=0 scripts/test.sh, skips it"
  fi
  "${pip[@]}" install "torch==$torch_version.*"
fi
if [ "${SPARSE_DECODE_PY_BUILD:-reuse}" = full ]; then
  "${pip[@]}" install --no-build-isolation --no-deps .
else
  cmake --install build --prefix build-python/library >/dev/null
  "${pip[@]}" install --no-build-isolation --no-deps -C cmake.source-dir=python \
    -C build-dir=build-python/extension -C cmake.define.CMAKE_PREFIX_PATH="$PWD/build-python/library" .
fi

phase "4/4 Python tests: pytest tests/python"
# From the repository root: pytest imports the installed package, not python/.
"$py" -m pytest tests/python
echo "test.sh: all four phases passed"
