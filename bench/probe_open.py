# Probe: what a fresh process pays to open gpufile's driver, and the first and second load of a
# checkpoint after it, for a few worker / slab settings. Each setting in its own process.
# Usage: probe_open.py FILE [WORKERS,SLAB_KB,SLABS ...]
import json, os, subprocess, sys, time
CHILD = r"""
import os, sys, time, json, torch
import gpufile, gpufile.safetensors as gst
path = sys.argv[1]
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
def t(): torch.cuda.synchronize(); return time.perf_counter()
out = {}
t0 = t(); gpufile.driver_open(); out["open"] = t() - t0
for rep in range(3):
    t0 = t(); d = gst.load_file(path, device="cuda:0"); out[f"load{rep}"] = t() - t0; del d
print(json.dumps(out))
"""
path = sys.argv[1]
size = os.path.getsize(path)
# (GPUFILE_WORKERS, GPUFILE_SLAB_SIZE_KB, GPUFILE_SLABS_PER_WORKER); 0 workers = automatic.
SETTINGS = [tuple(int(x) for x in s.split(",")) for s in sys.argv[2:]] or [
    (0, 4096, 4), (0, 4096, 2), (0, 2048, 4), (0, 8192, 2), (4, 4096, 4), (8, 4096, 4),
    (12, 4096, 4), (16, 4096, 4)]
for where in ("warm", "shm"):
    p = path if where == "warm" else "/dev/shm/" + os.path.basename(path)
    if where == "shm": subprocess.run(["cp", path, p], check=True)
    subprocess.run(f"cat {p} > /dev/null", shell=True)
    for workers, slab_kb, slabs in SETTINGS:
        env = dict(os.environ, GPUFILE_WORKERS=str(workers), GPUFILE_SLAB_SIZE_KB=str(slab_kb), GPUFILE_SLABS_PER_WORKER=str(slabs))
        r = subprocess.run([sys.executable, "-c", CHILD, p], env=env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            print(where, workers, slab_kb, "failed", r.stderr[-500:]); continue
        o = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{where} workers {workers:2d} slab {slab_kb:5d} KiB x{slabs}: open {o['open']*1e3:6.1f} ms, "
              + ", ".join(f"load {o[k]*1e3:6.1f} ms ({size/1e9/o[k]:5.1f} GB/s)" for k in ("load0", "load1", "load2")), flush=True)
    if where == "shm": os.remove(p)
