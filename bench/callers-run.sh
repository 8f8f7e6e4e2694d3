#!/usr/bin/env bash
# Many concurrent synchronous callers (issue 10), ceilings in the same run: bench/callers.py.
#
# Here (Debian 12): cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build/gpu
# There, from the repository root (the device tool carries build/gpu):
#   bash bench/callers-run.sh                         # every section, about 6 minutes
#   bash bench/callers-run.sh --sections dali,small   # some of them
# Results: $OUT/callers.md and callers.json (OUT defaults to /tmp/gpufile-out).
set -euo pipefail
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
unset GPUFILE_CUDA_LIBRARY
export PYTHONUNBUFFERED=1
nvidia-smi -L 2>/dev/null | head -1 || true
exec python3 bench/callers.py --build "${BUILD:-build/gpu}" --out "$OUT" "$@"
