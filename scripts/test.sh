#!/usr/bin/env bash
# Builds gpufile and runs every test: the normal build, the Python package (its manylinux wheel,
# scripts/build-wheel.sh, installed into a fresh virtual environment, then pytest), then the C++
# suite again under AddressSanitizer + UndefinedBehaviorSanitizer, and under ThreadSanitizer; and
# fuzzes the parsers for a bounded time. Without a GPU, tests run the real code path against the
# CUDA driver test double (tests/support/fakecuda). Exit status 0 only if all pass.
#   GPUFILE_TEST_SANITIZERS=0  skips the sanitizer passes.
#   GPUFILE_TEST_FUZZ=0        skips the fuzz step; GPUFILE_FUZZ_SECONDS=N fuzzes each target N s.
#   GPUFILE_TEST_NO_S3=1       skips the S3 tests (no versitygw is built).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
gpufile_install_deps
gpufile_install_test_deps
jobs=$(nproc)

# versitygw, the S3 server of tests/python/test_remote_s3.py (and of the C++ API's
# tests/cpp/test_remote_writer.cpp), is built from the Go module proxy
# the first time (minutes of compiling), then reused from build/tools/. The build runs in the
# background at low priority, in the idle time of the C++ suite, and the Python step waits for it.
# GPUFILE_TEST_NO_S3=1 skips it and those tests.
if [ "${GPUFILE_TEST_NO_S3:-0}" != 1 ]; then
  mkdir -p build/tools
  # Its own process group, so that a test.sh that fails before the wait stops the whole build.
  setsid nice -n 10 bash -c 'source scripts/deps.sh && gpufile_install_versitygw' \
    >build/tools/versitygw.path 2>build/tools/versitygw.log &
  versitygw_build=$!
  trap 'kill -- "-$versitygw_build" 2>/dev/null || true' EXIT
fi

run_suite() {  # name, build dir, extra cmake args...
  local name=$1 dir=$2
  shift 2
  echo "== gpufile tests: $name"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure --timeout 900 -j "$jobs" --no-tests=error ${exclude:+-E "$exclude"}
}

run_suite default build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo

# The Python package as users get it: its manylinux wheel (scripts/build-wheel.sh: the extension
# built by scikit-build-core + nanobind from PyPI, checked and tagged by auditwheel) installed into
# a fresh virtual environment that has no build tools, then pytest against the CUDA driver test
# double built above. The tests import the installed package, never the source tree: conftest.py
# fails the run if gpufile comes from anywhere but GPUFILE_TEST_PACKAGE_DIR.
echo "== gpufile tests: python (wheel)"
wheel=$(scripts/build-wheel.sh | tail -n 1)
if [ -n "${versitygw_build:-}" ]; then
  wait_status=0
  wait "$versitygw_build" || wait_status=$?
  trap - EXIT
  if [ "$wait_status" != 0 ]; then
    cat build/tools/versitygw.log >&2
    echo "gpufile tests: building versitygw failed (GPUFILE_TEST_NO_S3=1 skips the S3 tests)" >&2
    exit 1
  fi
  GPUFILE_VERSITYGW=$(cat build/tools/versitygw.path)
  export GPUFILE_VERSITYGW
  # The C++ API's S3 writer tests skipped in the default suite, which ran before versitygw was
  # built: they run now, against it (and in the sanitizer suites below, with it set).
  echo "== gpufile tests: C++ API against versitygw"
  ctest --test-dir build/test --output-on-failure -j "$jobs" --no-tests=error -R '^cpp\..*RemoteWriter'
fi
rm -rf build/venv
python3 -m venv build/venv
build/venv/bin/python -m pip install -q --upgrade pip
build/venv/bin/python -m pip install -q "$wheel[test]"
GPUFILE_TEST_PACKAGE_DIR=$(build/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("platlib"))')/gpufile
export GPUFILE_TEST_PACKAGE_DIR
GPUFILE_CUDA_LIBRARY="$PWD/build/test/tests/support/fakecuda/libcuda.so.1" \
  build/venv/bin/python -m pytest -q tests/python
# The HDF5 driver and gpufile.hdf5.read (docs/hdf5.md) against the other HDF5 line h5py's wheels
# bundle: the run above had the newest h5py of the test extras (HDF5 2.0); h5py 3.14 bundles
# HDF5 1.14.6.
echo "== gpufile tests: python, HDF5 driver on HDF5 1.14 (h5py 3.14)"
build/venv/bin/python -m pip install -q "h5py==3.14.0"
GPUFILE_CUDA_LIBRARY="$PWD/build/test/tests/support/fakecuda/libcuda.so.1" \
  build/venv/bin/python -m pytest -q tests/python/test_hdf5.py tests/python/test_hdf5_read.py
# Coverage-guided fuzzing of the inputs gpufile parses (tests/fuzz; docs/reliability.md,
# "Fuzzing"): cufile.json and gdsio job files with libFuzzer (clang, the fuzz targets and the
# library under ASan+UBSan), safetensors headers with atheris in the virtual environment above.
# Each target replays its corpus (tests/fuzz/corpus/<target>), then fuzzes for a bounded time;
# what it finds new goes to build/fuzz/found/, never into the repository's corpus.
if [ "${GPUFILE_TEST_FUZZ:-1}" != 0 ]; then
  echo "== gpufile tests: fuzz (${GPUFILE_FUZZ_SECONDS:-40} s a target)"
  gpufile_install_fuzz_deps
  cmake -S . -B build/fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUFILE_FUZZ=ON >/dev/null
  cmake --build build/fuzz -j "$jobs" --target fuzz_cufile_json fuzz_gdsio_jobfile
  ctest --test-dir build/fuzz --output-on-failure --no-tests=error -L fuzz
  build/venv/bin/python -m pip install -q --only-binary=:all: atheris==3.0.0
  rm -rf build/fuzz/found
  for target in cufile_json gdsio_jobfile safetensors_header; do
    fuzzer=(build/fuzz/tests/fuzz/fuzz_$target)
    [ "$target" = safetensors_header ] && fuzzer=(build/venv/bin/python tests/fuzz/fuzz_$target.py
      -dict=tests/fuzz/safetensors_header.dict)
    mkdir -p "build/fuzz/found/$target"
    echo "== gpufile fuzz: $target"
    log=build/fuzz/found/$target.log
    if ! "${fuzzer[@]}" -max_total_time="${GPUFILE_FUZZ_SECONDS:-40}" -print_final_stats=1 \
      -artifact_prefix="build/fuzz/found/$target-" "build/fuzz/found/$target" \
      "tests/fuzz/corpus/$target" >"$log" 2>&1; then
      tail -n 60 "$log"
      echo "gpufile fuzz: $target failed; the input is build/fuzz/found/$target-*" >&2
      exit 1
    fi
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" || true
  done
fi
if [ "${GPUFILE_TEST_SANITIZERS:-1}" != 0 ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite asan+ubsan build/asan -DCMAKE_BUILD_TYPE=Debug "-DGPUFILE_SANITIZE=address,undefined"
  # ThreadSanitizer, no suppressions. die_after_fork=0: the fork tests start threads in the child
  # of a threaded parent, which TSan refuses by default; gpufile parks its workers around fork()
  # for exactly that case (src/exec/executor.hpp). cli_bench, the CLI's end-to-end script, runs
  # the library code the C API suites run here already, and takes minutes under TSan.
  TSAN_OPTIONS=halt_on_error=1:die_after_fork=0:second_deadlock_stack=1 exclude='^cli_bench$' \
    run_suite tsan build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUFILE_SANITIZE=thread
fi
echo "gpufile tests: all passed"
