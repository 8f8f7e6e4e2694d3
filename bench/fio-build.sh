#!/usr/bin/env bash
# fio for the cold ceilings of bench/checkpoint-run.sh and bench/cold-shapes-run.sh: the GPU
# machine has none, so it is built once into /tmp/fio-plain from the source that travelled with
# the tree in .peers/fio (bench/clients-run.sh says how to fill .peers). Nothing to do where fio
# is on PATH, already built, or has no source here. Its build log goes to $1; the last lines are
# shown where it fails. Callers then put /tmp/fio-plain on PATH where it exists.
#   bash bench/fio-build.sh "$OUT/fio-build.log"
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
log=${1:-/dev/null}
if command -v fio >/dev/null || [ -x /tmp/fio-plain/fio ] || [ ! -f .peers/fio/configure ]; then
  exit 0
fi
rm -rf /tmp/fio-plain && cp -r .peers/fio /tmp/fio-plain &&
  (cd /tmp/fio-plain && ./configure --disable-native && make -j"$(nproc)") >"$log" 2>&1 ||
  { tail -n 5 "$log"; exit 1; }
