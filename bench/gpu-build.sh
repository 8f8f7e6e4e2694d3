#!/usr/bin/env bash
# On the GPU machine: builds gpufile with its tests (Release) into ${1:-/tmp/gpufile-build} from
# the dependencies carried in .peers/deps (liburing, nlohmann-json, curl's headers, GoogleTest;
# docs/performance.md says how to copy them from a Debian machine), with every core. Targets
# after the directory build only those: `bash bench/gpu-build.sh /tmp/gb gpufile_cli gpufile_compare`.
set -euo pipefail
D=$PWD/.peers/deps
B=${1:-/tmp/gpufile-build}
# The GPU machine's default compiler ($CXX, /opt/gcc) has no shared libstdc++: everything it links
# carries a copy of its own, and the C++ API tests fail there (docs/cpp.md). Its system g++ has one.
if [[ "$(${CXX:-g++} -print-file-name=libstdc++.so)" != /* && -x /usr/bin/g++ ]]; then
  echo "gpu-build: ${CXX:-g++} has no shared libstdc++; building with /usr/bin/g++" >&2
  export CXX=/usr/bin/g++ CC=/usr/bin/gcc
fi
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLIBURING_INCLUDE_DIR="$D/include" -DLIBURING_LIBRARY="$D/lib/liburing.a" \
  -DNLOHMANN_JSON_INCLUDE_DIR="$D/include" -DCURL_INCLUDE_DIR="$D/include" -DGTEST_ROOT="$D" >/dev/null
cmake --build "$B" -j "$(nproc)" ${2:+--target "${@:2}"}
