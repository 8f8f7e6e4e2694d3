#!/usr/bin/env bash
# A server's restarts (issue 30): the first start after the page cache was dropped (cold) and the
# next start right after it, each a fresh process reading one file (8 GiB) whole into GPU 0, under
# each gpufile.cache_policy in turn, alternating rounds; then the warm speed (the file read with
# `cat` first) as the reference, and the disk's O_DIRECT ceiling, all in the same run.
# docs/performance.md, "Restarts: the page cache across starts", holds the figures.
#
# Two readers: `gpufile bench -f F -s 8G -i 64M -w 8 -x 0 -I 0` (opens the file O_DIRECT, as GDS
# programs do) and Python `gpufile.open(f).read(cupy_array)` (bench/multi_gpu.py's worker, the
# first call of a fresh process).
#
# On the GPU machine, as root (it drops the page cache), from the repository root (the device
# tool carries .peers/deps for the build):
#   bash bench/restart-run.sh                       # 2 rounds, policies auto and bypass, both readers
#   bash bench/restart-run.sh --rounds 3 --policies auto,keep,bypass --readers bench
#   bash bench/restart-run.sh --file /root/f8 --build /tmp/gb --size-gib 8
# Without a GPU, the same steps against the CUDA test double (timings mean nothing), e.g.:
#   GPUFILE_CUDA_LIBRARY=$PWD/build/x/tests/support/fakecuda/libcuda.so.1 \
#     bash bench/restart-run.sh --build build/x --readers bench --rounds 1 --file /var/tmp/f1 --size-gib 1
# Takes about 3 minutes on the H200 machine's disk (1.4-1.5 GiB/s) with the defaults: each cold
# start reads 8 GiB from the disk. Prints one line per start; the same lines in
# $OUT/restart.log (OUT defaults to /tmp/gpufile-out).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
rounds=2 policies=auto,bypass readers=bench,python file=/root/f8 build=/tmp/gb gib=8
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --readers) readers=$2; shift 2 ;;
    --file) file=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --size-gib) gib=$2; shift 2 ;;
    *) echo "restart-run: unknown argument $1 (see the header)" >&2; exit 2 ;;
  esac
done
for reader in ${readers//,/ }; do
  [[ $reader == bench || $reader == python ]] || { echo "restart-run: readers are bench and python" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "restart-run: needs root (it drops the page cache)" >&2; exit 2; }
exec > >(tee "$OUT/restart.log") 2>&1

if [ ! -x "$build/cli/gpufile" ] || [ ! -x "$build/bench/gpufile_compare" ]; then
  bash bench/gpu-build.sh "$build" gpufile_cli gpufile_compare >"$OUT/restart-build.log" 2>&1 ||
    { tail -20 "$OUT/restart-build.log"; exit 1; }
fi
if [[ ,$readers, == *,python,* ]]; then
  export PYTHONPATH=/tmp/gpufile-py${PYTHONPATH:+:$PYTHONPATH}
  python3 -c 'import gpufile' 2>/dev/null || bash bench/python-gpu-setup.sh >"$OUT/restart-py.log" 2>&1 ||
    { tail -20 "$OUT/restart-py.log"; exit 1; }
fi
size=$((gib << 30))
if [ "$(stat -c %s "$file" 2>/dev/null)" != "$size" ]; then
  echo "making $file ($gib GiB of random bytes)"
  rm -f "$file"
  writers=()
  for i in 0 1 2 3; do
    dd if=/dev/urandom of="$file" bs=1M count=$((gib * 256)) seek=$((i * gib * 256)) conv=notrunc status=none &
    writers+=($!)
  done
  wait "${writers[@]}"  # not a bare wait: that would wait for the log's tee as well
  sync
fi

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
folios() { grep -E "^FileHugePages" /proc/meminfo | tr -s ' '; }
bench_start() {
  "$build/cli/gpufile" bench -f "$file" -s "${gib}G" -i 64M -w 8 -x 0 -I 0 2>&1 | tail -1 |
    grep -o "Throughput: [0-9.]* GiB/sec" || echo "failed"
}
python_start() {
  local job
  job=$(printf '{"path":"%s","gpu":0,"size":%d,"barrier":"/tmp/restart-barrier","parties":1,"rounds":0}' "$file" "$size")
  python3 bench/multi_gpu.py worker "$job" | grep '^RESULT' |
    python3 -c 'import json,sys; r=json.loads(sys.stdin.read()[7:])[0]; print("%.3f s, %.1f GiB/s" % (r["first_s"], '"$gib"' / r["first_s"]))' ||
    echo "failed"
}

echo "== $(nvidia-smi -L 2>/dev/null | head -1); $(uname -r); $(date -u +%F) ${GPUFILE_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
drop
echo "disk, O_DIRECT: $("$build/bench/gpufile_compare" direct-read "$file" 8 2>&1 | tail -1)"
IFS=, read -r -a policy_list <<<"$policies"
for ((round = 1; round <= rounds; round++)); do
  for reader in ${readers//,/ }; do
    for policy in "${policy_list[@]}"; do
      drop
      export GPUFILE_CACHE_POLICY=$policy
      echo "$reader $policy round $round, first start (cold): $("${reader}_start") | $(folios)"
      echo "$reader $policy round $round, next start: $("${reader}_start")"
    done
    unset GPUFILE_CACHE_POLICY
    drop
    cat "$file" >/dev/null
    echo "$reader round $round, warm (after cat): $("${reader}_start"), $("${reader}_start")"
  done
  # The next round runs the policies in the reverse order.
  for ((i = 0, j = ${#policy_list[@]} - 1; i < j; i++, j--)); do
    t=${policy_list[i]}; policy_list[i]=${policy_list[j]}; policy_list[j]=$t
  done
done
