#!/usr/bin/env bash
# Which cold read shape the GPU machine's disk serves fastest (issue 30, item 4), in one device
# call: bench/cold_shapes.py over a 4 GiB safetensors file of random bytes, fio's and
# fastsafetensors' reads beside gpufile's at a grid of shapes, alternating rounds, caches dropped
# before every reading. docs/performance.md, "Cold checkpoints", holds the figures (set D was this
# grid's first row).
#
# The gpufile shapes, all under cache_policy bypass unless named "default":
#   slabs of 512 KiB with 8 and 16 workers, of 4 MiB with 8, rings that never grow (16, 32, 16
#   reads in flight)
#   4 MiB slabs with O_DIRECT pieces of 512 KiB (gpufile.cold_piece_kb): 12 workers whose rings
#   grow to 4 (48 in flight), rings that never grow (24), 8 workers (16); pieces of 1 MiB
# beside the defaults (auto: a file that fits the page cache is kept, read through it) and bypass
# (12 workers of 4 MiB pieces, rings that grow to 4 slabs: 48 in flight).
#
# On the GPU machine, as root, from the repository root (the device tool carries .peers and .whl:
# liburing and friends for the Python build, fio's source, fastsafetensors' wheel):
#   bash bench/cold-shapes-run.sh [--rounds N] [--file PATH] [--gib N]
# (--gib: the file's size where it is made, 4 by default; an existing FILE is read as it is).
# About 5 minutes with 6 rounds (each reading about 3 s); prints every reading as it comes and
# the medians last; the same in $OUT/cold-shapes.md (OUT defaults to /tmp/gpufile-out).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
rounds=6 file=/root/cold.st gib=4
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --file) file=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--file PATH] [--gib N]" >&2; exit 2 ;;
  esac
done

# Set-up, side by side: gpufile's Python package, fio from its source, fastsafetensors' wheel.
[ -d /tmp/gpufile-py/gpufile ] || (bash bench/python-gpu-setup.sh >"$OUT/python-setup.log" 2>&1 ||
                                   tail -n 3 "$OUT/python-setup.log") &
bash bench/fio-build.sh "$OUT/fio-build.log" &
if compgen -G ".whl/fastsafetensors*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fastsafetensors*.whl &
fi
wait
export PYTHONPATH=/tmp/site:/tmp/gpufile-py${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
[ -x /tmp/fio-plain/fio ] && export PATH=/tmp/fio-plain:$PATH

shape() {  # label, slab KiB, workers
  echo "gpufile:$1:GPUFILE_CACHE_POLICY=bypass,GPUFILE_COLD_SLABS_PER_WORKER=0,GPUFILE_SLAB_SIZE_KB=$2,GPUFILE_WORKERS=$3"
}
piece() {  # label, cold piece KiB, then more variables (4 MiB slabs throughout)
  echo "gpufile:$1:GPUFILE_CACHE_POLICY=bypass,GPUFILE_COLD_PIECE_KB=$2${3:+,$3}"
}
readers=(fio:512K:16 fastsafetensors gpufile:default gpufile:bypass:GPUFILE_CACHE_POLICY=bypass
         "$(shape 512Kx8w 512 8)" "$(shape 512Kx16w 512 16)" "$(shape 4Mx8w 4096 8)"
         "$(piece piece512 512)" "$(piece piece512x2 512 GPUFILE_COLD_SLABS_PER_WORKER=0)"
         "$(piece piece512x2x8w 512 GPUFILE_COLD_SLABS_PER_WORKER=0,GPUFILE_WORKERS=8)"
         "$(piece piece1M 1024)")
cd bench && python3 cold_shapes.py "$file" --make "$gib" --rounds "$rounds" "${readers[@]}" |
  tee "$OUT/cold-shapes.md"
