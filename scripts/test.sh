#!/usr/bin/env bash
# Builds everything (CUDA code for sm_90a included) and runs every test.
# Without a GPU the GPU tests are reported as skipped, never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release
cmake --build build -j"$(nproc)"
ctest --preset release -j"$(nproc)"
