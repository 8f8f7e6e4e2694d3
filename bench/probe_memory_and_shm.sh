#!/usr/bin/env bash
# Probes behind docs/performance.md (2026-11-23, issue 3): is gpufile's staging memory (anonymous
# huge pages + cuMemHostRegister) as fast for host->device copies as cuMemHostAlloc's, and what
# limits reads from /dev/shm (engine, workers) and the disk (O_DIRECT depth)?
#   bash bench/probe_memory_and_shm.sh build/gpu
set -uo pipefail
C=${1:-build/gpu}/bench/gpufile_compare
for m in h2d-pinned h2d-hostalloc h2d-pinned d2h-pinned d2h-hostalloc; do "$C" $m; done
grep -E 'AnonHugePages|HugePages_Total' /proc/meminfo; cat /sys/kernel/mm/transparent_hugepage/enabled
S=/dev/shm/probe.bin; F=/root/probe.bin
dd if=/dev/urandom of=$S bs=16M count=256 status=none
"$C" pagecache $S 16; "$C" pagecache $S 8
for e in io_uring posix; do for w in 8 16; do
  echo -n "shm engine=$e workers=$w: "; GPUFILE_ENGINE=$e GPUFILE_WORKERS=$w "$C" gpufile $S
done; done
echo -n "shm slab 1M: "; GPUFILE_SLAB_SIZE_KB=1024 "$C" gpufile $S
echo -n "shm slab 16M: "; GPUFILE_SLAB_SIZE_KB=16384 "$C" gpufile $S
rm -f $S
dd if=/dev/urandom of=$F bs=16M count=128 status=none
for t in 1 4 16; do sync; echo 3 >/proc/sys/vm/drop_caches; "$C" direct-read $F $t; done
sync; echo 3 >/proc/sys/vm/drop_caches; echo -n "cold gpufile: "; "$C" gpufile $F
rm -f $F
