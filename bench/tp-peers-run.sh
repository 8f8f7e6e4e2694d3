#!/usr/bin/env bash
# Tensor-parallel loading side by side under torchrun (bench/tp_peers.py: gpufile,
# fastsafetensors, InstantTensor, each as its users load a sharded checkpoint), on every GPU of
# the GPU machine: warm, then cold (caches dropped before each start), alternating rounds.
#
# There, from the repository root (the device tool carries .peers and .whl):
#   bash bench/tp-peers-run.sh                    # /root/ckpt (8 GB, made once), warm and cold
#   bash bench/tp-peers-run.sh --warm-only        # or --cold-only; more flags go to tp_peers.py
# Needs in .whl: fastsafetensors and instanttensor wheels for the machine's Python, e.g. here:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d .whl \
#     fastsafetensors==0.5.0 instanttensor==0.2.2
# About 4-5 minutes warm (6 loaders x 2 rounds of a torchrun start, about 20 s each), the cold
# half about 8 more (each start reads the checkpoint from the disk): run them in separate calls.
# Without a GPU the same harness runs on host memory over gloo (InstantTensor's rows then fail:
# it needs CUDA), e.g. with a small checkpoint:
#   torchrun --nproc-per-node 2 examples/tp_load.py /tmp/small --make-gb 0.05 --backend gloo \
#     --hidden 512 --intermediate 1792 --vocab 4000
#   python3 bench/tp_peers.py /tmp/small --backend gloo --nproc 2
# Results: $OUT/tp-peers-warm/ and $OUT/tp-peers-cold/, each with tp-peers.md and
# tp-peers.json, OUT defaulting to /tmp/gpufile-out.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
ckpt=/root/ckpt
which=both
args=()
for a in "$@"; do
  case $a in
    --warm-only) which=warm ;;
    --cold-only) which=cold ;;
    *) args+=("$a") ;;
  esac
done
if compgen -G ".whl/*.whl" >/dev/null && [ ! -d /tmp/site/instanttensor ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/tp-peers-pip.log" 2>&1 || tail -5 "$OUT/tp-peers-pip.log"
fi
export PYTHONPATH=/tmp/gpufile-py:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c 'import gpufile' 2>/dev/null; then
  echo "tp-peers: installing the Python package into /tmp/gpufile-py"
  bash bench/python-gpu-setup.sh >"$OUT/tp-peers-py.log" 2>&1 || { tail -20 "$OUT/tp-peers-py.log"; exit 1; }
fi
export PYTHONUNBUFFERED=1
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if [ ! -f "$ckpt/model.safetensors.index.json" ]; then
  echo "tp-peers: making an 8 GB checkpoint in $ckpt"
  timeout 300 python3 -m torch.distributed.run --nproc-per-node "$gpus" examples/tp_load.py "$ckpt" \
    --make-gb 8 >"$OUT/tp-peers-make.log" 2>&1 || tail -5 "$OUT/tp-peers-make.log"
fi
for mode in warm cold; do
  [ "$which" = both ] || [ "$which" = "$mode" ] || continue
  flag=(); [ "$mode" = cold ] && flag=(--cold)
  [ "$mode" = warm ] && cat "$ckpt"/*.safetensors >/dev/null
  python3 bench/tp_peers.py "$ckpt" "${flag[@]}" --out "$OUT/tp-peers-$mode" "${args[@]}"
done
