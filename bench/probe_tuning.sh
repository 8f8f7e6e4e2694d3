#!/usr/bin/env bash
# Probe behind the staging defaults (docs/performance.md, issue 3): each setting varied alone
# from the defaults (16 workers, 2 slabs of 4 MiB each, ring depth 64), measured on
#   - whole 4 GiB file reads into the GPU, warm ext4 and /dev/shm (gpufile_compare gpufile),
#   - a whole-file write to /dev/shm (gpufile_compare gpufile-write),
#   - synchronous 1 MiB x 4 and 64 MiB x 1 calls (gpufile bench -x 0, 1 s each),
#   - a cold 4 GiB read (page cache dropped first) for the slab sizes only.
# Every line: setting, case, GiB/s (and CPU-s/GiB where the tool prints it).
#   bash bench/probe_tuning.sh build/gpu
set -uo pipefail
D=${1:-build/gpu}
G=$D/cli/gpufile
C=$D/bench/gpufile_compare
F=/root/probe-tuning.bin
S=/dev/shm/probe-tuning.bin
dd if=/dev/urandom of=$F bs=16M count=256 status=none
cp $F $S
warm() { cat $F >/dev/null; cat $S >/dev/null; }
bench() { "$G" bench -f $F -s 4G -T 1 --no-progress "$@" | grep -o 'Throughput: [0-9.]*'; }
cases() {  # label
  warm
  echo "$1 | warm ext4 | $("$C" gpufile $F | tail -1)"
  echo "$1 | /dev/shm | $("$C" gpufile $S | tail -1)"
  echo "$1 | 1M x 4 | $(bench -i 1M -w 4 -x 0)"
  echo "$1 | 64M x 1 | $(bench -i 64M -w 1 -x 0)"
  echo "$1 | /dev/shm write | $("$C" gpufile-write $S | tail -1)"
}
cold() {  # label
  sync; echo 3 >/proc/sys/vm/drop_caches
  echo "$1 | cold ext4 | $("$C" gpufile $F | tail -1)"
}
cases "defaults"
for kb in 1024 2048 8192 16384; do GPUFILE_SLAB_SIZE_KB=$kb cases "slab_size_kb=$kb"; done
for n in 3 4; do GPUFILE_SLABS_PER_WORKER=$n cases "slabs_per_worker=$n"; done
for w in 8 12; do GPUFILE_WORKERS=$w cases "workers=$w"; done
GPUFILE_RING_DEPTH=8 cases "ring_depth=8"
cases "defaults again"
for kb in 1024 4096 16384; do GPUFILE_SLAB_SIZE_KB=$kb cold "slab_size_kb=$kb"; done
rm -f $F $S
