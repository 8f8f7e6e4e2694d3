#!/usr/bin/env bash
# Does /dev/shm trail the ext4 page cache because tmpfs keeps files in 4 KiB pages? The same
# 4 GiB file read into the GPU from tmpfs mounted with and without huge pages, and by 16 threads
# into host memory (docs/performance.md, issue 3).   bash bench/probe_tmpfs_huge.sh build/gpu
set -uo pipefail
C=${1:-build/gpu}/bench/gpufile_compare
for huge in never within_size; do
  M=/mnt/tmpfs-$huge; mkdir -p $M; mount -t tmpfs -o size=8g,huge=$huge tmpfs $M || continue
  dd if=/dev/urandom of=$M/f.bin bs=16M count=256 status=none
  echo "tmpfs huge=$huge: $(grep -E 'ShmemHugePages' /proc/meminfo | tr -s ' ')"
  for i in 1 2; do "$C" gpufile $M/f.bin; done
  "$C" pagecache $M/f.bin 16
  umount $M
done
