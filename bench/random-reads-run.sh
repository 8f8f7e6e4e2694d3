#!/usr/bin/env bash
# 4 KiB and 64 KiB random reads into the GPU, gpufile (cuFile API) against KvikIO's C++ API
# (POSIX compat mode), both driven by the same C++ timing loop: bench/random_reads.cpp.
#
# On the GPU machine, from the repository root, after a Release build of the repo in build/gpu
# (the device tool carries build/gpu and .whl, which holds the libkvikio and rapids_logger wheels):
#   bash bench/random-reads-run.sh
# Prints one markdown table; with $OUT set also writes $OUT/random_reads.{json,md,log}.
# Knobs (environment): BUILD (build/gpu), RR_DIR (/tmp/gf-rr), RR_FILE_MIB (4096),
# RR_SECONDS (3), RR_IO ("4096 65536"), RR_THREADS ("1 8 16"), RR_CUDA_INCLUDE (a dir with
# cuda.h; found from nvcc otherwise), GPUFILE_BENCH_COMMIT (the commit build/gpu holds, for the
# table's header: the device tool's copy may carry an older .git; unset, `git rev-parse`
# names it). Takes about 2 minutes with the defaults.
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build/gpu}
DIR=${RR_DIR:-/tmp/gf-rr}
FILE_MIB=${RR_FILE_MIB:-4096}
SECS=${RR_SECONDS:-3}
IO_SIZES=${RR_IO:-4096 65536}
THREADS=${RR_THREADS:-1 8 16}
FILE=$DIR/file
KV=$DIR/kvikio
LOG=$DIR/run.log
mkdir -p "$DIR"
: >"$LOG"

say() { echo "random-reads: $*" >&2; }
fail() { say "$*"; exit 1; }

LIBCUFILE=$PWD/$BUILD/src/libcufile.so.0
[ -f "$LIBCUFILE" ] || fail "no $LIBCUFILE: build the repo first (cmake --build $BUILD)"

# ---- the data: RR_FILE_MIB of random bytes, reused when it is already there -----------------
make_file() {
  say "writing $FILE_MIB MiB of random bytes to $FILE"
  local tmp=$FILE.part
  if ! python3 - "$tmp" "$FILE_MIB" <<'EOF'
import sys
import numpy as np
path, mib = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(20261122)
with open(path, "wb") as f:
    for done in range(0, mib, 64):
        f.write(rng.bytes(min(64, mib - done) << 20))
EOF
  then
    say "numpy failed; using /dev/urandom"
    dd if=/dev/urandom of="$tmp" bs=16M count=$((FILE_MIB / 16)) iflag=fullblock status=none ||
      fail "cannot write $tmp"
  fi
  mv "$tmp" "$FILE"
}
want_bytes=$((FILE_MIB * 1024 * 1024))
[ "$(stat -c %s "$FILE" 2>/dev/null || echo 0)" = "$want_bytes" ] || make_file
# Both libraries are measured on a warm page cache (gpufile sees that through cachestat).
cat "$FILE" >/dev/null && cat "$FILE" >/dev/null

# ---- the two programs ------------------------------------------------------------------------
CXXFLAGS=(-O2 -std=c++20 -Wall -Iinclude)
g++ "${CXXFLAGS[@]}" bench/random_reads.cpp -o "$DIR/random_reads" -ldl -pthread 2>>"$LOG" ||
  { tail -20 "$LOG" >&2; fail "cannot compile bench/random_reads.cpp"; }

find_cuda_include() {
  local cands=("${RR_CUDA_INCLUDE:-}" "${CUDA_HOME:-/nonexistent}/include")
  local nvcc
  nvcc=$(command -v nvcc) && cands+=("$(dirname "$(readlink -f "$nvcc")")/../include")
  cands+=(/usr/local/cuda/include)
  # torch's cu13 wheels bring nvidia-cuda-runtime, whose include/ has cuda.h.
  cands+=("$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0] + "/cu13/include")' \
    2>/dev/null)")
  for d in "${cands[@]}"; do [ -n "$d" ] && [ -f "$d/cuda.h" ] && { echo "$d"; return 0; }; done
  return 1
}

# KvikIO 26.10 from the wheels in .whl/ (the machine has no network). libkvikio needs
# librapids_logger.so from its own wheel; its bundled libzstd it finds through its RPATH.
build_kvikio_variant() {
  local whl cuda_inc
  rm -rf "$KV" && mkdir -p "$KV"
  for whl in .whl/libkvikio_cu13-*.whl .whl/rapids_logger-*.whl; do
    [ -f "$whl" ] || { echo "missing wheel: $whl"; return 1; }
    python3 -m zipfile -e "$whl" "$KV" || return 1
  done
  cuda_inc=$(find_cuda_include) || { echo "no cuda.h (set RR_CUDA_INCLUDE)"; return 1; }
  echo "cuda.h from $cuda_inc"
  # The macros are the ones libkvikio was built with (its kvikio-targets.cmake): they change
  # class layouts, so the program must see the same ones. gpufile's include/ comes first, so
  # KvikIO's #include <cufile.h> gets gpufile's declaration of the same cuFile 1.15 ABI.
  g++ "${CXXFLAGS[@]}" -DGPUFILE_WITH_KVIKIO -DKVIKIO_CUFILE_FOUND \
    -DKVIKIO_CUFILE_VERSION_API_FOUND -DBS_THREAD_POOL_ENABLE_PAUSE=1 \
    -I"$KV/libkvikio/include" -I"$KV/rapids_logger/include" -I"$cuda_inc" \
    bench/random_reads.cpp -o "$DIR/random_reads_kvikio" \
    -L"$KV/libkvikio/lib64" -lkvikio \
    -Wl,--disable-new-dtags,-rpath,"$KV/libkvikio/lib64:$KV/rapids_logger/lib64" -ldl -pthread
}
KVIKIO=1
if ! build_kvikio_variant >"$DIR/kvikio-build.log" 2>&1; then
  KVIKIO=0
  say "the KvikIO variant did not build; running the gpufile rows only. Last lines:"
  tail -25 "$DIR/kvikio-build.log" >&2
fi
cat "$DIR/kvikio-build.log" >>"$LOG"

# ---- the runs --------------------------------------------------------------------------------
ROWS=$DIR/rows.jsonl
: >"$ROWS"

# One measurement; its JSON line goes to $ROWS, or an error row when it fails.
measure() {  # label io threads program args...
  local label=$1 io=$2 n=$3 out
  shift 3
  say "$label io=$io threads=$n"
  if out=$("$@" --file "$FILE" --io-size "$io" --threads "$n" --seconds "$SECS" --json \
    2>>"$LOG"); then
    echo "${out%\}}, \"label\": \"$label\"}" >>"$ROWS"
  else
    say "  failed (exit $?): $(tail -1 "$LOG")"
    echo "{\"label\": \"$label\", \"io_size\": $io, \"threads\": $n, \"error\": true}" >>"$ROWS"
  fi
}
run_gpufile() {
  env -u GPUFILE_CUDA_LIBRARY "$DIR/random_reads" --backend cufile --cufile-lib "$LIBCUFILE" "$@"
}
run_kvikio() {  # call args...
  local call=$1
  shift
  KVIKIO_COMPAT_MODE=ON "$DIR/random_reads_kvikio" --backend kvikio --kvikio-call "$call" "$@"
}

point=0
for io in $IO_SIZES; do
  for n in $THREADS; do
    # Alternate which library goes first, so slow drift (page cache, clocks) favours neither.
    if [ $((point % 2)) = 0 ]; then
      measure gpufile "$io" "$n" run_gpufile
    fi
    if [ "$KVIKIO" = 1 ]; then
      measure kvikio-read "$io" "$n" run_kvikio read
      measure kvikio-pread "$io" "$n" run_kvikio pread
    fi
    if [ $((point % 2)) = 1 ]; then
      measure gpufile "$io" "$n" run_gpufile
    fi
    point=$((point + 1))
  done
done

# ---- the table -------------------------------------------------------------------------------
python3 - "$ROWS" "${OUT:-}" "$LOG" <<'EOF'
import json, os, platform, subprocess, sys
sys.path.insert(0, "bench")
from benchlib import commit  # GPUFILE_BENCH_COMMIT, else git
rows_path, out, log = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(line) for line in open(rows_path) if line.strip()]

def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip() or "?"
    except Exception:
        return "no nvidia-smi"

def cell(r):
    if r is None:
        return "—"
    if r.get("error"):
        return "failed"
    return f"{r['iops']:,.0f} ({r['p50_us']:.1f} / {r['p99_us']:.1f})"

def ok(r):
    return r is not None and not r.get("error")

points = sorted({(r["io_size"], r["threads"]) for r in rows})
lines = [f"Random reads into GPU memory, warm page cache, same C++ loop for both "
         f"(bench/random_reads.cpp). {gpu_name()}, {os.cpu_count()} cores, Linux "
         f"{platform.release()}, gpufile {commit()}. IOPS (p50 / p99 µs).", "",
         "| IO | threads | gpufile (cuFile) | KvikIO read() | KvikIO pread() | IOPS ratio | "
         "p99 ratio | CPU s/GiB gpufile / KvikIO |",
         "|---|---|---|---|---|---|---|---|"]
for io, n in points:
    by = {r["label"]: r for r in rows if (r["io_size"], r["threads"]) == (io, n)}
    g = by.get("gpufile")
    kv = [r for r in (by.get("kvikio-read"), by.get("kvikio-pread")) if ok(r)]
    best = max(kv, key=lambda r: r["iops"]) if kv else None
    ratio = p99 = cpu = "—"
    if ok(g) and best:
        ratio = f"{g['iops'] / best['iops']:.2f}x"
        p99 = f"{g['p99_us'] / best['p99_us']:.2f}"
        cpu = f"{g['cpu_s_per_gib']:.2f} / {best['cpu_s_per_gib']:.2f}"
    lines.append(f"| {io // 1024} KiB | {n} | {cell(g)} | {cell(by.get('kvikio-read'))} | "
                 f"{cell(by.get('kvikio-pread'))} | {ratio} | {p99} | {cpu} |")
lines += ["", "IOPS ratio: gpufile over the faster KvikIO call at the same threads (target >= 2). "
          "p99 ratio: gpufile's p99 over that call's (target <= 1)."]
via = sorted({r["via"] for r in rows if "via" in r})
lines += [f"- {v}" for v in via]
text = "\n".join(lines)
print(text)
if out:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "random_reads.json"), "w") as f:
        json.dump({"machine": gpu_name(), "cores": os.cpu_count(), "commit": commit(),
                   "rows": rows}, f, indent=1)
    with open(os.path.join(out, "random_reads.md"), "w") as f:
        f.write(text + "\n")
    with open(log) as src, open(os.path.join(out, "random_reads.log"), "w") as dst:
        dst.write(src.read())
EOF
