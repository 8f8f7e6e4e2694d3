#!/usr/bin/env python3
"""HDF5 into and out of GPU memory: gpufile's HDF5 driver against the way h5py users do it
today (SEC2 into host memory, then a copy to the GPU), every number from one run on the GPU
machine, every byte checked.

    python3 bench/hdf5_gpu.py --plugin-dir DIR [--dir /tmp] [--size-gib 1 8] [--repeat 3]
                              [--chunks 256x1024 --row-elems 4096] [--json rows.json]

DIR holds libgpufile_hdf5.so (gpufile.hdf5.plugin_path(), or <build>/hdf5/plugins); needs h5py
(any wheel with HDF5 1.14 or 2.0), NumPy, CuPy and gpufile. GPU memory goes to HDF5 through
H5Dread/H5Dwrite of h5py's own libhdf5 (ctypes): a uint32 dataset, memory type = file type.

Cases per size, each in a fresh process (HDF5 picks the driver from the environment at start):
  contiguous dataset (n,):
    read  gpufile     H5Dread straight into a CuPy array (cold: page cache dropped first; warm)
    read  hdf5.read   gpufile.hdf5.read straight into a CuPy array, HDF5 not in the data path
    read  gpufile-host H5Dread through gpufile's driver into NumPy memory, then cupy.asarray
    read  sec2        H5Dread into NumPy memory, then cupy.asarray (the copy)       (cold; warm)
    write gpufile     H5Dwrite from a CuPy array, file closed (no fsync)
    write sec2        cupy.asnumpy, then H5Dwrite from NumPy memory, file closed
  chunked dataset (n / row_elems, row_elems), unfiltered, written once by SEC2:
    read  hdf5.read   gpufile.hdf5.read into a CuPy array: chunks read by gpufile into device
                      staging, rows placed by device-to-device copies  (cold; warm)
    read  sec2        H5Dread into NumPy memory (HDF5 assembles the chunks), then cupy.asarray

A read's time is H5Dread's (with the copy, for the cases through host memory): HDF5's open and
the destination's allocation are timed apart ("with open" adds them back), and a warm case reads
a second time in the same process (the steady state). The ceiling is a pinned host-to-device
copy of the same size through CuPy, measured in the same run. Every byte read is checked against
what was written. Without a GPU, the harness runs end to end
against the CUDA driver test double with bench/standin's CuPy stand-in (timings meaningless):
    GPUFILE_CUDA_LIBRARY=<build>/tests/support/fakecuda/libcuda.so.1 \
      PYTHONPATH=bench/standin:<gpufile on the path> python3 bench/hdf5_gpu.py ... --no-cold
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

from benchlib import pinned_ceiling

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


def warm_page_cache(path):
    """Reads the file through the page cache: a "warm" case must find it there, whatever the
    case before did (gpufile's cold reads use O_DIRECT and leave nothing cached)."""
    buf = bytearray(16 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def shape_of(spec):
    n = spec["n"]
    return (n,) if spec["layout"] == "contiguous" else (n // spec["row_elems"], spec["row_elems"])


def prepare_chunked(spec):
    """Writes the chunked dataset through SEC2 from host memory, a slab of rows at a time."""
    import h5py
    import numpy as np
    rows, cols = shape_of(spec)
    with h5py.File(spec["path"], "w", driver="sec2") as f:
        d = f.create_dataset("x", shape=(rows, cols), dtype="<u4", chunks=tuple(spec["chunks"]))
        step = max(spec["chunks"][0], (64 << 20) // (cols * 4))
        for r in range(0, rows, step):
            stop = min(rows, r + step)
            d[r:stop] = np.arange(r * cols, stop * cols, dtype=np.uint32).reshape(stop - r, cols)


def read_once(spec, lib, d, dev, host):
    """One read of the whole dataset into dev (through host memory for the host-then-GPU cases)."""
    import cupy as cp
    if spec["driver"] == "gpufile":
        dataset_io(lib.H5Dread, d, dev.data.ptr)
    elif spec["driver"] == "hdf5.read":
        import gpufile.hdf5
        gpufile.hdf5.read(d, dev)
    else:  # "sec2" or "gpufile-host": H5Dread into NumPy memory, then the copy users make
        dataset_io(lib.H5Dread, d, host.ctypes.data)
        dev = cp.asarray(host)
    cp.cuda.runtime.deviceSynchronize()
    return dev


def read_case(spec, lib):
    """Times HDF5's open with the destination's allocation, the first read, and (warm cases) a
    second read into the same memory: the first is what a fresh process sees, the second the
    steady state. Returns the array read and the three times (the second None when cold)."""
    import cupy as cp
    import h5py
    import numpy as np
    shape = shape_of(spec)
    t0 = time.perf_counter()
    with h5py.File(spec["path"], "r") as f:
        d = f["x"]
        host = np.empty(shape, dtype=np.uint32) if spec["driver"] in HOST_FIRST else None
        dev = cp.empty(shape, dtype=cp.uint32)
        cp.cuda.runtime.deviceSynchronize()
        t1 = time.perf_counter()
        dev = read_once(spec, lib, d, dev, host)
        t2 = time.perf_counter()
        again = None
        if not spec["cold"]:
            read_once(spec, lib, d, dev, host)
            again = time.perf_counter() - t2
    return dev, t1 - t0, t2 - t1, again


def worker(spec):
    """One case in this process; prints RESULT {json}."""
    import cupy as cp
    import h5py
    import numpy as np
    lib = libhdf5()
    path, op = spec["path"], spec["op"]
    if op == "prepare":
        prepare_chunked(spec)
        print("RESULT " + json.dumps(dict(spec, ok=True)), flush=True)
        return
    if op == "ceiling":
        print("RESULT " + json.dumps(dict(spec, ok=True, gib_s=pinned_ceiling(
            int(spec["size_gib"] * GIB)))), flush=True)
        return
    n = int(np.prod(shape_of(spec)))
    expected = cp.arange(n, dtype=cp.uint32)
    cp.cuda.runtime.deviceSynchronize()
    if op == "read":
        if spec["cold"]:
            drop_caches()
        else:
            warm_page_cache(path)
        dev, opening, seconds, again = read_case(spec, lib)
        ok = bool(cp.array_equal(dev.reshape(-1), expected))
        extra = dict(open_s=opening, with_open_gib_s=n * 4 / GIB / (opening + seconds),
                     steady_gib_s=n * 4 / GIB / again if again else None)
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
        extra = {}
        with h5py.File(path, "r", driver="sec2") as f:
            ok = bool(np.array_equal(f["x"][...], np.arange(n, dtype=np.uint32)))
    result = dict(spec, seconds=seconds, gib_s=n * 4 / GIB / seconds, ok=ok, **extra)
    if spec["driver"] in ("gpufile", "gpufile-host"):
        result["counters"] = counters(spec["plugin_dir"])
    print("RESULT " + json.dumps(result), flush=True)


def run_case(args, size_gib, **spec):
    spec.update(n=int(size_gib * GIB) // 4, size_gib=size_gib,
                plugin_dir=os.path.abspath(args.plugin_dir), row_elems=args.row_elems,
                chunks=[int(c) for c in args.chunks.split("x")])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HDF5_")}
    if spec["driver"] in ("gpufile", "gpufile-host"):
        env.update(HDF5_PLUGIN_PATH=spec["plugin_dir"], HDF5_DRIVER="gpufile")
        if args.config:
            env["HDF5_DRIVER_CONFIG"] = args.config
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "worker", json.dumps(spec)],
                       env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return dict(spec, ok=False, error=(p.stdout + p.stderr)[-2000:])


# The cases that read into host memory through HDF5 and then copy to the GPU.
HOST_FIRST = ("sec2", "gpufile-host")

# (op, layout, cold, driver) in the table's order.
TABLE = [(op, layout, cold, driver)
         for op, layout, cold in (("read", "contiguous", True), ("read", "contiguous", False),
                                  ("read", "chunked", True), ("read", "chunked", False),
                                  ("write", "contiguous", False))
         for driver in ("gpufile", "hdf5.read", "gpufile-host", "sec2")]


def cases_of_one_size(args, size_gib):
    contiguous = os.path.join(args.dir, "gpufile_hdf5_bench.h5")
    chunked = os.path.join(args.dir, "gpufile_hdf5_bench_chunked.h5")
    colds = (False,) if args.no_cold else (True, False)
    rows = [run_case(args, size_gib, op="ceiling", layout="-", driver="-", path="", cold=False)]
    prepared = run_case(args, size_gib, op="prepare", layout="chunked", driver="sec2",
                        path=chunked, cold=False)
    if not prepared["ok"]:
        return [prepared]
    for _ in range(args.repeat):
        for driver in ("gpufile", "sec2"):   # writes first: each leaves the file to read
            rows.append(run_case(args, size_gib, op="write", layout="contiguous", driver=driver,
                                 path=contiguous, cold=False))
            for cold in colds:
                readers = (driver, "hdf5.read", "gpufile-host") if driver == "gpufile" else (driver,)
                for reader in readers:
                    rows.append(run_case(args, size_gib, op="read", layout="contiguous",
                                         driver=reader, path=contiguous, cold=cold))
        for driver in ("hdf5.read", "sec2"):
            for cold in colds:
                rows.append(run_case(args, size_gib, op="read", layout="chunked", driver=driver,
                                     path=chunked, cold=cold))
    os.unlink(contiguous)
    os.unlink(chunked)
    return rows


def median_of(rs, key):
    values = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(values) if values else None


def print_table(rows, args):
    """One line per case: the first read of a fresh process (median, every run, share of the
    pinned ceiling of the same size), the same read with HDF5's open and the destination's
    allocation, and a second read in the same process (warm only)."""
    print(f"| size | case | layout | path | first read GiB/s (median of {args.repeat}) | all | "
          "of pinned H2D | with open | second read | bytes checked |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in args.size_gib:
        ceiling = median_of([r for r in rows if r["size_gib"] == size and r["op"] == "ceiling"],
                            "gib_s")
        for op, layout, cold, driver in TABLE:
            rs = [r for r in rows if r["size_gib"] == size and r["op"] == op
                  and r.get("layout") == layout and r["driver"] == driver and r.get("cold") == cold]
            if not rs:
                continue
            first = median_of(rs, "gib_s") or 0.0
            share = f"{100 * first / ceiling:.0f}%" if ceiling and op == "read" else "-"
            cells = [median_of(rs, k) for k in ("with_open_gib_s", "steady_gib_s")]
            cells = [f"{c:.2f}" if c is not None else "-" for c in cells]
            case = f"{op} {'cold' if cold else 'warm'}" if op == "read" else op
            every = ", ".join(f"{r.get('gib_s', 0.0):.2f}" for r in rs)
            print(f"| {size:g} GiB | {case} | {layout} | {driver} | {first:.2f} | {every} | {share} | "
                  f"{cells[0]} | {cells[1]} | {'ok' if all(r['ok'] for r in rs) else 'FAILED'} |")
        if ceiling:
            print(f"| {size:g} GiB | pinned host-to-device (CuPy, best of 5) | - | - | "
                  f"{ceiling:.2f} | | 100% | | | |")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        return worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--size-gib", type=float, nargs="+", default=[4],
                    help="dataset sizes, each a run of every case (the issue asks for 1 and 8)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chunks", default="256x1024",
                    help="chunk shape (rows x elements) of the chunked dataset")
    ap.add_argument("--row-elems", type=int, default=4096,
                    help="uint32 elements per row of the chunked dataset")
    ap.add_argument("--config", default="", help="the driver's configuration string")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold reads (no root)")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args()
    rows = []
    for size in args.size_gib:
        rows += cases_of_one_size(args, size)
    print_table(rows, args)
    for r in rows:
        if not r["ok"]:
            print("FAILED:", json.dumps(r)[:3000])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
