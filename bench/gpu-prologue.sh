# Sourced, with their arguments, by bench/host-model.sh and bench/multi-gpu-run.sh: the
# repository root as working directory, $OUT made (/tmp/gpufile-out), $build the value of a
# --build argument (/tmp/gb), and gpufile and gpufile_compare built there first where missing
# (bench/gpu-build.sh, from .peers/deps; its log in $OUT/gpu-build.log).
# shellcheck shell=bash
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
build=/tmp/gb
for ((i = 1; i <= $#; i++)); do [ "${!i}" = --build ] && { j=$((i + 1)); build=${!j}; }; done
if [ ! -x "$build/cli/gpufile" ] || [ ! -x "$build/bench/gpufile_compare" ]; then
  echo "building gpufile and gpufile_compare into $build (log: $OUT/gpu-build.log)"
  bash bench/gpu-build.sh "$build" gpufile_cli gpufile_compare >"$OUT/gpu-build.log" 2>&1 ||
    { tail -20 "$OUT/gpu-build.log"; exit 1; }
fi
export PYTHONUNBUFFERED=1
