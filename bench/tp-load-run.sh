#!/usr/bin/env bash
# The tensor-parallel checkpoint load on every GPU of the machine (examples/tp_load.py under
# torchrun), each way twice in one call, the second of each warm: the default (a rank's part of a
# tensor split along columns gathered out of the page cache where it is at most a third of its
# rows' span, three ranks and more; else read through the span), every such part through its
# span (--span), and run by run (--per-run, the oldest path); each with --check (every part
# compared with the whole checkpoint's slice), then the default with each rank loading the
# whole checkpoint beside it (--compare). Last, bench/gather_parts.py: rank 0's column-split parts
# into one GPU for 2, 4 and 8 ranks, gathered against read through the span.
#
# There, from the repository root, after `bash bench/gpu-build.sh` and
# `bash bench/python-gpu-setup.sh` (the package in /tmp/gpufile-py; torch is on the machine):
#   bash bench/tp-load-run.sh                 # /root/ckpt, an 8 GB checkpoint written once
#   bash bench/tp-load-run.sh /root/ckpt 16   # another directory or size
# Each rank prints its GB/s; rank 0 the slowest rank's time, which is what start-up waits for.
set -euo pipefail
ckpt=${1:-/root/ckpt}
gigabytes=${2:-8}
gpus=${NPROC:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
export PYTHONPATH=/tmp/gpufile-py${PYTHONPATH:+:$PYTHONPATH}

tp_load() {
  echo "== tp_load.py $*"
  python3 -m torch.distributed.run --nproc-per-node "$gpus" examples/tp_load.py "$ckpt" "$@"
}

tp_load --make-gb "$gigabytes"  # writes the checkpoint if it is not there yet
for round in 1 2; do
  echo "== round $round"
  tp_load --into --check
  tp_load --into --span --check
  tp_load --into --per-run --check
  tp_load --into --compare
done
echo "== gather_parts.py (one GPU)"
python3 bench/gather_parts.py "$ckpt" --worlds 2,4,8
