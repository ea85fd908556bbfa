#!/usr/bin/env bash
# Builds the library and the command-line program, then runs one
# DeepSeek-V4-shaped decode step (on the GPU when there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release
cmake --build build -j"$(nproc)" --target sparse-decode
./build/tools/sparse-decode demo "$@"
