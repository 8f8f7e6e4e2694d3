#!/usr/bin/env bash
# On the GPU machine (no network, no liburing, Python 3.12 with nanobind and scikit-build-core):
# builds and installs gpufile's Python package into /tmp/gpufile-py. liburing's static library and
# headers, nlohmann-json's and curl's headers travel from a Debian machine in .peers/deps (copied
# from Debian's liburing-dev, nlohmann-json3-dev and libcurl4-openssl-dev by the commands in
# docs/performance.md; libgtest-dev's too, for bench/gpu-build.sh).
# Then: export PYTHONPATH=/tmp/gpufile-py. GPUFILE_PY_DIR=DIR installs into DIR instead (another
# tree beside it, for a same-run comparison; run from that tree, its .peers/deps in place).
set -euo pipefail
D=$PWD/.peers/deps
DEST=${GPUFILE_PY_DIR:-/tmp/gpufile-py}
python3 -m pip install -q --no-build-isolation --no-deps --no-compile --upgrade --target "$DEST" \
  -Ccmake.define.LIBURING_INCLUDE_DIR="$D/include" \
  -Ccmake.define.LIBURING_LIBRARY="$D/lib/liburing.a" \
  -Ccmake.define.NLOHMANN_JSON_INCLUDE_DIR="$D/include" \
  -Ccmake.define.CURL_INCLUDE_DIR="$D/include" \
  -Cbuild-dir="$DEST-build" .
