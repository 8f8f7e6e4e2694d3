#!/usr/bin/env bash
# The real GPUDirect Storage clients, run unchanged against gpufile's libcufile.so.0 on the GPU
# machine (issue 10): their own tests, passed/failed, and their speed on gpufile next to their
# own non-GDS path. The table is docs/compatibility.md's "Programs that run on gpufile".
#
# Clients (--only takes any of these names; all by default, in this order), with the time each
# is expected to take on the H100 machine (from the earlier run of its parts) and its limit:
#   kvikio           KvikIO 26.10's own pytest files for local files (test_basic_io,
#                    test_async_io, test_cufile_driver, test_numpy, test_defaults, test_mmap),
#                    KVIKIO_COMPAT_MODE=OFF; then one raw cuFile read through KvikIO to show
#                    which library served it (pytest: 18 s)                ~0.5 min, limit 300 s
#   kvikio-speed     KvikIO CuFile.read of a warm 4 GiB file over gpufile against its own
#                    POSIX path, default settings and KVIKIO_NTHREADS=16     ~1 min, limit 150 s
#   fio              fio 3.42 built here with --enable-libcufile against include/cufile.h and
#                    gpufile's library; write + verify jobs (md5, crc32c, sha256; bs 1m and
#                    4k; 4 jobs) with cuda_io=cufile; the md5 job and sequential reads with
#                    cuda_io=posix too (fio's own non-GDS path)            ~1.5 min, limit 240 s
#   torch            torch.cuda.gds: GdsFile save_storage / load_storage of 1 GiB, registered
#                    and unregistered buffers, contents compared; against torch.save /
#                    torch.load and a pinned read + copy; the same calls without gpufile
#                    (control)                                               ~1 min, limit 150 s
#   fastsafetensors  SafeTensorsFileLoader(nogds=False) of a 4 GiB bf16 checkpoint made with
#                    torch here, tensors compared with safetensors' own loader; against
#                    nogds=True                                            ~1.5 min, limit 240 s
# All: about 5 minutes. --deadline (560 s by default) bounds the whole, so that it fits one
# 10-minute device call: a client that cannot start in the time left gets a "not run" row that
# says which --only command runs it. If a run is cut short, split it:
#   --only kvikio,kvikio-speed    then    --only fio,torch,fastsafetensors
#
# Usage, on the GPU machine from the repository root (the device tool carries build/gpu, .whl
# and .peers with the working tree):
#   bash bench/clients-run.sh [--only LIST] [--build DIR] [--out DIR] [--deadline SECONDS]
#   bash bench/clients-run.sh fio,torch          # a bare LIST is the same as --only LIST
# --build: gpufile's build folder (build/gpu); --out: where results go ($OUT/clients, OUT
# defaulting to /tmp/gpufile-out). Results: clients.md (the table, then each client's time),
# <client>.log (all that the client printed), kvikio-pytest.log, fio-*.json / fio-*.err,
# fio-configure.log / fio-build.log, *-gpufile.log (gpufile's own log of a client's processes,
# at INFO: one "config:" line per cuFileDriverOpen that gpufile served).
# GPUFILE_BENCH_COMMIT=<hash> names the commit in the first line: the device tool's copy of the
# tree may carry an older .git (unset, `git rev-parse --short HEAD` names it).
#
# How each client is made to use gpufile: every client process gets LD_PRELOAD=<build>/src/
# libcufile.so.0. KvikIO (libkvikio's shim: dlopen("libcufile.so.0"), after its wheel's loader
# asked cuda.pathfinder for "cufile", which first looks for a loaded libcufile.so.0 with
# RTLD_NOLOAD), fastsafetensors (dlopen("libcufile.so.0") in its cpp extension) and torch
# (libtorch_cuda.so: NEEDED libcufile.so.0; the torch row records its RUNPATH) all ask for the
# soname, which the dynamic linker answers with the loaded library of that soname. fio is
# linked against gpufile's library with an RPATH (not RUNPATH: LD_LIBRARY_PATH cannot override
# it) and runs without a preload. Each Python check reads /proc/self/maps and names every
# libcufile it finds; each client's gpufile log shows that gpufile opened the driver. NVIDIA's
# libcufile cannot register a file on the lent machines (5027: no udev), so a pass there cannot
# be NVIDIA's.
#
# Here, without a GPU: --fake-cuda runs only fio, against the CUDA driver test double
# (tests/support): fio is built against include/cufile.h and tests/support/include's cuda.h and
# cuda_runtime.h (a header-only runtime over the driver API; an empty libcudart.so, made in
# /tmp, satisfies configure's link test), and runs its verify jobs with the double as
# libcuda.so.1. It checks the build and the verify jobs; its speeds mean nothing. It needs the
# build's targets cufile and fakecuda:
#   cmake --build build/gpu --target cufile fakecuda && bash bench/clients-run.sh --fake-cuda
#
# Filling .whl and .peers (once, on a machine with network; the GPU machine has none). Both are
# git-ignored: never commit them. The device tool carries them with the tree (64 MiB in all):
# .whl is 6.6 MiB, .peers/fio 5.6 MiB, .peers/kvikio-tests 0.1 MiB.
#   1. gpufile: cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release &&
#        cmake --build build/gpu
#   2. wheels, with their Requires-Dist checked against the machine: it has cupy-cuda13x, numpy,
#      packaging, pytest, torch, safetensors, cuda-bindings (with cuda-pathfinder) and
#      nvidia-cufile; fastsafetensors never imports its typer:
#        python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#          --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#          --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
#          --platform manylinux2014_x86_64 -d .whl "kvikio-cu13==26.10.*" \
#          "libkvikio-cu13==26.10.*" "rapids-logger==0.3.*" fastsafetensors==0.5.0
#   3. KvikIO's tests, from a bare git clone of github.com/rapidsai/kvikio (here
#      /work/.mirror/rapidsai+kvikio/repo); from it
#        mkdir -p .peers/kvikio-tests && git --git-dir=/work/.mirror/rapidsai+kvikio/repo \
#          archive v26.10.00a python/kvikio/tests | tar -x -C .peers/kvikio-tests \
#          --strip-components=3
#      (the snapshot's newest 26.10 ref is the tag v26.10.00a; its tests equal those of the
#      snapshot's newest commit, on main, of 2026-07-23)
#   4. fio: `fetch github:axboe/fio` (/work/.mirror/axboe+fio/repo); then
#        mkdir -p .peers/fio && git --git-dir=/work/.mirror/axboe+fio/repo archive fio-3.42 |
#          tar -x -C .peers/fio && rm -rf .peers/fio/examples
set -uo pipefail

CLIENTS=(kvikio kvikio-speed fio torch fastsafetensors)
declare -A LIMIT=([kvikio]=300 [kvikio-speed]=150 [fio]=240 [torch]=150 [fastsafetensors]=240)
ONLY=$(IFS=,; echo "${CLIENTS[*]}")
B=build/gpu
DIR=${OUT:-/tmp/gpufile-out}/clients
DEADLINE=560
FAKE=0
CHILD=""
SELF=$(readlink -f "${BASH_SOURCE[0]}")
while [ $# -gt 0 ]; do
  case $1 in
    --only) ONLY=${2:?--only LIST}; shift 2 ;;
    --only=*) ONLY=${1#*=}; shift ;;
    --build) B=${2:?--build DIR}; shift 2 ;;
    --build=*) B=${1#*=}; shift ;;
    --out) DIR=${2:?--out DIR}; shift 2 ;;
    --out=*) DIR=${1#*=}; shift ;;
    --deadline) DEADLINE=${2:?--deadline SECONDS}; shift 2 ;;
    --deadline=*) DEADLINE=${1#*=}; shift ;;
    --fake-cuda) FAKE=1; shift ;;
    --child) CHILD=${2:?}; shift 2 ;;  # internal: one client, in a process of its own
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$SELF"; exit 0 ;;
    -*) echo "unknown option $1 (--help)" >&2; exit 2 ;;
    *) ONLY=$1; shift ;;
  esac
done
for c in ${ONLY//,/ }; do
  [[ " ${CLIENTS[*]} " == *" $c "* ]] ||
    { echo "unknown client $c (known: ${CLIENTS[*]})" >&2; exit 2; }
done
REPO=$PWD
[[ $B == /* ]] || B=$REPO/$B
[[ $DIR == /* ]] || DIR=$REPO/$DIR
LIB=$B/src/libcufile.so.0
TABLE=$DIR/clients.md
PROBE=$REPO/bench/clients.py                  # the checks run inside the clients' processes
WORK=/tmp/gpufile-clients-work                # wheels, a shim, fio's build
DATA=/root/gpufile-clients                    # the clients' files (64 GiB disk; ~15 GiB used)
FAKEDIR=$B/tests/support/fakecuda
if [ "$FAKE" = 1 ]; then
  DATA=/tmp/gpufile-clients-fake
  export GPUFILE_CUDA_LIBRARY=$FAKEDIR/libcuda.so.1
else
  unset GPUFILE_CUDA_LIBRARY
fi
export PYTHONUNBUFFERED=1
export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}

# ---- helpers ------------------------------------------------------------------------------------
# One row of the table: client | what ran | passed / failed | speed on gpufile | its own non-GDS
# path | notes. A client's process marks that it wrote its row.
row() {
  local cells=("${@//|//}")  # a | inside a cell would split it
  echo "| ${cells[0]-} | ${cells[1]-} | ${cells[2]-} | ${cells[3]-} | ${cells[4]-} |" \
    "${cells[5]-} |" | tee -a "$TABLE"
  [ -z "$CHILD" ] || touch "$DIR/.row-$CHILD"
}
# A step's own time limit inside a client (each client as a whole has its own, LIMIT):
# "${T[@]}" SECONDS COMMAND. --foreground keeps the step in the client's process group, which
# the client's limit kills whole.
T=(timeout --foreground -k 5)
# with_gpufile LOG COMMAND: gpufile's library first in the process, its log at INFO to LOG.
with_gpufile() {
  local log=$1; shift
  env LD_PRELOAD="$LIB" GPUFILE_LOG_LEVEL=INFO GPUFILE_LOG_FILE="$log" "$@"
}
# How many times gpufile opened the driver, from its log (a "config:" line at each open).
open_count() { local n; n=$(grep -c 'config: file' "$1" 2>/dev/null); echo "${n:-0}"; }
opens() { echo "driver opened by gpufile $(open_count "$1") times (its log)"; }
# json FILE EXPR: EXPR (Python, on `j`; it may span lines) of the JSON object on FILE's last
# line, or "?".
json() {
  python3 -c 'import json, sys
try:
    j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    print(eval("(" + sys.argv[2] + ")"))
except Exception:
    print("?")' "$1" "$2" 2>/dev/null
}
libs_note() {  # what a check of clients.py saw in /proc/self/maps
  local n
  n=$(json "$1" '("gpufile mapped" if j["gpufile_mapped"] else "GPUFILE NOT MAPPED")
      + "".join("; also mapped: " + p for p in j["other_libcufile"])')
  [ "$n" = "?" ] && n="no maps (the check did not finish)"
  echo "$n"
}
version_of() {  # an installed distribution's version
  python3 -c 'import sys; from importlib.metadata import version; print(version(sys.argv[1]))' \
    "$1" 2>/dev/null || echo "?"
}
needs_gpu() {
  [ "$FAKE" = 1 ] || return 0
  row "$1" "-" "not run" "-" "-" "needs a GPU (--fake-cuda runs fio only)"
  return 1
}
# The wheels from .whl, installed once per machine into $WORK/site (no network there).
wheels() {
  local pkg=$1; shift
  [ -d "$WORK/site/$pkg" ] && return 0
  mkdir -p "$WORK/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$WORK/site" "$@" >>"$DIR/pip.log" 2>&1 && return 0
  echo "pip install of $* failed:"; tail -5 "$DIR/pip.log"
  return 1
}
kvikio_wheels() {
  wheels kvikio .whl/kvikio_cu13-*.whl .whl/libkvikio_cu13-*.whl .whl/rapids_logger-*.whl
}

# ---- KvikIO: its own tests for local files ------------------------------------------------------
client_kvikio() {
  needs_gpu "KvikIO (Python)" || return
  local tests=$REPO/.peers/kvikio-tests name="KvikIO (Python)"
  local what="its pytest files for local files (test_basic_io, test_async_io,"
  what+=" test_cufile_driver, test_numpy, test_defaults, test_mmap), KVIKIO_COMPAT_MODE=OFF"
  [ -f "$tests/test_basic_io.py" ] || {
    row "$name" "$what" "not run" "-" "-" "no .peers/kvikio-tests (the header says how to fill it)"
    return; }
  kvikio_wheels || { row "$name" "$what" "not run" "-" "-" "wheels missing from .whl"; return; }
  name="KvikIO $(version_of kvikio-cu13) (Python)"
  # cuda-python 13 dropped the module cuda.cuda; test_no_current_cuda_context imports it (and
  # skips without it). An alias to cuda.bindings.driver, the same functions, lets it run.
  local shim=$WORK/shim note_shim=""
  if ! python3 -c 'import cuda.cuda' 2>/dev/null; then
    mkdir -p "$shim/cuda"
    echo 'from cuda.bindings.driver import *  # noqa: F401,F403  (cuda.cuda before cuda-python 13)' \
      >"$shim/cuda/cuda.py"
    if PYTHONPATH=$shim:$PYTHONPATH python3 -c 'import cuda.cuda as c; c.cuCtxPopCurrent' \
        2>/dev/null; then
      note_shim="; cuda.cuda (gone in cuda-python 13) aliased to cuda.bindings.driver, so that"
      note_shim+=" test_no_current_cuda_context runs"
    else
      rm -rf "$shim"
    fi
  fi
  local log=$DIR/kvikio-pytest.log glog=$DIR/kvikio-gpufile.log rc
  rm -f "$glog"
  (cd "$tests" && KVIKIO_COMPAT_MODE=OFF PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$shim:$PYTHONPATH \
     with_gpufile "$glog" "${T[@]}" 270 python3 -m pytest -v -rfEs -p no:cacheprovider \
     test_basic_io.py test_async_io.py test_cufile_driver.py test_numpy.py test_defaults.py \
     test_mmap.py) >"$log" 2>&1
  rc=$?
  local pytest_opens report=$DIR/kvikio-pytest.json
  pytest_opens=$(open_count "$glog")
  echo "pytest exit $rc"; tail -30 "$log"
  python3 "$PROBE" pytest-report --log "$log" --rc "$rc" >"$report"
  local check=$DIR/kvikio-check.json used
  mkdir -p "$DATA"
  KVIKIO_COMPAT_MODE=OFF with_gpufile "$glog" "${T[@]}" 60 python3 "$PROBE" kvikio-check \
    --lib "$LIB" --dir "$DATA" >"$check" 2>&1
  tail -3 "$check"
  used="driver opened by gpufile $pytest_opens times in the tests' processes (its log)."
  used+=" One raw cuFile read through KvikIO after: data"
  used+=" $(json "$check" '"ok" if j["data_ok"] else "WRONG"'), compat preferred"
  used+=" $(json "$check" 'j["compat_preferred"]'), libcufile version"
  used+=" $(json "$check" '".".join(map(str, j["libcufile_version"]))'), $(libs_note "$check")"
  local notes
  notes=$(json "$report" 'j["notes"] + ". " if j["notes"] else ""')
  row "$name" "$what" "$(json "$report" 'j["result"]')" "speed: the kvikio-speed rows" "-" \
    "$notes$used$note_shim"
}

# ---- KvikIO's speed over gpufile against its own POSIX path -------------------------------------
BIG=$DATA/big.bin
big_file() {  # a warm 4 GiB file
  mkdir -p "$DATA"
  [ "$(stat -c %s "$BIG" 2>/dev/null)" = $((4 << 30)) ] ||
    dd if=/dev/urandom of="$BIG" bs=16M count=256 status=none
  cat "$BIG" >/dev/null; cat "$BIG" >/dev/null
}
client_kvikio_speed() {
  needs_gpu "KvikIO (Python)" || return
  kvikio_wheels || {
    row "KvikIO (Python)" "CuFile.read speed" "not run" "-" "-" "wheels missing from .whl"; return; }
  big_file
  local glog=$DIR/kvikio-speed-gpufile.log spec name envs out preload
  rm -f "$glog"
  for spec in "gpufile-1|KVIKIO_COMPAT_MODE=OFF" \
              "gpufile-16|KVIKIO_COMPAT_MODE=OFF KVIKIO_NTHREADS=16" \
              "posix-1|KVIKIO_COMPAT_MODE=ON" "posix-16|KVIKIO_COMPAT_MODE=ON KVIKIO_NTHREADS=16"; do
    name=${spec%%|*}; envs=${spec#*|}; out=$DIR/kvikio-read-$name.json
    preload=(); [[ $name == gpufile* ]] && preload=(with_gpufile "$glog")
    "${preload[@]}" env $envs "${T[@]}" 100 python3 "$PROBE" kvikio-read --lib "$LIB" \
      --file "$BIG" >"$out" 2>&1
    echo "$name ($envs): $(tail -1 "$out")"
  done
  speed() {  # "first call X / steady Y GiB/s (CPU-s/GiB a / b)"
    json "$DIR/kvikio-read-$1.json" '"first call %.1f / steady %.1f GiB/s (CPU-s/GiB %.2f / %.2f)"
      % (j["first"][0], j["steady"][0], j["first"][1], j["steady"][1])'
  }
  local name="KvikIO $(version_of kvikio-cu13) (Python)" g16=$DIR/kvikio-read-gpufile-16.json
  local note="warm page cache; first call in a fresh process, then the best of 3;"
  note+=" $(libs_note "$g16"), compat preferred $(json "$g16" 'j["compat_preferred"]') on"
  note+=" gpufile; $(opens "$glog")"
  row "$name" "CuFile.read of a 4 GiB file into CuPy, KVIKIO_NTHREADS=16" "-" \
    "$(speed gpufile-16)" "POSIX (KVIKIO_COMPAT_MODE=ON): $(speed posix-16)" "$note"
  row "$name" "the same with KvikIO's default settings"\
" ($(json "$DIR/kvikio-read-gpufile-1.json" 'j["threads"]') thread)" "-" \
    "$(speed gpufile-1)" "POSIX: $(speed posix-1)" "-"
}

# ---- fio's libcufile engine ---------------------------------------------------------------------
client_fio() {
  local what="fio, ioengine=libcufile"
  [ -x "$REPO/.peers/fio/configure" ] || {
    row "fio" "$what" "not run" "-" "-" "no .peers/fio (the header says how to fill it)"; return; }
  # Our header and library first; CUDA's runtime from the toolkit (or, with --fake-cuda, the
  # test double's header-only runtime and an empty libcudart.so for configure's link test).
  local cflags ldflags src=$WORK/fio-build cuda=/usr/local/cuda
  ldflags="-L$B/src -Wl,--disable-new-dtags -Wl,-rpath,$B/src"
  if [ "$FAKE" = 1 ]; then
    src=$WORK/fio-build-fake
    mkdir -p "$WORK/stub"
    echo 'int gpufile_clients_empty_cudart;' >"$WORK/stub/cudart.c"
    ${CC:-cc} -shared -fPIC -o "$WORK/stub/libcudart.so" "$WORK/stub/cudart.c"
    cflags="-I$REPO/include -I$REPO/tests/support/include"
    ldflags+=" -L$FAKEDIR -L$WORK/stub -Wl,-rpath,$FAKEDIR"
  else
    cflags="-I$REPO/include -I$cuda/include"
    ldflags+=" -L$cuda/lib64 -L$cuda/lib64/stubs -Wl,-rpath,$cuda/lib64"
  fi
  local fio=$src/fio
  if [ "$(cat "$src/.gpufile-flags" 2>/dev/null)" != "$cflags $ldflags" ] || [ ! -x "$fio" ]; then
    rm -rf "$src" && mkdir -p "$WORK" && cp -r "$REPO/.peers/fio" "$src"
    if ! (cd "$src" &&
          ./configure --enable-libcufile --extra-cflags="$cflags" --extra-ldflags="$ldflags" \
            >"$DIR/fio-configure.log" 2>&1 &&
          grep -qE '^libcufile +yes' "$DIR/fio-configure.log" &&
          "${T[@]}" 200 make -j"$(nproc)" fio >"$DIR/fio-build.log" 2>&1); then
      tail -20 "$DIR/fio-configure.log" "$DIR/fio-build.log" 2>/dev/null
      row "fio" "$what: build with --enable-libcufile" "build FAILED" "-" "-" \
        "fio-configure.log, fio-build.log"
      return
    fi
    echo "$cflags $ldflags" >"$src/.gpufile-flags"
  fi
  local header linked ours=yes
  header=$(echo '#include <cufile.h>' | ${CC:-cc} $cflags -E -x c - 2>/dev/null |
    grep -m1 -o '"[^"]*cufile\.h"' | tr -d '"')
  linked=$(ldd "$fio" | awk '/libcufile/ {print $3}')
  ldd "$fio" | tee "$DIR/fio-ldd.log"
  echo "cufile.h: $header; libcufile: $linked"
  [ -n "$linked" ] && [ "$(readlink -f "$linked")" = "$(readlink -f "$LIB")" ] || ours=no
  local glog=$DIR/fio-gpufile.log
  rm -f "$glog"
  mkdir -p "$DATA"
  export GPUFILE_LOG_LEVEL=INFO GPUFILE_LOG_FILE=$glog
  local common=(--ioengine=libcufile --gpu_dev_ids=0 --thread --directory="$DATA"
                --group_reporting --output-format=json)
  report() {  # NAME FIELD [RC [verify]]: FIELD of clients.py fio-report on fio-NAME.json
    python3 "$PROBE" fio-report --file "$DIR/fio-$1.json" --rc "${3:-0}" ${4:+--verify} |
      python3 -c 'import json, sys
r = json.load(sys.stdin)
ok = sys.argv[1] == "verdict" or r["verdict"] == "ok"
print("%.2f GiB/s" % r[sys.argv[1]] if ok and sys.argv[1] != "verdict" else r["verdict"])' "$2"
  }
  # Write + verify: each job writes its file through cuFileWrite and reads it back through
  # cuFileRead into GPU memory, checking every block's checksum. The md5 job at bs 1m runs on
  # fio's own path too (cuda_io=posix: cudaMemcpy to host memory and pwrite; pread and
  # cudaMemcpy), for its write bandwidth next to gpufile's.
  local big=256m small=32m
  [ "$FAKE" = 1 ] && big=64m small=8m
  verify_job() {  # CUDA_IO CHECKSUM BS SIZE: prints "ok" or what went wrong
    local name=verify-$2-$3 rc
    [ "$1" = posix ] && name+=-posix
    "${T[@]}" 150 "$fio" --name="$name" "${common[@]}" --cuda_io="$1" --direct=1 --rw=write \
      --bs="$3" --size="$4" --numjobs=4 --verify="$2" --do_verify=1 --verify_state_save=0 \
      >"$DIR/fio-$name.json" 2>"$DIR/fio-$name.err"
    rc=$?
    rm -f "$DATA/$name".*
    report "$name" verdict "$rc" verify
  }
  local ok=0 failed=0 failures="" v bs verdict
  for v in md5 crc32c sha256; do
    for bs in 1m 4k; do
      verdict=$(verify_job cufile "$v" "$bs" "$([ "$bs" = 4k ] && echo $small || echo $big)")
      echo "verify $v bs=$bs, 4 jobs, cuda_io=cufile: $verdict"
      if [ "$verdict" = ok ]; then ok=$((ok + 1)); else
        failed=$((failed + 1)); failures+="; $v/$bs: $verdict"; tail -3 "$DIR/fio-verify-$v-$bs.err"
      fi
    done
  done
  local posix_verdict
  posix_verdict=$(verify_job posix md5 1m $big)
  echo "verify md5 bs=1m, 4 jobs, cuda_io=posix: $posix_verdict"
  # Sequential reads of 4 files, bs 1m, warm page cache (invalidate=0: fio drops the files'
  # pages before a run by default): the cuFile path (direct=1, as a GDS job is set up; gpufile
  # reads cached data from the page cache all the same) against fio's own posix path
  # (cuda_io=posix: buffered reads into host memory, then cudaMemcpy).
  local rsize=1g
  [ "$FAKE" = 1 ] && rsize=128m
  local read=(--name=seqread "${common[@]}" --rw=read --bs=1m --size=$rsize --numjobs=4
              --invalidate=0)
  "${T[@]}" 60 "$fio" "${read[@]}" --cuda_io=posix --direct=0 >"$DIR/fio-read-layout.json" 2>&1
  cat "$DATA"/seqread.* >/dev/null; cat "$DATA"/seqread.* >/dev/null
  "${T[@]}" 60 "$fio" "${read[@]}" --cuda_io=posix --direct=0 >"$DIR/fio-read-posix.json" 2>&1
  "${T[@]}" 60 "$fio" "${read[@]}" --cuda_io=cufile --direct=1 >"$DIR/fio-read-cufile.json" 2>&1
  unset GPUFILE_LOG_LEVEL GPUFILE_LOG_FILE
  rm -f "$DATA"/seqread.*
  local result="$ok passed, $failed failed" note
  [ $ours = yes ] && [ "$(open_count "$glog")" -gt 0 ] || result+=", NOT through gpufile (notes)"
  note="cufile.h: ${header#"$REPO"/}; ldd: libcufile.so.0 => ${linked#"$REPO"/}"
  [ $ours = yes ] || note+=" (NOT gpufile's)"
  note+="; $(opens "$glog")$failures"
  [ "$FAKE" = 1 ] && note="CUDA test double (--fake-cuda): speeds mean nothing; $note"
  row "fio $(cd "$src" && ./fio --version 2>/dev/null | sed 's/^fio-//')" \
    "libcufile engine, cuda_io=cufile, direct=1: write + verify with md5, crc32c, sha256 at bs 1m ($big x 4 jobs) and 4k ($small x 4 jobs); 4 jobs x $rsize sequential reads, bs 1m" \
    "$result" \
    "reads (warm page cache): $(report read-cufile read_gib_s); writes (md5 1m job): $(report verify-md5-1m write_gib_s)" \
    "cuda_io=posix: reads (buffered): $(report read-posix read_gib_s); writes (md5 1m job, direct=1): $(report verify-md5-1m-posix write_gib_s), its verify $posix_verdict" \
    "$note"
}

# ---- torch.cuda.gds -----------------------------------------------------------------------------
client_torch() {
  needs_gpu "torch.cuda.gds" || return
  mkdir -p "$DATA"
  # How torch finds libcufile: NEEDED and RUNPATH of libtorch_cuda.so.
  local tlib needed runpath resolve
  tlib=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
  tlib=$tlib/lib/libtorch_cuda.so
  needed=$(readelf -d "$tlib" 2>/dev/null | grep -o '\[libcufile[^]]*\]' | tr -d '[]')
  runpath=$(readelf -d "$tlib" 2>/dev/null | grep -E '\((RUNPATH|RPATH)\)' | grep -o '\[.*\]' |
    tr -d '[]' | tr ':' '\n' | grep -i cufile | paste -sd,)
  resolve="NEEDED ${needed:-no libcufile (loaded at run time?)},"
  resolve+=" RUNPATH ${runpath:-without a cufile folder}"
  echo "libtorch_cuda.so ($tlib): $resolve"
  # Control: the same calls with the libcufile torch finds by itself (NVIDIA's log goes to a
  # file of ours, not to cufile.log in the working directory).
  local control=$DIR/torch-control.json out=$DIR/torch.json glog=$DIR/torch-gpufile.log
  CUFILE_LOGFILE_PATH=$DIR/torch-control-cufile.log "${T[@]}" 90 python3 "$PROBE" torch \
    --control --mib 1 --dir "$DATA" --lib "$LIB" >"$control" 2>&1
  echo "without gpufile: $(tail -1 "$control")"
  rm -f "$glog"
  with_gpufile "$glog" "${T[@]}" 120 python3 "$PROBE" torch --mib 1024 --dir "$DATA" \
    --lib "$LIB" >"$out" 2>&1
  tail -5 "$out"
  local result
  result=$(json "$out" '"passed" if j["unregistered_equal"] and j["registered_equal"]
    and j["gpufile_mapped"] else "FAILED: contents %s / %s (unregistered / registered), "
    "gpufile mapped %s" % (j["unregistered_equal"], j["registered_equal"], j["gpufile_mapped"])')
  [ "$result" = "?" ] && result="FAILED: $(tail -1 "$out" | cut -c1-200)"
  local without
  without=$(json "$control" 'j["result"] + " (" + (", ".join(j["other_libcufile"])
    or "no libcufile mapped") + ")"')
  row "torch.cuda.gds (torch $(version_of torch))" \
    "GdsFile.save_storage / load_storage of 1 GiB, unregistered and registered (gds_register_buffer) buffers, contents compared" \
    "$result" \
    "$(json "$out" '"load of a warm file %.1f / %.1f GiB/s (unregistered / registered, best of 3)"
      % (j["unregistered_gib_s"], j["registered_gib_s"])')" \
    "$(json "$out" '"torch.load(map_location=cuda) %.1f GiB/s; pinned readinto + copy %.1f GiB/s"
      % (j["torch_load_gib_s"], j["plain_gib_s"])')" \
    "libtorch_cuda.so: $resolve; $(libs_note "$out"); $(opens "$glog"); without gpufile: $without"
}

# ---- fastsafetensors, GDS mode ------------------------------------------------------------------
client_fastsafetensors() {
  needs_gpu "fastsafetensors" || return
  wheels fastsafetensors .whl/fastsafetensors-*.whl || {
    row "fastsafetensors" "GDS mode" "not run" "-" "-" "wheel missing from .whl"; return; }
  mkdir -p "$DATA"
  # fastsafetensors (0.5) takes its GDS path only where /dev/nvidia-fs0 exists (copier/gds.py:
  # a guard against NVIDIA's library closing fd 0 on half-set-up nvidia-fs hosts); without it,
  # it warns and uses its nogds copier. gpufile needs no nvidia-fs: an empty placeholder lets
  # the loader take the path it takes on a GDS host. Removed after (by the parent too, should
  # this client be cut short).
  local placeholder=""
  if [ ! -e /dev/nvidia-fs0 ] && touch /dev/nvidia-fs0; then
    touch "$DIR/.nvidia-fs0-placeholder"
    placeholder="; an empty /dev/nvidia-fs0 was made for the loader's check, and removed"
  fi
  local out=$DIR/fastsafetensors.json glog=$DIR/fastsafetensors-gpufile.log
  rm -f "$glog"
  with_gpufile "$glog" "${T[@]}" 220 python3 "$PROBE" fastsafetensors --mib 4096 \
    --dir "$DATA" --lib "$LIB" >"$out" 2>&1
  [ -e "$DIR/.nvidia-fs0-placeholder" ] && rm -f /dev/nvidia-fs0 "$DIR/.nvidia-fs0-placeholder"
  tail -5 "$out"
  local result
  result=$(json "$out" '"passed" if j["equal"] and j["gpufile_mapped"]
    and j["gds_copier"] == "GdsFileCopier" else "FAILED: tensors %s, copier %s, gpufile mapped %s"
    % ("equal" if j["equal"] else "DIFFER", j["gds_copier"], j["gpufile_mapped"])')
  [ "$result" = "?" ] && result="FAILED: $(tail -1 "$out" | cut -c1-200)"
  row "fastsafetensors $(version_of fastsafetensors)" \
    "SafeTensorsFileLoader(nogds=False) of a $(json "$out" '"%.1f" % j["size_gb"]') GB bf16 checkpoint, tensors compared with safetensors' own loader" \
    "$result" "$(json "$out" '"%s: %.1f GB/s (warm, best of 3)" % (j["gds_copier"], j["gds_gb_s"])')" \
    "$(json "$out" '"nogds=True (%s): %.1f GB/s" % (j["nogds_copier"], j["nogds_gb_s"])')" \
    "dlopen(\"libcufile.so.0\"); $(libs_note "$out"); $(opens "$glog")$placeholder"
}

# ---- one client in a process of its own, within its time ----------------------------------------
if [ -n "$CHILD" ]; then
  cd "$REPO" && "client_${CHILD//-/_}"
  exit 0
fi

mkdir -p "$DIR"
[ -f "$LIB" ] || { echo "no $LIB: build gpufile first (--help)" >&2; exit 2; }
if [ "$FAKE" = 1 ] && [ ! -f "$FAKEDIR/libcuda.so.1" ]; then
  echo "no $FAKEDIR/libcuda.so.1: cmake --build ${B#"$REPO"/} --target fakecuda" >&2; exit 2
fi
{
  echo "| client | what ran | passed / failed | speed on gpufile | its own non-GDS path | notes |"
  echo "|---|---|---|---|---|---|"
} >"$TABLE"
echo "== gpufile's clients: $ONLY; $(nvidia-smi -L 2>/dev/null | head -1);" \
  "gpufile $(python3 "$REPO/bench/benchlib.py" commit)"
START=$SECONDS
TIMES=""
fake=(); [ "$FAKE" = 1 ] && fake=(--fake-cuda)
for c in "${CLIENTS[@]}"; do
  [[ ",$ONLY," == *",$c,"* ]] || continue
  left=$((DEADLINE - (SECONDS - START) - 5))
  lim=${LIMIT[$c]}
  [ "$lim" -gt "$left" ] && lim=$left
  if [ "$lim" -lt 30 ]; then
    row "$c" "-" "not run" "-" "-" \
      "the run's --deadline ($DEADLINE s) was spent; run it alone: bash bench/clients-run.sh --only $c"
    continue
  fi
  lines=$(wc -l <"$TABLE")
  rm -f "$DIR/.row-$c"
  t0=$SECONDS
  timeout -k 10 "$lim" bash "$SELF" --child "$c" --build "$B" --out "$DIR" "${fake[@]}" \
    >"$DIR/$c.log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  [ -e "$DIR/.nvidia-fs0-placeholder" ] && rm -f /dev/nvidia-fs0 "$DIR/.nvidia-fs0-placeholder"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    row "$c" "-" "TIMED OUT after $lim s" "-" "-" "$c.log has what it printed"
  elif [ ! -e "$DIR/.row-$c" ]; then
    row "$c" "-" "ABORTED (exit $rc)" "-" "-" "$c.log: $(tail -1 "$DIR/$c.log" | cut -c1-200)"
  else
    tail -n +$((lines + 1)) "$TABLE"
  fi
  rm -f "$DIR/.row-$c"
  TIMES+="${TIMES:+, }$c $took s"
  echo "== $c: $took s (limit $lim s), log $DIR/$c.log"
done
{
  echo
  echo "Times: $TIMES (all: $((SECONDS - START)) s). bench/clients-run.sh --only $ONLY" \
    "${fake[@]:-}"
} >>"$TABLE"
echo; cat "$TABLE"
