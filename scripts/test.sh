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
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release
cmake --build build -j"$(nproc)"
ctest --preset release -j"$(nproc)"

venv=${SPARSE_DECODE_VENV:-build-python/venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check -q)
"${pip[@]}" install numpy pytest ml_dtypes "nanobind>=2.0" "scikit-build-core>=0.10"
if [ "${SPARSE_DECODE_PY_TORCH:-1}" != 0 ]; then
  # PyPI's Linux wheel (CUDA 13 build, about 3 GB with its libraries): its CPU
  # side runs the torch tests here, the same version as on the GPU machine.
  "${pip[@]}" install "torch==2.11.*"
fi
if [ "${SPARSE_DECODE_PY_BUILD:-reuse}" = full ]; then
  "${pip[@]}" install --no-build-isolation --no-deps .
else
  cmake --install build --prefix build-python/library >/dev/null
  "${pip[@]}" install --no-build-isolation --no-deps -C cmake.source-dir=python \
    -C build-dir=build-python/extension -C cmake.define.CMAKE_PREFIX_PATH="$PWD/build-python/library" .
fi
# From the repository root: pytest imports the installed package, not python/.
"$py" -m pytest tests/python
