#!/usr/bin/env bash
# Builds gpufile and runs its tests. Without a GPU, tests run the real code path against the CUDA
# driver test double (tests/support/fakecuda). Exit status 0 only if all pass.
#
#   ./scripts/test.sh         everything that proves the library correct, sized for a newcomer's
#                             wait: the default build and every C++ suite (unit, ABI, C API, C++
#                             API, install, fault injection, CLI, examples, the seeded simulation
#                             at a CI-sized count of seeds, a short soak); the Python package as
#                             users get it (its manylinux wheel, scripts/build-wheel.sh, installed
#                             into a fresh virtual environment) and its tests, the HDF5 driver
#                             among them (h5py's newest line, HDF5 2.0); the remote-object tests
#                             against versitygw, a real S3 server.
#   ./scripts/test.sh --full  the same with the larger seed count and soak, then fuzzing of the
#                             parsers (cufile.json, gdsio job files, safetensors headers), the HDF5
#                             driver again on HDF5 1.14 (h5py 3.14), and the C++ suites again under
#                             ASan+UBSan and under TSan. CI runs this (.ci/run).
# Both install the Debian packages they need first (scripts/deps.sh).
#
# Environment, in either mode:
#   GPUFILE_TEST_SANITIZERS=0|1  skips or adds the sanitizer suites (default: 1 with --full)
#   GPUFILE_TEST_FUZZ=0|1        skips or adds the fuzz step (default: 1 with --full);
#                                GPUFILE_FUZZ_SECONDS=N fuzzes each target N s (default 40)
#   GPUFILE_TEST_NO_S3=1         skips the S3 tests (no versitygw is built)
#   GPUFILE_REQUIRE_S3=1         makes a Python S3 test that finds no versitygw fail instead of
#                                skip; set by CI (.ci/run), and here once versitygw is built
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") full=0 ;;
  --full) full=1 ;;
  *) echo "usage: $0 [--full]" >&2; exit 2 ;;
esac
sanitizers=${GPUFILE_TEST_SANITIZERS:-$full}
fuzz=${GPUFILE_TEST_FUZZ:-$full}
if [ "${GPUFILE_REQUIRE_S3:-0}" = 1 ] && [ "${GPUFILE_TEST_NO_S3:-0}" = 1 ]; then
  echo "$0: GPUFILE_REQUIRE_S3=1 and GPUFILE_TEST_NO_S3=1 contradict each other" >&2
  exit 2
fi
# The seeded simulation's seeds and the soak's seconds in the default suite (tests/sim,
# tests/soak): a CI-sized share by default, the larger run with --full. An empty seed count is
# the build's own default (tests/sim/CMakeLists.txt: fewer under the sanitizers).
if [ "$full" = 1 ]; then sim_seeds="" soak_seconds=20; else sim_seeds=400 soak_seconds=10; fi

source scripts/deps.sh
gpufile_install_deps
gpufile_install_test_deps
jobs=$(nproc)
phase() { echo "== gpufile tests: $* (at ${SECONDS} s)"; }

# Work that waits on the network or fills idle cores runs in the background, at low priority,
# while the C++ suite builds and runs; each has its own process group, so that a test.sh that
# fails before the wait stops it whole.
background=()
trap 'for p in "${background[@]}"; do kill -- "-$p" 2>/dev/null || true; done' EXIT
in_background() {  # log, command...: prints nothing; the pid goes into $background
  local log=$1
  shift
  setsid nice -n 10 "$@" >"$log" 2>&1 &
  background+=($!)
}
wait_for() {  # pid, log, what: fails the run with the log if the command failed
  local status=0
  wait "$1" || status=$?
  if [ "$status" != 0 ]; then
    cat "$2" >&2
    echo "gpufile tests: $3 failed" >&2
    exit 1
  fi
}
mkdir -p build/tools

# versitygw, the S3 server of tests/python/test_remote_s3.py (and of the C++ API's
# tests/cpp/test_remote_writer.cpp), is built from the Go module proxy the first time (minutes of
# compiling), then reused from build/tools/. GPUFILE_TEST_NO_S3=1 skips it and those tests.
if [ "${GPUFILE_TEST_NO_S3:-0}" != 1 ]; then
  in_background build/tools/versitygw.log bash -c \
    'source scripts/deps.sh && gpufile_install_versitygw >build/tools/versitygw.path'
  versitygw_build=${background[-1]}
fi
# The Python tests' virtual environment, fresh each run, with the test extras of pyproject.toml
# (from PyPI); the wheel goes into it once built.
rm -rf build/venv
in_background build/tools/venv.log bash -c '
  python3 -m venv build/venv && build/venv/bin/python -m pip install -q --upgrade pip &&
  python3 -c "import tomllib; print(*tomllib.load(open(\"pyproject.toml\", \"rb\"))[\"project\"][\"optional-dependencies\"][\"test\"], sep=\"\n\")" >build/tools/test-requirements.txt &&
  build/venv/bin/python -m pip install -q -r build/tools/test-requirements.txt'
venv_build=${background[-1]}

run_suite() {  # name, build dir, extra cmake args...
  local name=$1 dir=$2
  shift 2
  phase "$name: build"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  phase "$name: ctest"
  ctest --test-dir "$dir" --output-on-failure --timeout 900 -j "$jobs" --no-tests=error ${exclude:+-E "$exclude"}
}

run_suite default build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DGPUFILE_SIM_CI_SEEDS=$sim_seeds" "-DGPUFILE_SOAK_CI_SECONDS=$soak_seconds"

# The Python package as users get it: its manylinux wheel (scripts/build-wheel.sh: the extension
# built by scikit-build-core + nanobind from PyPI, checked and tagged by auditwheel) installed into
# a fresh virtual environment that has no build tools, then pytest against the CUDA driver test
# double built above. The tests import the installed package, never the source tree: conftest.py
# fails the run if gpufile comes from anywhere but GPUFILE_TEST_PACKAGE_DIR.
phase "python: the wheel"
wheel=$(scripts/build-wheel.sh | tail -n 1)
if [ -n "${versitygw_build:-}" ]; then
  wait_for "$versitygw_build" build/tools/versitygw.log \
    "building versitygw (GPUFILE_TEST_NO_S3=1 skips the S3 tests)"
  GPUFILE_VERSITYGW=$(cat build/tools/versitygw.path)
  export GPUFILE_VERSITYGW
  export GPUFILE_REQUIRE_S3=1  # the server is built: its Python tests run, never skip
  # The C++ API's S3 writer tests skipped in the default suite, which ran before versitygw was
  # built: they run now, against it (and in the sanitizer suites below, with it set).
  phase "C++ API against versitygw"
  ctest --test-dir build/test --output-on-failure -j "$jobs" --no-tests=error -R '^cpp\..*RemoteWriter'
fi
wait_for "$venv_build" build/tools/venv.log "making the Python tests' virtual environment"
build/venv/bin/python -m pip install -q "$wheel[test]"
GPUFILE_TEST_PACKAGE_DIR=$(build/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("platlib"))')/gpufile
export GPUFILE_TEST_PACKAGE_DIR
export GPUFILE_CUDA_LIBRARY="$PWD/build/test/tests/support/fakecuda/libcuda.so.1"
phase "python: pytest"
build/venv/bin/python -m pytest -q tests/python
if [ "$full" = 1 ]; then
  # The HDF5 driver and gpufile.hdf5.read (docs/hdf5.md) against the other HDF5 line h5py's
  # wheels bundle: the run above had the newest h5py of the test extras (HDF5 2.0); h5py 3.14
  # bundles HDF5 1.14.6.
  phase "python: HDF5 driver on HDF5 1.14 (h5py 3.14)"
  build/venv/bin/python -m pip install -q "h5py==3.14.0"
  build/venv/bin/python -m pytest -q tests/python/test_hdf5.py tests/python/test_hdf5_read.py
fi
unset GPUFILE_CUDA_LIBRARY

# Coverage-guided fuzzing of the inputs gpufile parses (tests/fuzz; docs/reliability.md,
# "Fuzzing"): cufile.json and gdsio job files with libFuzzer (clang, the fuzz targets and the
# library under ASan+UBSan), safetensors headers with atheris in the virtual environment above.
# Each target replays its corpus (tests/fuzz/corpus/<target>), then fuzzes for a bounded time;
# what it finds new goes to build/fuzz/found/, never into the repository's corpus.
if [ "$fuzz" != 0 ]; then
  phase "fuzz (${GPUFILE_FUZZ_SECONDS:-40} s a target)"
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
if [ "$sanitizers" != 0 ]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite asan+ubsan build/asan -DCMAKE_BUILD_TYPE=Debug "-DGPUFILE_SANITIZE=address,undefined"
  # ThreadSanitizer, no suppressions. die_after_fork=0: the fork tests start threads in the child
  # of a threaded parent, which TSan refuses by default; gpufile parks its workers around fork()
  # for exactly that case (src/exec/executor.hpp). cli_bench, the CLI's end-to-end script, runs
  # the library code the C API suites run here already, and takes minutes under TSan.
  TSAN_OPTIONS=halt_on_error=1:die_after_fork=0:second_deadlock_stack=1 exclude='^cli_bench$' \
    run_suite tsan build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUFILE_SANITIZE=thread
fi
phase "all passed ($([ "$full" = 1 ] && echo full || echo quick) run)"
