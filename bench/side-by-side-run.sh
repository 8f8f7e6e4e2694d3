#!/usr/bin/env bash
# The side-by-side benchmark on the GPU machine (issue 3): gpufile, KvikIO, NVIDIA's libcufile,
# torch.cuda.gds and the naive loops, with the machine's ceilings, all in one run.
#
# Here (Debian 12): cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build/gpu
# There, from the repository root (the device tool carries build/gpu, .whl and .peers):
#   bash bench/side-by-side-run.sh [side_by_side.py flags, e.g. --sections sweep,random]
# Results: $OUT/side_by_side.md, .json, .log, side_by_side_sweep.png (OUT defaults to /tmp/gpufile-out).
set -euo pipefail
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
# The peers' wheels (KvikIO, matplotlib for the chart) travel in .whl/; the machine has no network.
if [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl .whl/plot/*.whl
fi
# gpufile's Python package, for the Python-loop rows (built once per machine).
[ -d /tmp/gpufile-py/gpufile ] || bash bench/python-gpu-setup.sh >"$OUT/python-build.log" 2>&1
export PYTHONPATH=/tmp/gpufile-py:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
unset GPUFILE_CUDA_LIBRARY
exec python3 bench/side_by_side.py --build build/gpu --out "$OUT" "$@"
