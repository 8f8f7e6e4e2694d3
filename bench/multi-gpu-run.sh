#!/usr/bin/env bash
# Issue 29's table (deliverable 4) for whatever number of GPUs the machine has, each row against
# the summed pinned ceiling measured in the same run (pinned host-to-device copies to all GPUs at
# once, from one process and from a process per GPU: the higher). Each GPU reads its own warm
# 4 GiB file. Rows: `gpufile bench -x 0` with -i 16M -w 8 -T 6, -i 4M -w 16 -T 6, -i 4G -w 1 -T 6
# and -i 1G -w 1 (one pass), each as a process per GPU started together and as one process for
# all GPUs (a gdsio job file, one job per GPU); Python `gpufile.open(f).read(cupy array)` of the
# whole file, first call in a fresh process and best of 5 after (--rounds), as a process per GPU, the
# same with each process seeing only its GPU (CUDA_VISIBLE_DEVICES, no launcher variables), one
# process with a thread per GPU, and one process alone (that row against GPU 0's pinned ceiling
# measured alone, in the same run); examples/tp_load.py --into --compare --shared under
# torchrun (each rank's part, load_file of the whole checkpoint on every rank, and the same load
# shared by the ranks as one group), two fresh starts. bench/multi_gpu.py's docstring says what each row measures.
#
# Takes about 3 minutes on 4 GPUs (--quick: about 1.5), plus, when missing: the data files (about
# 30 s; bench/host-model.sh makes the same ones), the 8 GB checkpoint in /root/ckpt (about 1
# minute), and on a fresh machine the builds (gpufile_cli and gpufile_compare into /tmp/gb, the
# Python package into /tmp/gpufile-py: about 2 minutes together). Every step has a time limit;
# the whole is stopped after MULTI_GPU_LIMIT seconds (330), and the rows measured by then are
# still printed and written.
#
# On the GPU machine, from the repository root (the copy carries .peers/deps), after
# bench/host-model.sh in the same call:
#   bash bench/multi-gpu-run.sh              # every GPU
#   bash bench/multi-gpu-run.sh --quick      # -T 4, no one-process bench rows, one tp_load start
#   bash bench/multi-gpu-run.sh --ranks      # the processes carry LOCAL_RANK / LOCAL_WORLD_SIZE
#   bash bench/multi-gpu-run.sh --skip bench,python,tp_load --pieces auto,4096,2048,1024,512
#                                            # first reads by the size of a staged piece (about 2 min)
# Flags (bench/multi_gpu.py --help): --build DIR (/tmp/gb), --dir DIR (/root), --size-mib N
# (4096), --seconds N (-T, 6), --checkpoint DIR (/root/ckpt), --checkpoint-gb N (8), --gpus N,
# --skip bench,python,tp_load, --pieces LIST, --piece-rounds N.
# Output: the markdown table on stdout; in $OUT (/tmp/gpufile-out) multi-gpu.md, multi-gpu.json
# (every row with its command and per-GPU figures) and multi-gpu.log (every command's output).
# GPUFILE_BENCH_COMMIT=<hash> names the commit in the table's header: the device tool's copy of
# the tree may carry an older .git (unset, `git rev-parse --short HEAD` names it).
#
# Here, without a GPU, against the CUDA test double (timings mean nothing; Python and torchrun
# rows fail or skip where the package or torch is missing, and say so; for the Python rows, build
# the extension with -DGPUFILE_PYTHON=ON, target _gpufile, and add
# PYTHONPATH=$PWD/build/x/python:$PWD/bench/standin, the stand-in for CuPy):
#   GPUFILE_CUDA_LIBRARY=$PWD/build/x/tests/support/fakecuda/libcuda.so.1 FAKECUDA_DEVICES=4 \
#     bash bench/multi-gpu-run.sh --build build/x --dir /var/tmp --size-mib 256 --seconds 1 --ceiling-seconds 0.3
set -uo pipefail
# shellcheck source=bench/gpu-prologue.sh
source "$(dirname "$0")/gpu-prologue.sh" "$@"
export PYTHONPATH=/tmp/gpufile-py${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c 'import gpufile' 2>/dev/null && [ -d .peers/deps ]; then
  echo "multi-gpu: installing the Python package into /tmp/gpufile-py (log: $OUT/multi-gpu-py.log)"
  bash bench/python-gpu-setup.sh >"$OUT/multi-gpu-py.log" 2>&1 || tail -20 "$OUT/multi-gpu-py.log"
fi
exec timeout -k 10 "${MULTI_GPU_LIMIT:-330}" python3 bench/multi_gpu.py --build "$build" --out "$OUT" "$@"
