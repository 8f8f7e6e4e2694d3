#!/usr/bin/env bash
# The tensor-parallel checkpoint load (issue 13), before and after parts split along columns were
# read through their rows' span: examples/tp_load.py on every GPU of the machine, each way twice
# in one call (the second of each is warm), with the whole-checkpoint load of each rank beside it.
#
# There, from the repository root, after `bash bench/gpu-build.sh` and
# `bash bench/python-gpu-setup.sh` (the package in /tmp/gpufile-py; torch is on the machine):
#   bash bench/tp-load-run.sh                 # /root/ckpt, an 8 GB checkpoint written once
#   bash bench/tp-load-run.sh /root/ckpt 16   # another directory or size
# Each rank prints its GB/s; rank 0 the slowest rank's time. `run by run` in a line's name is
# the old path (one read per row of a column-split part, --per-run); without it, the span path.
# The parts are checked against the whole checkpoint's slices (--check) in the span runs.
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
  tp_load --into --per-run
  tp_load --into --compare --check
  tp_load --per-run
  tp_load --check
done
