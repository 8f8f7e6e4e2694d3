#!/usr/bin/env bash
# Two builds of gpufile side by side in one run on the GPU machine (A/B of a data-path change):
# synchronous cuFileRead calls of several sizes from the warm page cache (gpufile bench -x 0),
# 4 KiB random reads by 1 and 16 threads, then whole-file reads, alternating A and B. Each build dir needs cli/gpufile and
# bench/gpufile_compare (copy them from a second build dir into the carried one).
#   bash bench/probe_ab.sh DIR_A DIR_B
set -uo pipefail
A=${1:?build dir A}; B=${2:?build dir B}
F=/root/ab.bin
dd if=/dev/urandom of=$F bs=16M count=256 status=none; cat $F >/dev/null; cat $F >/dev/null
for r in 1 2; do
  for p in "1M 1" "1M 4" "16M 1" "16M 16" "64M 1"; do
    set -- $p
    for v in A B; do
      d=$A; [ $v = B ] && d=$B
      echo "$v $1 x $2: $("$d/cli/gpufile" bench -f $F -s 4G -T 1 --no-progress -i $1 -w $2 -x 0 |
        grep -o 'Throughput: [0-9.]*')"
    done
  done
done
for r in 1 2; do
  for w in 1 16; do
    for v in A B; do
      d=$A; [ $v = B ] && d=$B
      echo "$v 4K random x $w: $("$d/cli/gpufile" bench -f $F -s 4G -T 1 --no-progress -i 4K -w $w -I 2 -x 0 |
        grep -o 'Throughput: [0-9.]*\|Avg_Latency: [0-9.]*' | tr '\n' ' ')"
    done
  done
done
for w in 1 16; do
  echo "naive 4K random x $w: $("$A/cli/gpufile" bench -f $F -s 4G -T 1 --no-progress -i 4K -w $w -I 2 -x 2 -O 1 |
    grep -o 'Throughput: [0-9.]*\|Avg_Latency: [0-9.]*' | tr '\n' ' ')"
done
echo "naive 1M x 4: $("$A/cli/gpufile" bench -f $F -s 4G -T 1 --no-progress -i 1M -w 4 -x 2 -O 1 |
  grep -o 'Throughput: [0-9.]*')"
for r in 1 2 3; do
  echo "A whole file: $("$A/bench/gpufile_compare" gpufile $F)"
  echo "B whole file: $("$B/bench/gpufile_compare" gpufile $F)"
done
rm -f $F
