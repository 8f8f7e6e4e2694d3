#!/usr/bin/env bash
# Probe of how gpufile waits for its small-IO copies, and of running mid-sized reads on the
# caller's thread (docs/performance.md, issue 3). Warm page cache, gpufile bench -x 0, 1 s points:
#   - 4 KiB random reads by 1, 8, 16 threads: small-IO copies waited for by spinning
#     (cuStreamSynchronize, the driver's default) or asleep (a blocking-sync event);
#   - 256 KiB and 1 MiB calls by 1 and 4 threads run on the caller's thread (small_io_kb=1024)
#     or cut over the workers (small_io_kb=0), against the naive loop.
# The spin/sleep switch (GPUFILE_X_SMALL_WAIT) exists only in a build with
# bench/patches/copy-wait-modes.patch applied (to commit 04ec2fb; not kept: sleeping lost).
#   bash bench/probe_waits.sh build/gpu
set -uo pipefail
D=${1:-build/gpu}
G=$D/cli/gpufile
C=$D/bench/gpufile_compare
F=/root/probe-waits.bin
dd if=/dev/urandom of=$F bs=16M count=256 status=none; cat $F >/dev/null; cat $F >/dev/null
point() {  # bench args...: GiB/s, p50, p99, CPU-s/GiB
  "$G" bench -f $F -s 4G -T 1 --no-progress --json "$@" 2>/dev/null | python3 -c "
import json, sys
r = json.load(sys.stdin)['results'][-1]
print(f\"{r['throughput_gib_s']:.2f} GiB/s  p50 {r['p50_latency_us']:.1f}  p99 {r['p99_latency_us']:.1f}  cpu {r['cpu_s_per_gib']:.2f} s/GiB\")"
}
for r in 1 2; do
  for w in 1 8 16; do
    echo "4K random x $w spin:  $(point -i 4K -w $w -I 2 -x 0)"
    echo "4K random x $w sleep: $(GPUFILE_X_SMALL_WAIT=event point -i 4K -w $w -I 2 -x 0)"
  done
done
for p in "256K 1" "256K 4" "1M 1" "1M 4" "1M 8"; do
  set -- $p
  echo "$1 x $2 naive:          $(point -i $1 -w $2 -x 2 -O 1)"
  echo "$1 x $2 workers:        $(GPUFILE_SMALL_IO_KB=0 point -i $1 -w $2 -x 0)"
  echo "$1 x $2 caller thread:  $(GPUFILE_SMALL_IO_KB=1024 point -i $1 -w $2 -x 0)"
done
rm -f $F
