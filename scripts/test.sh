#!/usr/bin/env bash
# Builds gpufile and runs every test: the normal build, then the whole suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer. Without a GPU, tests run the real code path
# against the CUDA driver test double (tests/support/fakecuda). Exit status 0 only if all pass.
#   GPUFILE_TEST_SANITIZERS=0  skips the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
gpufile_install_deps
jobs=$(nproc)

run_suite() {  # name, build dir, extra cmake args...
  local name=$1 dir=$2
  shift 2
  echo "== gpufile tests: $name"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --no-tests=error
}

run_suite default build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${GPUFILE_TEST_SANITIZERS:-1}" != 0 ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite asan+ubsan build/asan -DCMAKE_BUILD_TYPE=Debug "-DGPUFILE_SANITIZE=address,undefined"
fi
echo "gpufile tests: all passed"
