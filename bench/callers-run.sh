#!/usr/bin/env bash
# Many concurrent synchronous callers against ceilings taken in the same run (issue 10):
# bench/callers.py (its docstring lists what each section measures). Results in $OUT:
# callers.md (a table per section), callers.json (every point, with its command), callers.log.
#
# Here (Debian 12), once: the build the device tool carries, and KvikIO's wheels in .whl/ (the
# GPU machine has no network; cupy and numpy are there):
#   cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build/gpu
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger==0.3.0
# There, from the repository root (the device tool carries build/gpu and .whl). Each call makes
# the 4 GiB data file (about 20 s), prints its sections' estimates, and fits in 10 minutes; each
# section takes the ceilings it is compared against unless an earlier section of the same call
# did:
#   bash bench/callers-run.sh --sections ceilings,callers                # about 5 minutes
#   bash bench/callers-run.sh --sections writes,dali,small,cold,kvikio   # about 3.5 minutes
#   bash bench/callers-run.sh --sections callers --estimate              # the estimate only
# Flags (bench/callers.py --help): --build DIR (build/gpu), --seconds N per timed point (2),
# --size-mib N of the data file (4096), --dir DIR of the ext4 file (/root), --no-drop, --keep.
# GPUFILE_BENCH_COMMIT=<hash> names the build's commit in the tables: the device tool's copy of the
# tree may carry an older .git (unset, `git rev-parse --short HEAD` names it).
# On a machine without a GPU, against the CUDA test double, every section in about a minute
# (KvikIO asks the driver for cuCtxCreate_v4, which the double lacks: its rows fail and say so;
# with that entry point added it runs there too, reading into --kvikio-array cuda memory):
#   GPUFILE_CUDA_LIBRARY=$PWD/build/gpu/tests/support/fakecuda/libcuda.so.1 \
#     bash bench/callers-run.sh --size-mib 256 --seconds 1 --dir /var/tmp --kvikio-array cuda
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
# KvikIO and the two libraries it needs, for the kvikio section (installed once per machine).
if [ ! -d /tmp/site/kvikio ] && ls .whl/kvikio_cu13-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/kvikio_cu13-*.whl .whl/libkvikio_cu13-*.whl .whl/rapids_logger-*.whl >"$OUT/pip.log" 2>&1 ||
    { echo "callers-run: KvikIO's wheels did not install (pip.log)"; cat "$OUT/pip.log"; }
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
# libkvikio's loader loads librapids_logger through cuda.pathfinder; where that package is
# missing it skips the step, and libkvikio.so then needs the library on the search path.
export LD_LIBRARY_PATH=/tmp/site/rapids_logger/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
exec python3 bench/callers.py --out "$OUT" "$@"
