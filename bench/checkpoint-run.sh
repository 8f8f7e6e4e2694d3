#!/usr/bin/env bash
# Checkpoint loading benchmark on the GPU machine: an 8 GB Llama-style safetensors checkpoint
# loaded into cuda:0 by every loader (safetensors, torch.load, fastsafetensors, instanttensor,
# Run:ai streamer, KvikIO, gpufile), cold / warm / /dev/shm, plus save timings.
#
# From the repository root, with `import gpufile` already working:
#   bash bench/checkpoint-run.sh [more checkpoint_bench.py flags]
# Results: $OUT/checkpoint.md, $OUT/checkpoint.json, $OUT/logs/ (OUT defaults to /tmp/gpufile-out).
# The cold case's ceiling is fio's best O_DIRECT read where fio is on PATH or .peers/fio holds
# its source (built here once), else dd's single stream.
set -uo pipefail
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"

# The peers' wheels travel with the repository (.whl/); the machine has no network.
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# fio for the cold ceiling (checkpoint_bench.py --fio), built once from .peers/fio.
bash bench/fio-build.sh "$OUT/fio-build.log"
[ -x /tmp/fio-plain/fio ] && export PATH=/tmp/fio-plain:$PATH
export PYTHONUNBUFFERED=1
exec python3 bench/checkpoint_bench.py --size 8 --dir /root/ckpt --out "$OUT" "$@"
