#!/usr/bin/env bash
# 4 KiB random reads of a warm file through the batch API at several depths, and regression
# points of synchronous callers, for one or more builds of `gpufile` in the same run:
# interleaved, three rounds, so that the machine's drift lands on every variant alike. Prints
# one table (IOPS in thousands for the 4 KiB points, GiB/s for the rest, each round; CPU-s/GiB,
# median) and keeps every raw line in $OUT/batch-iops.txt.
#
#   bash bench/batch-iops-run.sh new=build/gpu/cli/gpufile
#   bash bench/batch-iops-run.sh base=/path/to/old/gpufile new=build/gpu/cli/gpufile \
#        new-no-x=build/gpu/cli/gpufile@GPUFILE_SOME_SETTING=0
# (NAME=BINARY, optionally @VAR=VALUE for the environment of that variant.) Needs 4 GiB free in
# $BENCH_DIR (default /root); about 16 s per variant and round.
set -uo pipefail
OUT=${OUT:-/tmp/gpufile-out}; mkdir -p "$OUT"
F=${BENCH_DIR:-/root}/batch-iops.bin
[ $# -gt 0 ] || set -- new=build/gpu/cli/gpufile
dd if=/dev/zero of="$F" bs=16M count=256 status=none && cat "$F" >/dev/null
job() {  # batches, entries per batch
  local j=/tmp/batch-iops-$1x$2.gdsio
  printf '[global]\nxfer_type=6\nrw=randread\nbs=4K\nsize=4G\nruntime=2\nfilename=%s\nnum_threads=%s\n' "$F" "$2" >"$j"
  for k in $(seq "$1"); do echo "[job$k]" >>"$j"; done
  echo "$j"
}
points=(
  "batch 1x128|-f $F -s 4G -T 2 -i 4K -I 2 -w 128 -x 6"
  "batch 8x128|$(job 8 128)"
  "batch 12x128|$(job 12 128)"
  "batch 16x64|$(job 16 64)"
  "sync 16x4K|-f $F -s 4G -T 2 -i 4K -I 2 -w 16 -x 0"
  "sync 16x4M|-f $F -s 4G -T 2 -i 4M -I 0 -w 16 -x 0"
  "sync 16x1M|-f $F -s 4G -T 2 -i 1M -I 0 -w 16 -x 0"
  "sync 8x4M|-f $F -s 4G -T 2 -i 4M -I 0 -w 8 -x 0"
)
TIMEFORMAT='cpu %U %S'
for round in 1 2 3; do
  for p in "${points[@]}"; do
    for v in "$@"; do
      name=${v%%=*}; rest=${v#*=}; bin=${rest%%@*}; envs=""; [ "$rest" != "$bin" ] && envs=${rest#*@}
      # shellcheck disable=SC2086
      line=$( { time env $envs "$bin" bench ${p#*|} 2>&1 | grep -E "Throughput" | head -1; } 2>&1 | tr '\n' ' ')
      echo "${p%%|*}|$name|$line"
    done
  done
done | tee "$OUT/batch-iops.txt" | python3 -c "
import sys, re, collections
rows = collections.defaultdict(list); names = []; labels = []
for l in sys.stdin:
    lab, v, rest = l.split('|', 2)
    if v not in names: names.append(v)
    if lab not in labels: labels.append(lab)
    m = re.search(r'Throughput: ([0-9.]+).*ops: (\d+) total_time ([0-9.]+).*cpu ([0-9.]+) ([0-9.]+)', rest)
    if not m: print('no result:', l.strip()); continue
    gib, ops, t, u, s = map(float, m.groups())
    rows[(lab, v)].append((ops / t, gib, (u + s) / (gib * t) if gib else 0))
print('| point | ' + ' | '.join(names) + ' |'); print('|---' * (len(names) + 1) + '|')
for lab in labels:
    cells = []
    for v in names:
        xs = rows[(lab, v)]
        if not xs: cells.append('-'); continue
        four_k = lab.startswith('batch') or lab.endswith('4K')
        vals = ' / '.join(f'{x[0] / 1e3:.0f}k' if four_k else f'{x[1]:.1f}' for x in xs)
        cells.append(f'{vals} ({sorted(x[2] for x in xs)[len(xs) // 2]:.2f})')
    print(f'| {lab} | ' + ' | '.join(cells) + ' |')
"
