#!/usr/bin/env bash
# Worker-count and direct-IO sweeps for warm page cache and /dev/shm reads into the GPU, and
# /dev/shm writes. Run on the GPU machine: bash bench/sweep-run.sh build/gpu [SIZE_GIB]
set -uo pipefail
B=${1:-build/gpu}
GIB=${2:-4}
C="$B/bench/gpufile_compare"
F=/root/gpufile-sweep.bin
S=/dev/shm/gpufile-sweep.bin
dd if=/dev/urandom of=$F bs=16M count=$((GIB * 64)) status=none
cp $F $S
cat $F >/dev/null
"$C" h2d-pinned
for w in 4 8 12 16; do
  for d in auto never; do
    echo -n "warm workers=$w direct=$d: "; GPUFILE_WORKERS=$w GPUFILE_DIRECT_IO=$d "$C" gpufile $F
    echo -n "shm  workers=$w direct=$d: "; GPUFILE_WORKERS=$w GPUFILE_DIRECT_IO=$d "$C" gpufile $S
  done
done
for d in auto never; do
  echo -n "shm write direct=$d: "; GPUFILE_DIRECT_IO=$d "$C" gpufile-write $S
done
rm -f $F $S
