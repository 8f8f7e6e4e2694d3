#!/usr/bin/env bash
# Probe behind the min_chunk_kb default and the small-IO streams (docs/performance.md, issue 3):
# synchronous cuFileRead calls of 1 MiB and 16 MiB from the warm page cache, cut at several
# minimum piece sizes (4096 = the old behaviour: one slab per piece), against the naive loop
# (gpufile bench -x 2 -O 1) in the same run; then 4 KiB reads by 1 and 16 threads.
#   bash bench/probe_chunking.sh build/gpu
set -uo pipefail
G=${1:-build/gpu}/cli/gpufile
F=/root/probe-chunking.bin
dd if=/dev/urandom of=$F bs=16M count=256 status=none; cat $F >/dev/null
b() { "$G" bench -f $F -s 4G -T 1 --no-progress "$@" | grep -o 'Throughput: [0-9.]* GiB/sec'; }
for p in "1M 1" "1M 4" "16M 1" "16M 16"; do
  set -- $p
  echo "$1 x $2 naive: $(b -i $1 -w $2 -x 2 -O 1)"
  for k in 4096 1024 512 256 128; do
    echo "$1 x $2 gpufile min_chunk_kb=$k: $(GPUFILE_MIN_CHUNK_KB=$k b -i $1 -w $2 -x 0)"
  done
  echo "$1 x $2 gpufile -O 1: $(b -i $1 -w $2 -x 0 -O 1)   -b: $(b -i $1 -w $2 -x 0 -b)"
done
for w in 1 4 16; do
  echo "4K random x $w naive: $(b -i 4K -w $w -I 2 -x 2 -O 1)  gpufile: $(b -i 4K -w $w -I 2 -x 0)  small_io off: $(GPUFILE_SMALL_IO_KB=0 b -i 4K -w $w -I 2 -x 0)"
done
rm -f $F
