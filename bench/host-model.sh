#!/usr/bin/env bash
# The host model of a multi-GPU machine (issue 29, deliverable 3), measured in one run: host
# memory copy bandwidth (memcpy, and pread of warm page-cache pages into pinned memory) with 1, 2,
# 4 ... 32 threads (up to the core count); each GPU's pinned host-to-device ceiling alone, then
# the first 2 and 4 and all GPUs at once (from one process with a thread per GPU and from one
# process per GPU started together: the higher is the ceiling, and the table says which); the copy
# engine reading registered page-cache pages (each GPU's warm file, cuMemHostRegister read-only)
# into each GPU alone and all at once; the disk's O_DIRECT rate; and from them each path's
# predicted ceiling for 1, 2, 4 and 8 GPUs (page-cache DMA: one crossing of host memory a byte;
# O_DIRECT into a slab: two; staged through pinned memory: three), with the resource that bounds
# it. bench/host_model.py's docstring gives the arithmetic.
#
# Takes about 2.5 minutes on 4 GPUs and 64 cores (3.5 on 8), each point 2 s, plus about 30 s
# to write the data files (DIR/gpufile-gpu<g>.bin, 4 GiB each, random; kept for
# bench/multi-gpu-run.sh, which uses the same ones) and, the first time on a fresh machine, about
# 1 minute to build gpufile_compare and gpufile into /tmp/gb (bench/gpu-build.sh, from the
# dependencies in .peers/deps). The whole is stopped after HOST_MODEL_LIMIT seconds (330).
#
# On the GPU machine, from the repository root (the copy carries .peers/deps):
#   bash bench/host-model.sh                 # every GPU; markdown on stdout
#   bash bench/host-model.sh --seconds 1     # shorter points
# Flags (bench/host_model.py --help): --build DIR (/tmp/gb), --dir DIR (/root), --size-mib N
# (4096), --seconds S (2), --threads LIST (1,2,4,8,16,32), --gpus N, --no-disk.
# Output in $OUT (/tmp/gpufile-out): host-model.md (the tables), host-model.json (every point with
# its command, and the model), host-model.log (every command's output). GPUFILE_BENCH_COMMIT=<hash>
# names the commit in the table's header: the device tool's copy of the tree may carry an older
# .git (unset, `git rev-parse --short HEAD` names it).
#
# Here, without a GPU, against the CUDA test double (timings mean nothing; the orchestration and
# the arithmetic run end to end):
#   cmake --build build/x --target gpufile_compare gpufile_cli fakecuda
#   GPUFILE_CUDA_LIBRARY=$PWD/build/x/tests/support/fakecuda/libcuda.so.1 FAKECUDA_DEVICES=4 \
#     bash bench/host-model.sh --build build/x --dir /var/tmp --size-mib 64 --seconds 0.3 --memcpy-mib 64
set -uo pipefail
# shellcheck source=bench/gpu-prologue.sh
source "$(dirname "$0")/gpu-prologue.sh" "$@"
exec timeout -k 10 "${HOST_MODEL_LIMIT:-330}" python3 bench/host_model.py --build "$build" --out "$OUT" "$@"
