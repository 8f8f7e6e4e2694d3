#!/usr/bin/env bash
# The main job: build gpufile (Release) and run `gpufile demo`: write a scratch file, read it
# into the GPU (host memory where there is no GPU) through the cuFile API, check every byte,
# write it back, and report GiB/s and the path the bytes took. Arguments go to `gpufile demo`
# (--size N, --dir DIR, --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
gpufile_install_deps
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build build/release
exec build/release/cli/gpufile demo "$@"
