#!/usr/bin/env bash
# Probe behind the worker-count and copy-wait defaults (docs/performance.md, issue 3): 4, 8,
# 12 and 16 workers, each with worker copies waited for by spinning (cuEventSynchronize on a
# plain event: the driver spins) or asleep (GPUFILE_X_WORKER_WAIT=event: blocking-sync events),
# two rounds, alternating. Cases: whole 4 GiB file read (warm ext4, /dev/shm) and written
# (/dev/shm), with CPU seconds per GiB; 1 MiB x 4, 16 MiB x 16 and 64 MiB x 1 synchronous calls.
# The spin/sleep switch (GPUFILE_X_WORKER_WAIT) exists only in a build with
# bench/patches/copy-wait-modes.patch applied (to commit 04ec2fb; not kept). Without it, the
# sleep rows repeat the spin rows.
#   bash bench/probe_workers.sh build/gpu
set -uo pipefail
D=${1:-build/gpu}
G=$D/cli/gpufile
C=$D/bench/gpufile_compare
F=/root/probe-workers.bin
S=/dev/shm/probe-workers.bin
dd if=/dev/urandom of=$F bs=16M count=256 status=none
cp $F $S
for k in 1 2; do cat $F >/dev/null; cat $S >/dev/null; done
whole() { "$C" "$@" | tail -1 | awk '{print $6, "GiB/s cpu", $9}'; }
bench() { "$G" bench -f $F -s 4G -T 1 --no-progress "$@" | grep -o 'Throughput: [0-9.]*' | cut -d' ' -f2; }
for r in 1 2; do
  for w in 4 8 12 16; do
    for mode in spin sleep; do
      x=; [ $mode = sleep ] && x=event
      export GPUFILE_WORKERS=$w GPUFILE_X_WORKER_WAIT=$x
      echo "workers=$w $mode | warm $(whole gpufile $F) | shm $(whole gpufile $S) | shm write $(whole gpufile-write $S) | 1Mx4 $(bench -i 1M -w 4 -x 0) | 16Mx16 $(bench -i 16M -w 16 -x 0) | 64Mx1 $(bench -i 64M -w 1 -x 0)"
    done
  done
done
rm -f $F $S $S.out
