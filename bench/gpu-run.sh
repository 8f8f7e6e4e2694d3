#!/usr/bin/env bash
# The GPU machine's run: the test suites against the real CUDA driver, the cuFile usage
# example built with the real CUDA toolkit, and same-run measurements for docs/performance.md.
#
# Build here first (the GPU machine has no liburing or GoogleTest; binaries built on Debian 12
# run there):  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build/gpu
# Then on the GPU machine, from the repository root:  bash bench/gpu-run.sh build/gpu [SIZE_GIB]
# (the build folder relative to the repository root, or absolute: /tmp/gb).
set -uo pipefail
B=${1:-build/gpu}
[ -d "$B" ] || { echo "gpu-run: no build folder $B" >&2; exit 2; }
B=$(cd "$B" && pwd)  # absolute: the example's RPATH below must name it from anywhere
GIB=${2:-4}
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
unset GPUFILE_CUDA_LIBRARY
export GPUFILE_TEST_REQUIRE_GPU=1
log() { echo "== $*"; }
status=0

log "machine"
nvidia-smi -L; uname -r; nproc; df -h / /dev/shm | tail -2

log "test suites against the real driver"
for t in support/fakecuda_tests integration/capi_tests fault/fault_tests abi/abi_tests unit/unit_tests; do
  if [ -x "$B/tests/$t" ]; then
    "$B/tests/$t" --gtest_brief=1 >"$OUT/$(basename $t).log" 2>&1
    rc=$?
    echo "$t: exit $rc; $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/$(basename $t).log" | tr '\n' ' ')"
    [ $rc -eq 0 ] || { status=1; grep -E '^\[  FAILED' "$OUT/$(basename $t).log" | head -20; }
  fi
done

log "cuFile usage example, built with the CUDA toolkit against our header and libcufile.so.0"
# The CUDA toolkit's lib64 holds NVIDIA's libcufile.so.0 too. The example's RPATH (not RUNPATH:
# --disable-new-dtags, so LD_LIBRARY_PATH cannot put the toolkit's first) names gpufile's, and
# CUFILE_SAMPLE_LIBRARY makes the example stop (exit 3) if another one answered anyway.
CUDA=/usr/local/cuda
if g++ -O2 -o /tmp/cufile_sample examples/cufile_sample.c* -Iinclude -I$CUDA/include \
     -L"$B/src" -l:libcufile.so.0 -L$CUDA/lib64 -lcudart -ldl \
     -Wl,--disable-new-dtags -Wl,-rpath,"$B/src" 2>"$OUT/example-build.log"; then
  head -c $((8 << 20)) /dev/urandom >/tmp/sample.bin
  CUFILE_SAMPLE_LIBRARY="$B/src/libcufile.so.0" /tmp/cufile_sample /tmp/sample.bin $((8 << 20))
  rc=$?
  if [ $rc -eq 3 ]; then
    echo "gpu-run: NVIDIA's libcufile answered, not gpufile's ($B/src/libcufile.so.0): the example did not test gpufile" >&2
  fi
  [ $rc -eq 0 ] || status=1
else
  echo "example build failed:"; cat "$OUT/example-build.log"; status=1
fi

log "measurements: ${GIB} GiB file on / (ext4) and in /dev/shm"
F=/root/gpufile-bench.bin
dd if=/dev/urandom of=$F bs=16M count=$((GIB * 64)) status=none; sync
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
C="$B/bench/gpufile_compare"
"$C" h2d-pinned; "$C" h2d-pageable
drop; echo -n "dd O_DIRECT     "; dd if=$F of=/dev/null bs=16M iflag=direct 2>&1 | tail -1
drop; echo -n "cold: "; "$C" gpufile $F
drop; echo -n "cold: "; "$C" naive $F
cat $F >/dev/null
echo -n "warm: "; "$C" gpufile $F
echo -n "warm: "; "$C" naive $F
cp $F /dev/shm/gpufile-bench.bin
echo -n "shm:  "; "$C" gpufile /dev/shm/gpufile-bench.bin
echo -n "shm:  "; "$C" naive /dev/shm/gpufile-bench.bin
echo -n "ext4: "; "$C" gpufile-write $F
echo -n "shm:  "; "$C" gpufile-write /dev/shm/gpufile-bench.bin
log "gpufile bench (gdsio flags): warm file, 1 MiB IO, 8 threads"
G="$B/cli/gpufile"
for x in 0 2 5 6; do "$G" bench -f $F -s ${GIB}G -i 1M -w 8 -x $x -I 0 || status=1; done
"$G" bench -f $F -s ${GIB}G -i 4K -w 8 -x 0 -I 2 -T 5 --json || status=1
rm -f /dev/shm/gpufile-bench.bin

log "the main job (gpufile demo), cold file on /"
"$B/cli/gpufile" demo --size ${GIB}G --dir /root || status=1
rm -f $F
exit $status
