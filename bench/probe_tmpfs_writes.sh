#!/usr/bin/env bash
# Writes from the GPU to /dev/shm: gpufile (one worker writes a tmpfs file at a time) against the
# naive loop, with CPU seconds per GiB (docs/performance.md, issue 3).
#   bash bench/probe_tmpfs_writes.sh build/gpu
set -uo pipefail
C=${1:-build/gpu}/bench/gpufile_compare
S=/dev/shm/probe-writes.bin
dd if=/dev/urandom of=$S bs=16M count=256 status=none
for i in 1 2 3; do "$C" gpufile-write $S; "$C" naive-write $S; done
"$C" fswrite $S 1; "$C" fswrite $S 16
rm -f $S
