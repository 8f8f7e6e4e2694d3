#!/usr/bin/env python3
"""A Zarr v3 array on a local disk read whole into GPU memory (issue 12): gpufile's store
(gpufile.zarr.GpufileStore) against zarr's LocalStore and KvikIO's GDSStore, every number from
one run, every byte checked.

    python3 bench/zarr_gpu.py [--size-gib 4] [--chunk-mib 64] [--dir /root] [--repeat 1]
                              [--cases ...] [--json rows.json]

Needs zarr-python 3, NumPy and CuPy (or bench/standin's stand-in), gpufile; KvikIO where
present. The array (uint8, one dimension, uncompressed chunks of --chunk-mib: the IO-bound
case; decompression would be zarr's codecs' time, the same for every store) is written once
with zarr's LocalStore under --dir and read twice so the page cache holds it (a warm read, as
the other harnesses' headline cases).

Cases, each in a fresh process (first read: CUDA context made and zarr and the store's module
imported before the timer, store and array opened inside it; second read in the same process;
a second table splits each read into opening the store, the array, and reading it):
  ceiling            pinned host-to-device copy of the same size through CuPy, best of 5
  gpufile            zarr.config.enable_gpu(); open_array(GpufileStore(dir))[:]  -> CuPy array
  localstore-gpu     zarr.config.enable_gpu(); open_array(LocalStore(dir))[:]   -> CuPy array
                     (zarr reads each chunk into host memory, then copies it to the GPU)
  localstore+cupy    open_array(LocalStore(dir))[:] into NumPy, then cupy.asarray (the naive way)
  kvikio             zarr.config.enable_gpu(); open_array(kvikio.zarr.GDSStore(dir))[:]

Without a GPU, against the CUDA driver test double and the CuPy stand-in, only the
localstore+cupy case runs (zarr's GPU buffers need real CuPy; the others fail and say so):
    GPUFILE_CUDA_LIBRARY=<build>/tests/support/fakecuda/libcuda.so.1 \\
      PYTHONPATH=bench/standin:<gpufile on the path> python3 bench/zarr_gpu.py --size-gib 0.05 --dir /tmp
"""
import argparse
import json
import os
import shutil
import sys
import time

from benchlib import installed, pinned_ceiling, run_fresh, two_reads_cells

GIB = 1 << 30
MIB = 1 << 20
SEED = 34
CASES = ("gpufile", "localstore-gpu", "localstore+cupy", "kvikio")


def expected_bytes(size):
    import numpy as np
    return np.random.default_rng(SEED).integers(0, 256, size, dtype=np.uint8)


def array_dir(args):
    return os.path.join(args.dir, f"gpufile_zarr_bench_{args.size_gib:g}g_{args.chunk_mib}m.zarr")


def write_array(args, size):
    """The array under --dir, written once with zarr's own LocalStore (no compression)."""
    import zarr
    path = array_dir(args)
    stamp = os.path.join(path, ".complete")
    if os.path.exists(stamp):
        return path
    shutil.rmtree(path, ignore_errors=True)
    z = zarr.create_array(zarr.storage.LocalStore(path), shape=(size,), chunks=(args.chunk_mib * MIB,),
                          dtype="uint8", compressors=None, filters=None)
    z[:] = expected_bytes(size)
    open(stamp, "w").close()
    return path


def warm(path):
    for _ in range(2):
        for root, _dirs, files in os.walk(path):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    while f.read(64 * MIB):
                        pass


def open_store(case, path):
    import zarr
    if case == "gpufile":
        from gpufile.zarr import GpufileStore
        return GpufileStore(path, mode="r")
    if case == "kvikio":
        import kvikio.zarr
        return kvikio.zarr.GDSStore(path, read_only=True)
    return zarr.storage.LocalStore(path, read_only=True)


def import_store_modules(case):
    """zarr and the case's store module: a process imports them once, before any read."""
    import zarr  # noqa: F401
    if case == "gpufile":
        import gpufile.zarr  # noqa: F401
    elif case == "kvikio":
        import kvikio.zarr  # noqa: F401


def read_whole(case, path, phases):
    """The whole array into GPU memory; `phases` gets the seconds of each step."""
    import cupy as cp
    import zarr
    if case != "localstore+cupy":
        zarr.config.enable_gpu()
    t0 = time.perf_counter()
    store = open_store(case, path)
    t1 = time.perf_counter()
    array = zarr.open_array(store, mode="r")
    t2 = time.perf_counter()
    out = array[:]
    if case == "localstore+cupy":
        out = cp.asarray(out)
    cp.cuda.runtime.deviceSynchronize()
    phases.update(open_store_s=t1 - t0, open_array_s=t2 - t1, read_s=time.perf_counter() - t2)
    return out


def worker(spec):
    if spec["case"] == "ceiling":
        print("RESULT " + json.dumps(dict(spec, ok=True, ceiling_gib_s=pinned_ceiling(spec["size"]))),
              flush=True)
        return
    import cupy as cp
    size = spec["size"]
    expected = cp.asarray(expected_bytes(size))
    t0 = time.perf_counter()
    import_store_modules(spec["case"])
    result = dict(spec, checked_bytes=0, import_s=time.perf_counter() - t0)
    for label in ("first", "second"):
        cp.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        phases = {}
        out = read_whole(spec["case"], spec["path"], phases)
        seconds = time.perf_counter() - t0
        result.update({f"{label}_{k}": v for k, v in phases.items()})
        on_gpu = isinstance(out, cp.ndarray)
        ok = on_gpu and out.shape == (size,) and bool(cp.array_equal(out, expected))
        result.update({label + "_s": seconds, label + "_gib_s": size / GIB / seconds,
                       label + "_ok": ok, label + "_type": type(out).__module__})
        result["checked_bytes"] += size if ok else 0
        del out
    result["ok"] = result["first_ok"] and result["second_ok"]
    print("RESULT " + json.dumps(result), flush=True)


def run_case(spec):
    return run_fresh(__file__, spec)


def print_table(rows, args):
    ceiling = next((r.get("ceiling_gib_s") for r in rows if r["case"] == "ceiling"), None)
    print(f"{args.size_gib:g} GiB Zarr v3 array (uint8, uncompressed {args.chunk_mib} MiB chunks, "
          f"warm page cache) read whole into GPU memory; each case a fresh process\n")
    print("| case | first read GiB/s | second read GiB/s | % of pinned H2D (first / second) | bytes checked |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["case"] == "ceiling":
            continue
        cells = two_reads_cells(r, ceiling)
        if len(cells) == 3:
            cells.append(f"2 x {r['size']} ok" if r["ok"] else
                         f"MISMATCH or not on the GPU ({r.get('first_type')})")
        print("| " + " | ".join([r["case"]] + cells) + " |")
    if ceiling:
        print(f"| pinned host-to-device (CuPy, best of 5) | {ceiling:.2f} | | 100% | |")
    print("\nWhere each read's time went, ms: importing zarr and the store's module (once, before "
          "the first read), then per read: opening the store, the array, reading it\n")
    print("| case | import | first: store / array / read | second: store / array / read |")
    print("|---|---|---|---|")
    for r in rows:
        if "first_read_s" not in r:
            continue
        step = lambda label: " / ".join(f"{1000 * r[f'{label}_{k}']:.1f}"
                                        for k in ("open_store_s", "open_array_s", "read_s"))
        print(f"| {r['case']} | {1000 * r['import_s']:.0f} | {step('first')} | {step('second')} |")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        return worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=4.0)
    ap.add_argument("--chunk-mib", type=int, default=64)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--keep", action="store_true", help="keep the array for a later run")
    ap.add_argument("--json")
    args = ap.parse_args()
    size = int(args.size_gib * GIB)
    path = write_array(args, size)
    warm(path)
    rows = [run_case(dict(case="ceiling", size=size))]
    try:
        for case in args.cases.split(","):
            if case == "kvikio" and not installed("kvikio"):
                rows.append(dict(case=case, skipped="kvikio not installed"))
                continue
            for _ in range(args.repeat):
                rows.append(run_case(dict(case=case, size=size, path=path, chunk_mib=args.chunk_mib)))
            print(f"  {case}: done", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
    print_table(rows, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
