#!/usr/bin/env python3
"""HDF5 into and out of GPU memory: gpufile's HDF5 driver against the way h5py users do it
today (SEC2 into host memory, then a copy to the GPU), every number from one run on the GPU
machine, every byte checked.

    python3 bench/hdf5_gpu.py --plugin-dir DIR [--dir /tmp] [--size-gib 4] [--repeat 3]

DIR holds libgpufile_hdf5.so (gpufile.hdf5.plugin_path(), or <build>/hdf5/plugins); needs h5py
(any wheel with HDF5 1.14 or 2.0), NumPy and CuPy. GPU memory goes to HDF5 through H5Dread/
H5Dwrite of h5py's own libhdf5 (ctypes): a contiguous uint32 dataset, memory type = file type.

Cases, each in a fresh process (HDF5 picks the driver from the environment at start):
  read  gpufile  H5Dread straight into a CuPy array (cold: page cache dropped first; warm)
  read  sec2     H5Dread into NumPy memory, then cupy.asarray (the copy)       (cold; warm)
  write gpufile  H5Dwrite from a CuPy array, file closed (no fsync)
  write sec2     cupy.asnumpy, then H5Dwrite from NumPy memory, file closed
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

GIB = 1 << 30


def libhdf5():
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if path.rsplit("/", 1)[-1].startswith(("libhdf5-", "libhdf5.so")):
                lib = ctypes.CDLL(path)
                for fn in (lib.H5Dread, lib.H5Dwrite):
                    fn.restype = ctypes.c_int
                    fn.argtypes = [ctypes.c_int64] * 5 + [ctypes.c_void_p]
                return lib
    raise RuntimeError("h5py's libhdf5 is not loaded")


def dataset_io(fn, dset, ptr):
    t = dset.id.get_type()
    if fn(dset.id.id, t.id, 0, 0, 0, ptr) < 0:
        raise RuntimeError(f"{fn.__name__} failed")


def counters(plugin_dir):
    lib = ctypes.CDLL(os.path.join(plugin_dir, "libgpufile_hdf5.so"))
    names = ["files_opened", "reads", "writes", "bytes_read", "bytes_written",
             "device_bytes_read", "device_bytes_written"]
    out = (ctypes.c_uint64 * len(names))()
    lib.gpufile_hdf5_get_counters(out)
    return dict(zip(names, out))


def worker(spec):
    """One case in this process; prints RESULT {json}."""
    import cupy as cp
    import h5py
    import numpy as np
    lib = libhdf5()
    n, path, op = spec["n"], spec["path"], spec["op"]
    expected = cp.arange(n, dtype=cp.uint32)
    cp.cuda.runtime.deviceSynchronize()
    if op == "read":
        if spec["cold"]:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        t0 = time.perf_counter()
        with h5py.File(path, "r") as f:
            if spec["driver"] == "gpufile":
                dev = cp.empty(n, dtype=cp.uint32)
                dataset_io(lib.H5Dread, f["x"], dev.data.ptr)
            else:
                host = np.empty(n, dtype=np.uint32)
                dataset_io(lib.H5Dread, f["x"], host.ctypes.data)
                dev = cp.asarray(host)
        cp.cuda.runtime.deviceSynchronize()
        seconds = time.perf_counter() - t0
        ok = bool(cp.array_equal(dev, expected))
    else:
        t0 = time.perf_counter()
        with h5py.File(path, "w") as f:
            d = f.create_dataset("x", shape=(n,), dtype="<u4")
            if spec["driver"] == "gpufile":
                dataset_io(lib.H5Dwrite, d, expected.data.ptr)
            else:
                host = cp.asnumpy(expected)
                dataset_io(lib.H5Dwrite, d, host.ctypes.data)
        seconds = time.perf_counter() - t0
        with h5py.File(path, "r", driver="sec2") as f:
            ok = bool(np.array_equal(f["x"][...], np.arange(n, dtype=np.uint32)))
    result = dict(spec, seconds=seconds, gib_s=n * 4 / GIB / seconds, ok=ok)
    if spec["driver"] == "gpufile":
        result["counters"] = counters(spec["plugin_dir"])
    print("RESULT " + json.dumps(result), flush=True)


def run_case(args, **spec):
    spec.update(n=int(args.size_gib * GIB) // 4, plugin_dir=os.path.abspath(args.plugin_dir))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HDF5_")}
    if spec["driver"] == "gpufile":
        env.update(HDF5_PLUGIN_PATH=spec["plugin_dir"], HDF5_DRIVER="gpufile")
        if args.config:
            env["HDF5_DRIVER_CONFIG"] = args.config
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "worker", json.dumps(spec)],
                       env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return dict(spec, ok=False, error=(p.stdout + p.stderr)[-2000:])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        return worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--size-gib", type=float, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--config", default="", help="the driver's configuration string")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold reads (no root)")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args()
    path = os.path.join(args.dir, "gpufile_hdf5_bench.h5")
    rows = []
    for i in range(args.repeat):
        for driver in ("gpufile", "sec2"):   # writes first: each leaves the file to read
            rows.append(run_case(args, op="write", driver=driver, path=path, cold=False))
            for cold in ((False,) if args.no_cold else (True, False)):
                rows.append(run_case(args, op="read", driver=driver, path=path, cold=cold))
    os.unlink(path)
    print(f"| case | driver | GiB/s (median of {args.repeat}) | all | bytes checked |")
    print("|---|---|---|---|---|")
    for op, cold in (("read", True), ("read", False), ("write", False)):
        for driver in ("gpufile", "sec2"):
            rs = [r for r in rows if r["op"] == op and r["driver"] == driver
                  and r.get("cold") == cold]
            speeds = [r.get("gib_s", 0.0) for r in rs]
            if not rs:
                continue
            case = f"{op} {'cold' if cold else 'warm'}" if op == "read" else op
            print(f"| {case} | {driver} | {statistics.median(speeds):.2f} | "
                  f"{', '.join(f'{s:.2f}' for s in speeds)} | "
                  f"{'ok' if all(r['ok'] for r in rs) else 'FAILED'} |")
    for r in rows:
        if not r["ok"]:
            print("FAILED:", json.dumps(r)[:3000])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
