#!/usr/bin/env bash
# The real GPUDirect Storage clients, run against gpufile's libcufile.so.0 on the GPU machine
# (issue 10): KvikIO's own tests and its speed, fio's libcufile engine with verify jobs,
# torch.cuda.gds, fastsafetensors in GDS mode. Each client's result next to its own non-GDS path;
# the table goes to $OUT/clients/clients.md (docs/compatibility.md, "Programs that run on gpufile").
#
# Here, on Debian 12 (the GPU machine has no network), once:
#   cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build/gpu
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     "kvikio-cu13==26.10.*" "libkvikio-cu13==26.10.*" "rapids-logger==0.3.*" fastsafetensors==0.5.0
#   # the clients' sources, never committed (.peers is ignored): with the session's fetch tool,
#   # github:rapidsai/kvikio and github:axboe/fio, then from their mirrors
#   git --git-dir=<kvikio mirror> archive v26.10.00a python/kvikio/tests | tar -x -C .peers/kvikio-tests --strip-components=3
#   git --git-dir=<fio mirror> archive fio-3.42 | tar -x -C .peers/fio && rm -rf .peers/fio/examples
# There (the device tool carries build/gpu, .whl and .peers), from the repository root:
#   bash bench/clients-run.sh [kvikio,kvikio-speed,fio,torch,fastsafetensors]   # about 6 minutes
set -uo pipefail
B=${B:-build/gpu}
ONLY=${1:-kvikio,kvikio-speed,fio,torch,fastsafetensors}
OUT=${OUT:-/tmp/gpufile-out}/clients
mkdir -p "$OUT"
REPO=$PWD
LIB=$REPO/$B/src/libcufile.so.0
DATA=/root/gpufile-clients
mkdir -p "$DATA"
TABLE=$OUT/clients.md
unset GPUFILE_CUDA_LIBRARY
export PYTHONUNBUFFERED=1
[ -f "$LIB" ] || { echo "no $LIB: build first"; exit 2; }
if [ ! -d /tmp/site/kvikio ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/kvikio_cu13-*.whl .whl/libkvikio_cu13-*.whl .whl/rapids_logger-*.whl \
    .whl/fastsafetensors-*.whl >"$OUT/pip.log" 2>&1 || { echo "wheel install failed"; cat "$OUT/pip.log"; }
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
echo "| client | what ran | result | on gpufile | its own non-GDS path |" >"$TABLE"
echo "|---|---|---|---|---|" >>"$TABLE"
row() { echo "| $1 | $2 | $3 | $4 | $5 |" | tee -a "$TABLE"; }
wants() { [[ ",$ONLY," == *",$1,"* ]]; }
# gpufile's libcufile.so.0 first in every process: clients that dlopen("libcufile.so.0") or link
# it get the already loaded one. Each Python check also reads /proc/self/maps to be sure.
with_gpufile() { LD_PRELOAD=$LIB "$@"; }

# A warm 4 GiB file for the speed rows.
BIG=$DATA/big.bin
big_file() {
  [ -f "$BIG" ] || dd if=/dev/urandom of="$BIG" bs=16M count=256 status=none
  cat "$BIG" >/dev/null; cat "$BIG" >/dev/null
}

# ---- KvikIO: its own tests for local files ------------------------------------------------------
kvikio_tests() {
  local log=$OUT/kvikio-pytest.log
  (cd .peers/kvikio-tests && KVIKIO_COMPAT_MODE=OFF with_gpufile timeout 420 python3 -m pytest -q -rs \
     -p no:cacheprovider test_basic_io.py test_async_io.py test_cufile_driver.py test_numpy.py \
     test_defaults.py test_mmap.py) >"$log" 2>&1
  local rc=$? summary
  summary=$(grep -E '[0-9]+ (passed|failed)' "$log" | tail -1)
  local used
  used=$(KVIKIO_COMPAT_MODE=OFF with_gpufile python3 - "$LIB" <<'EOF' 2>&1 | tail -1
import sys, cupy, kvikio, kvikio.defaults
lib = sys.argv[1]
a = cupy.arange(1 << 20, dtype=cupy.uint8)
with kvikio.CuFile("/root/gpufile-clients/k.bin", "w") as f:
    f.write(a)
b = cupy.empty_like(a)
with kvikio.CuFile("/root/gpufile-clients/k.bin", "r") as f:
    f.read(b)
maps = open("/proc/self/maps").read()
ours = lib in maps
theirs = any("libcufile" in l and lib not in l for l in maps.splitlines())
print(f"compat preferred {kvikio.defaults.is_compat_mode_preferred()}, gpufile mapped {ours}, "
      f"another libcufile mapped {theirs}, data ok {bool((a == b).all())}")
EOF
)
  row "KvikIO 26.10 (Python)" "its tests for local files (test_basic_io, test_async_io, test_cufile_driver, test_numpy, test_defaults, test_mmap), KVIKIO_COMPAT_MODE=OFF" \
    "exit $rc: $summary" "$used" "-"
  grep -E '^(FAILED|ERROR)' "$log" | head -20
}

# ---- KvikIO's speed over gpufile against its own POSIX path ---------------------------------------
kvikio_speed() {
  big_file
  local probe=$OUT/kvikio_read.py
  cat >"$probe" <<'EOF'
import json, os, resource, sys, time
import cupy, kvikio, kvikio.defaults
path = sys.argv[1]
n = os.path.getsize(path)
a = cupy.empty(n, dtype=cupy.uint8)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def once():
    t0, c0 = time.perf_counter(), cpu()
    with kvikio.CuFile(path, "r") as f:
        got = f.read(a)
    dt = time.perf_counter() - t0
    assert got == n, got
    return n / dt / 2**30, (cpu() - c0) / (n / 2**30)
first = once()
steady = max((once() for _ in range(3)), key=lambda r: r[0])
print(json.dumps({"first": first, "steady": steady, "threads": kvikio.defaults.get("num_threads"),
                  "compat": str(kvikio.defaults.get("compat_mode"))}))
EOF
  local name env res
  for spec in "gpufile, default settings|KVIKIO_COMPAT_MODE=OFF" \
              "gpufile, KVIKIO_NTHREADS=16|KVIKIO_COMPAT_MODE=OFF KVIKIO_NTHREADS=16" \
              "POSIX, default settings|KVIKIO_COMPAT_MODE=ON" \
              "POSIX, KVIKIO_NTHREADS=16|KVIKIO_COMPAT_MODE=ON KVIKIO_NTHREADS=16"; do
    name=${spec%%|*}; env=${spec#*|}
    if [[ $name == gpufile* ]]; then
      res=$(env $env LD_PRELOAD=$LIB timeout 120 python3 "$probe" "$BIG" 2>&1 | tail -1)
    else
      res=$(env $env timeout 120 python3 "$probe" "$BIG" 2>&1 | tail -1)
    fi
    echo "kvikio read of a warm 4 GiB file, $name: $res" | tee -a "$OUT/kvikio-speed.log"
  done
  speed_of() {  # "first / steady GiB/s (CPU-s/GiB)" of one kvikio-speed.log line
    grep -F "$1: {" "$OUT/kvikio-speed.log" | sed 's/^[^{]*//' | python3 -c 'import json,sys
j = json.load(sys.stdin)
print("first call %.1f / steady %.1f GiB/s (CPU-s/GiB %.2f / %.2f)" % (j["first"][0], j["steady"][0], j["first"][1], j["steady"][1]))' 2>/dev/null || echo "?"
  }
  row "KvikIO 26.10 (Python)" "CuFile.read of a warm 4 GiB file into CuPy, KVIKIO_NTHREADS=16 (first call in a fresh process, then the best of 3)" \
    "-" "$(speed_of 'gpufile, KVIKIO_NTHREADS=16')" "$(speed_of 'POSIX, KVIKIO_NTHREADS=16')"
  row "KvikIO 26.10 (Python)" "the same with KvikIO's default settings (one thread)" \
    "-" "$(speed_of 'gpufile, default settings')" "$(speed_of 'POSIX, default settings')"
}

# ---- fio's libcufile engine ------------------------------------------------------------------------
fio_client() {
  local src=.peers/fio fio=/tmp/fio-build/fio
  if [ ! -x "$fio" ]; then
    rm -rf /tmp/fio-build && cp -r "$src" /tmp/fio-build
    (cd /tmp/fio-build &&
      ./configure --enable-libcufile --extra-cflags="-I$REPO/include -I/usr/local/cuda/include" \
        --extra-ldflags="-L$REPO/$B/src -L/usr/local/cuda/lib64 -L/usr/local/cuda/lib64/stubs -Wl,-rpath,$REPO/$B/src" \
        >"$OUT/fio-configure.log" 2>&1 &&
      grep -q 'libcufile.*yes' "$OUT/fio-configure.log" &&
      make -j"$(nproc)" >"$OUT/fio-build.log" 2>&1) || { row "fio 3.42" "build with --enable-libcufile" "build failed (fio-configure.log, fio-build.log)" "-" "-"; tail -20 "$OUT/fio-build.log" "$OUT/fio-configure.log"; return; }
  fi
  ldd "$fio" | grep -E 'cufile|cudart' | tee "$OUT/fio-ldd.log"
  local ok=0 failed=0 v bs
  local common=(--ioengine=libcufile --gpu_dev_ids=0 --direct=1 --thread --directory="$DATA"
                --group_reporting --output-format=json)
  for v in md5 crc32c sha256; do
    for bs in 1m 4k; do
      local size=256m; [ "$bs" = 4k ] && size=32m
      if timeout 180 "$fio" --name="verify-$v-$bs" "${common[@]}" --cuda_io=cufile --rw=write \
           --bs=$bs --size=$size --numjobs=4 --verify=$v --do_verify=1 \
           >"$OUT/fio-verify-$v-$bs.json" 2>"$OUT/fio-verify-$v-$bs.err" &&
         python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(any(x["error"] for x in j["jobs"]))' \
           "$OUT/fio-verify-$v-$bs.json"; then
        ok=$((ok + 1))
      else
        failed=$((failed + 1)); echo "fio verify $v bs=$bs failed:"; tail -5 "$OUT/fio-verify-$v-$bs.err"
      fi
    done
  done
  # Sequential reads, 4 jobs x 1 GiB, warm page cache: the cuFile path (direct=1, as the
  # engine demands; gpufile serves cached data from the page cache all the same) against fio's
  # own posix path (cuda_io=posix: buffered reads into pinned host memory, then cudaMemcpy).
  local bw_cufile bw_posix
  bw_of() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.2f" % (j["jobs"][0]["read"]["bw_bytes"] / 2**30))' "$1"; }
  local read=(--name=seqread --ioengine=libcufile --gpu_dev_ids=0 --thread --directory="$DATA"
              --group_reporting --output-format=json --rw=read --bs=1m --size=1g --numjobs=4
              --invalidate=0)  # fio drops the files' pages before each run by default
  timeout 180 "$fio" "${read[@]}" --cuda_io=posix --direct=0 >"$OUT/fio-read-layout.json" 2>&1
  cat "$DATA"/seqread.* >/dev/null; cat "$DATA"/seqread.* >/dev/null
  timeout 180 "$fio" "${read[@]}" --cuda_io=posix --direct=0 >"$OUT/fio-read-posix.json" 2>&1
  timeout 180 "$fio" "${read[@]}" --cuda_io=cufile --direct=1 >"$OUT/fio-read-cufile.json" 2>&1
  bw_cufile=$(bw_of "$OUT/fio-read-cufile.json" 2>/dev/null || echo "?")
  bw_posix=$(bw_of "$OUT/fio-read-posix.json" 2>/dev/null || echo "?")
  row "fio 3.42" "libcufile engine, cuda_io=cufile, direct=1, 4 jobs: write + verify (md5, crc32c, sha256; bs 1m and 4k)" \
    "$ok passed, $failed failed" "4 jobs x 1 GiB sequential reads, bs 1m, warm page cache: $bw_cufile GiB/s" "cuda_io=posix (buffered): $bw_posix GiB/s"
}

# ---- torch.cuda.gds --------------------------------------------------------------------------------
torch_client() {
  local res
  res=$(with_gpufile timeout 300 python3 - "$LIB" <<'EOF' 2>&1 | tail -1
import os, sys, time
import torch
from torch.cuda.gds import GdsFile, gds_register_buffer, gds_deregister_buffer
lib = sys.argv[1]
path = "/root/gpufile-clients/torch_gds.bin"
n = 1 << 30
src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
f = GdsFile(path, os.O_CREAT | os.O_RDWR)
f.save_storage(src.untyped_storage(), offset=0)
checks = []
def load(t, registered):
    if registered:
        gds_register_buffer(t.untyped_storage())
    t0 = time.perf_counter()
    f.load_storage(t.untyped_storage(), offset=0)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if registered:
        gds_deregister_buffer(t.untyped_storage())
    return n / dt / 2**30
dst = torch.empty_like(src)
speeds = {}
os.system(f"cat {path} > /dev/null; cat {path} > /dev/null")  # both paths read a warm file
for registered in (False, True):
    dst.zero_()
    first = load(dst, registered)
    checks.append(bool(torch.equal(src, dst)))
    speeds[registered] = max([first] + [load(dst, registered) for _ in range(2)])
def plain():
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as g:
        g.readinto(host.numpy())
    out = host.to("cuda")
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0) / 2**30, out
p = max(plain()[0] for _ in range(3))
maps = open("/proc/self/maps").read()
print(f"save/load 1 GiB: contents {'equal' if all(checks) else 'DIFFER'} (unregistered, registered); "
      f"load {speeds[False]:.2f} / {speeds[True]:.2f} GiB/s (unregistered / registered, warm, best of 3); "
      f"gpufile mapped {lib in maps}|pinned read + .to('cuda'): {p:.2f} GiB/s")
EOF
)
  row "torch.cuda.gds (torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null))" \
    "GdsFile.save_storage / load_storage of 1 GiB, registered and unregistered buffers" \
    "$([[ $res == *"contents equal"* && $res == *"gpufile mapped True"* ]] && echo passed || echo "FAILED: ${res:0:300}")" \
    "${res%%|*}" "${res#*|}"
}

# ---- fastsafetensors, GDS mode --------------------------------------------------------------------
fastsafetensors_client() {
  local res placeholder=""
  # fastsafetensors 0.5 takes its GDS path only where /dev/nvidia-fs0 exists (copier/gds.py:
  # a guard against NVIDIA's library closing fd 0 when nvidia-fs is half set up). gpufile needs
  # no nvidia-fs; an empty placeholder lets the loader take the path it would take on a DGX.
  if [ ! -e /dev/nvidia-fs0 ]; then touch /dev/nvidia-fs0 && placeholder=" (with an empty /dev/nvidia-fs0 placeholder: fastsafetensors insists on the node)"; fi
  res=$(with_gpufile timeout 420 python3 - "$LIB" <<'EOF' 2>&1 | tail -1
import os, sys, time
import torch
from safetensors.torch import save_file, load_file
from fastsafetensors import SafeTensorsFileLoader
lib = sys.argv[1]
path = "/root/gpufile-clients/model.safetensors"
if not os.path.exists(path):
    g = torch.Generator().manual_seed(0)
    tensors = {f"layer{i}.w": torch.randn(4096, 8192, generator=g, dtype=torch.float32).to(torch.bfloat16)
               for i in range(32)}  # 32 x 64 MiB = 2 GiB
    save_file(tensors, path)
os.system(f"cat {path} > /dev/null")
ref = load_file(path, device="cuda:0")
def load(nogds):
    loader = SafeTensorsFileLoader(None, "cuda:0", nogds=nogds)
    copier = loader.copier_class.__name__
    t0 = time.perf_counter()
    loader.add_filenames({0: [path]})
    fb = loader.copy_files_to_device()
    out = {k: fb.get_tensor(k).clone() for k in loader.get_keys()}
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    fb.close(); loader.close()
    same = all(torch.equal(out[k], ref[k]) for k in ref) and len(out) == len(ref)
    return os.path.getsize(path) / dt / 1e9, copier, same
gds = [load(False) for _ in range(3)]
posix = [load(True) for _ in range(3)]
maps = open("/proc/self/maps").read()
g = max(r[0] for r in gds); p = max(r[0] for r in posix)
print(f"GDS copier {gds[0][1]}, tensors {'equal' if all(r[2] for r in gds + posix) else 'DIFFER'}, "
      f"gpufile mapped {lib in maps}; {g:.2f} GB/s (best of 3, warm)|nogds ({posix[0][1]}): {p:.2f} GB/s")
EOF
)
  [ -n "$placeholder" ] && rm -f /dev/nvidia-fs0
  row "fastsafetensors 0.5.0" "SafeTensorsFileLoader(nogds=False) of a 2 GiB bf16 checkpoint, tensors checked against safetensors$placeholder" \
    "$([[ $res == *"tensors equal"* && $res == *"gpufile mapped True"* && $res == *"GDS copier GdsFileCopier"* ]] && echo passed || echo "FAILED: ${res:0:300}")" \
    "${res%%|*}" "${res#*|}"
}

echo "== gpufile clients: $ONLY ($(nvidia-smi -L 2>/dev/null | head -1))"
wants kvikio && kvikio_tests
wants kvikio-speed && kvikio_speed
wants fio && fio_client
wants torch && torch_client
wants fastsafetensors && fastsafetensors_client
echo; cat "$TABLE"
