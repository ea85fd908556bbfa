#!/usr/bin/env bash
# Builds the Python package here, for the GPU machine's Python (3.12), into
# build-python/site, so that a device call can carry it (`carry:
# ["build-python/site", ...]`) instead of building it there: an extension
# built there with its own compiler failed to import (undefined
# __cxxabiv1::__terminate, a C++ runtime mismatch), while binaries built here
# run there.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-$(command -v /root/.pyenv/versions/3.12.*/bin/python3.12 || echo python3.12)}
"$py" -m pip install -q --disable-pip-version-check "nanobind>=2.0" "scikit-build-core>=0.10"
rm -rf build-python/site
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --target build-python/site .
echo "built: $(ls build-python/site/sparse_decode/*.so)"
