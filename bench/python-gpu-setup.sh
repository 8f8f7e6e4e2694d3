#!/usr/bin/env bash
# On the GPU machine (no network, no liburing, Python 3.12 with nanobind and scikit-build-core):
# builds and installs gpufile's Python package into /tmp/gpufile-py. liburing's static library and
# headers and nlohmann-json's headers travel from a Debian machine in .peers/deps (copied from
# Debian's liburing-dev and nlohmann-json3-dev by the commands in docs/performance.md).
# Then: export PYTHONPATH=/tmp/gpufile-py
set -euo pipefail
D=$PWD/.peers/deps
python3 -m pip install -q --no-build-isolation --no-deps --no-compile --upgrade --target /tmp/gpufile-py \
  -Ccmake.define.LIBURING_INCLUDE_DIR="$D/include" \
  -Ccmake.define.LIBURING_STATIC="$D/lib/liburing.a" \
  -Ccmake.define.NLOHMANN_JSON_INCLUDE_DIR="$D/include" \
  -Cbuild-dir=/tmp/gpufile-py-build .
