#!/usr/bin/env python3
"""Side-by-side benchmark of gpufile and its peers, every number taken in ONE run on the GPU machine.

    python3 bench/side_by_side.py --build build/gpu --out $OUT [--size-gib 4] [--quick]

(bench/side-by-side-run.sh installs the peers' wheels and calls this.) It measures:

- ceilings: pinned and pageable copies host<->device, dd O_DIRECT read and write of the disk,
  the page cache read by all cores, the file system written by 1 and by all cores;
- sequential 4 GiB reads into the GPU (cold ext4, warm page cache, /dev/shm) and writes from the
  GPU (ext4 + fsync, /dev/shm), by: gpufile (one cuFileRead / cuFileWrite), KvikIO (POSIX compat
  mode, threads and task size tuned to its best), NVIDIA's libcufile, torch.cuda.gds, the naive
  loop (pread into pinned memory + copy) and the pageable loop (pread into malloc'd memory + copy);
- a sweep of IO sizes (4 KiB..64 MiB) x application threads (1..16) of synchronous reads from the
  warm page cache: gpufile through the cuFile API (`gpufile bench -x 0`), the naive loop
  (`gpufile bench -x 2 -O 1`: pread through the page cache into pinned memory + copy), and the
  same Python loop over KvikIO and over gpufile's Python binding;
- 4 KiB and 64 KiB random reads: IOPS and p50/p99 latency, same four.

Each measurement runs in its own process (page cache dropped between calls where the case says
cold). Output: OUT/side_by_side.md (the tables), .json (every row), side_by_side_sweep.png.
"""
import argparse
import ctypes
import json
import os
import platform
import resource
import shutil
import sys
import threading
import time

import benchlib
from benchlib import GIB, KIB, MIB, cpu_seconds, human

SWEEP_IO = [4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB]
SWEEP_THREADS = [1, 4, 16]
RANDOM_IO = [4 * KIB, 64 * KIB]
RANDOM_THREADS = [1, 8, 16]
KVIKIO_THREADS = [4, 8, 16]
KVIKIO_TASKS = [MIB, 4 * MIB, 16 * MIB]


# --------------------------------------------------------------------------------------------
# Workers: run in a child process (`side_by_side.py worker JSON`), print one JSON line.

def cuda_buffer(nbytes):
    import torch
    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")


def device_array(nbytes, kind):
    """(buffer, synchronise) of GPU memory: a torch tensor, a CuPy array, or "cuda" memory from
    the driver itself (benchlib.DriverArray); "numpy" is host memory."""
    if kind == "cuda":
        a = benchlib.DriverArray(nbytes)
        return a, a.synchronize
    if kind == "cupy":
        import cupy
        return cupy.empty(nbytes, dtype=cupy.uint8), cupy.cuda.runtime.deviceSynchronize
    if kind == "numpy":
        import numpy
        return numpy.empty(nbytes, dtype=numpy.uint8), lambda: None
    import torch
    return cuda_buffer(nbytes), torch.cuda.synchronize


def kvikio_whole_once(f, buf, size, write, target):
    """One timed KvikIO pread / pwrite of the whole file (with fsync after a write): secs, cpu."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    n = (f.pwrite(buf, size, 0) if write else f.pread(buf, size, 0)).get()
    if write:
        fd = os.open(target, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    if n != size:
        raise RuntimeError(f"KvikIO moved {n} of {size} bytes")
    return secs, cpu


def cufile_served(f, buf, size):
    """Which libcufile this process runs on, and whether it served a read: after the timed
    reads, level-1 statistics are switched on and one more read is counted."""
    lib = benchlib.loaded_cufile()
    out = {"libcufile_mapped": benchlib.mapped_libcufile()}
    if benchlib.cufile_stats_on(lib):
        before = benchlib.cufile_read_stats(lib)
        f.pread(buf, size, 0).get()
        after = benchlib.cufile_read_stats(lib)
        if before and after:
            out["cufile_reads"] = after[0] - before[0]
            out["cufile_read_bytes"] = after[1] - before[1]
    return out


def worker_kvikio_whole(spec):
    """KvikIO's own parallel read/write of the whole file (threads and task size from the env).
    The first call of a process pays for KvikIO's bounce buffers and thread pool; with
    spec["repeats"] the same process then reads that many more times ("more": secs, cpu each).
    spec["array"]: "torch" (default) or "cupy" memory. spec["verify"]: report which libcufile
    the process runs on and how many reads it counted ("served")."""
    import kvikio
    import kvikio.defaults
    path, size, write = spec["path"], spec["size"], spec["write"]
    buf, synchronise = device_array(size, spec.get("array", "torch"))
    target = path + ".out" if write else path
    synchronise()
    with kvikio.CuFile(target, "w" if write else "r") as f:
        secs, cpu = kvikio_whole_once(f, buf, size, write, target)
        more = [kvikio_whole_once(f, buf, size, write, target) for _ in range(spec.get("repeats", 0))]
        served = cufile_served(f, buf, size) if spec.get("verify") else None
    if write:
        os.unlink(target)
    d = kvikio.defaults
    note = f"compat={d.get('compat_mode')}, threads={d.get('num_threads')}, task={human(d.get('task_size'))}"
    out = {"bytes": size, "secs": secs, "cpu": cpu, "note": note, "kvikio": kvikio.__version__,
           "more": [{"secs": s, "cpu": c} for s, c in more]}
    if served is not None:
        out["served"] = served
    return out


def worker_libcufile(spec):
    """NVIDIA's libcufile, called through ctypes exactly as a cuFile program would."""
    lib_path = spec["lib"]
    lib = ctypes.CDLL(lib_path)

    class Err(ctypes.Structure):
        _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]

    class Handle(ctypes.Union):
        _fields_ = [("fd", ctypes.c_int), ("handle", ctypes.c_void_p)]

    class Descr(ctypes.Structure):  # CUfileDescr_t (24 bytes): type @0, handle @8, fs_ops @16
        _fields_ = [("type", ctypes.c_int), ("handle", Handle), ("fs_ops", ctypes.c_void_p)]

    assert ctypes.sizeof(Descr) == 24 and Descr.handle.offset == 8

    for name in ("cuFileDriverOpen", "cuFileHandleRegister"):
        getattr(lib, name).restype = Err
    lib.cuFileRead.restype = lib.cuFileWrite.restype = ctypes.c_ssize_t
    path, size, write = spec["path"], spec["size"], spec["write"]
    buf = cuda_buffer(size)
    e = lib.cuFileDriverOpen()
    if e.err != 0:
        return {"error": f"cuFileDriverOpen: error {e.err}"}
    target = path + ".out" if write else path
    flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC if write else os.O_RDONLY) | os.O_DIRECT
    fd = os.open(target, flags, 0o644)
    d = Descr(type=1)  # CU_FILE_HANDLE_TYPE_OPAQUE_FD
    d.handle.fd = fd
    handle = ctypes.c_void_p()
    e = lib.cuFileHandleRegister(ctypes.byref(handle), ctypes.byref(d))
    if e.err != 0:
        os.close(fd)
        if write:
            os.unlink(target)
        return {"error": f"cuFileHandleRegister fails: error {e.err}"}
    c0, t0 = cpu_seconds(), time.perf_counter()
    call = lib.cuFileWrite if write else lib.cuFileRead
    n = call(handle, ctypes.c_void_p(buf.data_ptr()), ctypes.c_size_t(size), ctypes.c_long(0),
             ctypes.c_long(0))
    if write:
        os.fsync(fd)
    secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    os.close(fd)
    if write:
        os.unlink(target)
    if n != size:
        return {"error": f"cuFile{'Write' if write else 'Read'} returned {n}"}
    return {"bytes": size, "secs": secs, "cpu": cpu}


def worker_torch_gds(spec):
    """torch.cuda.gds: GdsFile.load_storage / save_storage (libcufile underneath)."""
    import torch
    path, size, write = spec["path"], spec["size"], spec["write"]
    buf = cuda_buffer(size)
    target = path + ".out" if write else path
    flags = (os.O_RDWR | os.O_CREAT if write else os.O_RDONLY) | os.O_DIRECT
    try:
        f = torch.cuda.gds.GdsFile(target, flags)
    except Exception as e:  # the expected result on a machine without GPUDirect Storage
        if write and os.path.exists(target):
            os.unlink(target)
        return {"error": f"GdsFile: {str(e).splitlines()[0][:120]}"}
    storage = buf.untyped_storage()
    c0, t0 = cpu_seconds(), time.perf_counter()
    (f.save_storage if write else f.load_storage)(storage, 0)
    torch.cuda.synchronize()
    secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    del f
    if write:
        os.unlink(target)
    return {"bytes": size, "secs": secs, "cpu": cpu}


def open_reader(lib, path):
    """(read(view, n, off) -> bytes read, close()) for the Python loop over `lib`."""
    if lib == "kvikio":
        import kvikio
        f = kvikio.CuFile(path, "r")
        return (lambda view, n, off: f.read(view, n, off)), f.close
    import gpufile
    f = gpufile.open(path, "r")
    return (lambda view, n, off: f.read(view, n, off)), f.close


def worker_loop(spec):
    """THREADS Python threads, each issuing synchronous reads of IO bytes for SECONDS seconds:
    sequential over its own slice of the file, or at random IO-aligned offsets."""
    import random
    path, io, threads, seconds = spec["path"], spec["io"], spec["threads"], spec["seconds"]
    size = os.path.getsize(path)
    buf = cuda_buffer(io * threads)
    views = [buf[i * io:(i + 1) * io] for i in range(threads)]
    read, close = open_reader(spec["lib"], path)
    read(views[0], io, 0)  # first call: driver open, handle registration
    latencies = [[] for _ in range(threads)]
    moved = [0] * threads
    errors = []
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]
    slots = size // io

    def run(i):
        rng = random.Random(1000 + i)
        first, count = slots * i // threads, max(1, slots * (i + 1) // threads - slots * i // threads)
        k, lat, view = 0, latencies[i], views[i]
        start.wait()
        while True:
            slot = rng.randrange(slots) if spec["random"] else first + k % count
            t = time.perf_counter_ns()
            n = read(view, io, slot * io)
            lat.append(time.perf_counter_ns() - t)
            if n != io:
                errors.append(f"short read {n}")
                return
            moved[i] += n
            k += 1
            if time.perf_counter() >= stop_at[0]:
                return

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    c0, t0 = cpu_seconds(), time.perf_counter()
    stop_at[0] = t0 + seconds
    start.wait()
    for t in pool:
        t.join()
    secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    close()
    if errors:
        raise RuntimeError(errors[0])
    lat = sorted(x for per in latencies for x in per)
    pick = lambda p: lat[max(0, min(len(lat) - 1, int(p * len(lat) + 0.999999) - 1))] / 1000
    return {"bytes": sum(moved), "secs": secs, "cpu": cpu, "ops": len(lat),
            "p50_us": pick(0.5), "p99_us": pick(0.99), "max_us": lat[-1] / 1000}


WORKERS = {"kvikio-whole": worker_kvikio_whole, "libcufile": worker_libcufile,
           "torch-gds": worker_torch_gds, "loop": worker_loop}


def worker_main(arg):
    spec = json.loads(arg)
    try:
        out = WORKERS[spec["kind"]](spec)
    except Exception as e:  # reported as the row's result, not a crash of the whole run
        out = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
    print("RESULT " + json.dumps(out), flush=True)


# --------------------------------------------------------------------------------------------
# The parent: runs every measurement, collects rows, writes the report.

class Run:
    def __init__(self, args):
        self.args = args
        self.rows = []
        self.ceilings = {}
        self.shell = benchlib.Shell(os.path.join(args.out, "side_by_side.log"))
        self.say, self.sh = self.shell.say, self.shell.run
        self.compare = os.path.join(args.build, "bench", "gpufile_compare")
        self.gpufile = os.path.join(args.build, "cli", "gpufile")

    def drop_caches(self):
        benchlib.drop_caches()

    def add(self, case, loader, res, ceiling=None, **extra):
        if "secs" in res and not res.get("bytes"):
            res = {"error": f"moved no data in {res['secs']:.2f} s"}
        row = {"case": case, "loader": loader, **extra, **res}
        if "secs" in res and res.get("secs"):
            row["gib_s"] = res["bytes"] / GIB / res["secs"]
            row["cpu_s_per_gib"] = res["cpu"] / (res["bytes"] / GIB) if res.get("cpu") is not None else None
            if ceiling:
                row["ceiling"] = ceiling
                row["of_ceiling"] = row["gib_s"] / self.ceilings[ceiling]
        self.rows.append(row)
        shown = f"{row['gib_s']:8.2f} GiB/s" if "gib_s" in row else f"  {row.get('error', '?')}"
        where = f" {human(extra['io'])} x {extra['threads']}" if "io" in extra else ""
        self.say(f"  {case + where:<30} {loader:<34} {shown}")
        return row

    def compare_run(self, mode, path=None, threads=None, env=None):
        cmd = [self.compare, mode] + ([path] if path else []) + ([str(threads)] if threads else [])
        return benchlib.parse_compare(self.sh(cmd, env))

    def worker(self, spec, env=None):
        return benchlib.run_worker(self.shell, __file__, spec, env)

    def gpufile_bench(self, flags):
        return benchlib.parse_bench(self.sh([self.gpufile, "bench"] + flags + ["--json"]))

    # ---- the sections -----------------------------------------------------------------------

    def machine(self):
        try:
            p = self.sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
            self.gpu_name = p.stdout.strip() or "no GPU"
        except FileNotFoundError:
            self.gpu_name = "no GPU (no nvidia-smi)"
        self.say(f"machine: {self.gpu_name}; {os.cpu_count()} cores; Linux {platform.release()}")
        versions = {}
        for dist in ("torch", "kvikio-cu13", "libkvikio-cu13", "nvidia-cufile", "matplotlib"):
            try:
                from importlib.metadata import version
                versions[dist] = version(dist)
            except Exception:
                versions[dist] = "absent"
        self.versions = versions
        self.say(f"versions: {versions}")

    def make_files(self):
        a = self.args
        self.ext4 = os.path.join(a.dir, "side-by-side.bin")
        self.shm = "/dev/shm/side-by-side.bin"
        self.say(f"data: {a.size_gib} GiB of random bytes at {self.ext4} and {self.shm}")
        benchlib.make_random_file(self.ext4, a.size_gib * GIB)
        shutil.copyfile(self.ext4, self.shm)

    def ceiling(self, name, res):
        if "secs" in res:
            self.ceilings[name] = res["bytes"] / GIB / res["secs"]
        self.add("ceiling", name, res)

    def dd(self, write):
        out = self.ext4 + ".dd"
        cmd = (["dd", "if=/dev/zero", f"of={out}", "bs=16M", f"count={self.args.size_gib * 64}",
                "oflag=direct", "conv=fsync"] if write else
               ["dd", f"if={self.ext4}", "of=/dev/null", "bs=16M", "iflag=direct"])
        if not write:
            self.drop_caches()
        t0 = time.perf_counter()
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = self.sh(cmd)
        secs = time.perf_counter() - t0
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if write and os.path.exists(out):
            os.unlink(out)
        if p.returncode != 0:
            return {"error": p.stderr.strip()[:160]}
        cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
        return {"bytes": self.args.size_gib * GIB, "secs": secs, "cpu": cpu}

    def ceilings_section(self):
        self.say("ceilings")
        for mode in ("h2d-pinned", "h2d-pageable", "d2h-pinned", "d2h-pageable"):
            self.ceiling(mode, self.compare_run(mode))
        self.ceiling("disk O_DIRECT read (dd 16M)", self.dd(False))
        self.ceiling("disk O_DIRECT write (dd 16M)", self.dd(True))
        self.warm(self.ext4, times=2)
        self.warm(self.shm, times=2)
        self.ceiling("page cache read, ext4", self.compare_run("pagecache", self.ext4))
        self.ceiling("page cache read, /dev/shm", self.compare_run("pagecache", self.shm))
        self.write_ceilings()

    def write_ceilings(self):
        for where, path in (("ext4", self.ext4), ("/dev/shm", self.shm)):
            best = None
            for n in (1, os.cpu_count()):
                r = self.compare_run("fswrite", path, n)
                if "secs" in r and (best is None or r["secs"] < best["secs"]):
                    best = r
            self.ceiling(f"file write + fsync, {where}", best or r)

    def warm(self, path=None, times=1):
        """Each case starts with two reads (benchlib.warm says why)."""
        benchlib.warm(path or self.ext4, times)

    def read_case(self, case, path, ceiling):
        """One case of sequential whole-file reads into the GPU, every loader."""
        cold = case.startswith("cold")
        prep = self.drop_caches if cold else lambda: self.warm(path)
        if not cold:
            self.warm(path, times=2)
        size = os.path.getsize(path)

        def run(loader, fn):
            prep()
            return self.add(case, loader, fn(), ceiling)

        run("gpufile (cuFileRead)", lambda: self.compare_run("gpufile", path))
        if not cold:
            # CPU seconds per GiB are compared at equal throughput: with 4 workers gpufile runs
            # near KvikIO's best.
            run("gpufile, 4 workers", lambda: self.compare_run("gpufile", path,
                                                               env={"GPUFILE_WORKERS": "4"}))
        for loader, spec in (("libcufile 1.15 (NVIDIA)", {"kind": "libcufile", "lib": self.args.libcufile}),
                             ("torch.cuda.gds", {"kind": "torch-gds"})):
            run(loader, lambda: self.worker(dict(spec, path=path, size=size, write=False)))
        run("naive (pread pinned + copy)", lambda: self.compare_run("naive", path))
        run("pageable (pread + copy)", lambda: self.compare_run("pageable", path))
        for threads, task in self.kvikio_configs(case):
            env = {"KVIKIO_COMPAT_MODE": "ON", "KVIKIO_NTHREADS": str(threads),
                   "KVIKIO_TASK_SIZE": str(task)}
            row = run(f"KvikIO ({threads} thr, {human(task)} task)",
                      lambda: self.worker({"kind": "kvikio-whole", "path": path, "size": size,
                                           "write": False}, env))
            row["kvikio"] = [threads, task]

    def kvikio_configs(self, case):
        """Tuned on the warm and /dev/shm cases (cheap); cold takes the warm case's best."""
        if not case.startswith("cold"):
            return [(t, s) for t in KVIKIO_THREADS for s in KVIKIO_TASKS]
        warm = [r for r in self.rows if r["case"].startswith("warm") and "kvikio" in r and "gib_s" in r]
        best = max(warm, key=lambda r: r["gib_s"])["kvikio"] if warm else (16, 4 * MIB)
        return [tuple(best)]

    def write_case(self, case, path, ceiling):
        size = os.path.getsize(path)
        add = lambda loader, res: self.add(case, loader, res, ceiling)
        # Not recorded, a write that puts every loader after the first one: on the H100 machine
        # the first 4 GiB /dev/shm write of a run went at 1.86-1.87 GiB/s twice, later ones at
        # 2.5-2.9 (bench/probe_tuning.sh of commit b585783, and this harness), and the first row was gpufile's.
        self.compare_run("naive-write", path)
        add("gpufile (cuFileWrite)", self.compare_run("gpufile-write", path))
        for loader, spec in (("libcufile 1.15 (NVIDIA)", {"kind": "libcufile", "lib": self.args.libcufile}),
                             ("torch.cuda.gds", {"kind": "torch-gds"})):
            add(loader, self.worker(dict(spec, path=path, size=size, write=True)))
        add("naive (copy to pinned + pwrite)", self.compare_run("naive-write", path))
        add("pageable (copy + pwrite)", self.compare_run("pageable-write", path))
        for threads in KVIKIO_THREADS:
            env = {"KVIKIO_COMPAT_MODE": "ON", "KVIKIO_NTHREADS": str(threads)}
            add(f"KvikIO ({threads} thr)", self.worker(
                {"kind": "kvikio-whole", "path": path, "size": size, "write": True}, env))

    def sequential_section(self):
        self.say("sequential reads into the GPU, whole file")
        self.read_case("warm ext4 read", self.ext4, "h2d-pinned")
        self.read_case("/dev/shm read", self.shm, "h2d-pinned")
        self.read_case("cold ext4 read", self.ext4, "disk O_DIRECT read (dd 16M)")
        self.write_cases()

    def write_cases(self):
        self.say("sequential writes from the GPU, whole file")
        self.write_case("ext4 write + fsync", self.ext4, "file write + fsync, ext4")
        self.write_case("/dev/shm write", self.shm, "file write + fsync, /dev/shm")

    def per_io_section(self, random_io):
        sizes, counts = (RANDOM_IO, RANDOM_THREADS) if random_io else (SWEEP_IO, SWEEP_THREADS)
        secs = self.args.seconds
        case = "random read, warm" if random_io else "sweep read, warm"
        self.say(case + " (application threads issuing synchronous reads)")
        self.warm(self.ext4, times=2)
        io_type = "2" if random_io else "0"
        for io in sizes:
            for n in counts:
                base = ["-f", self.ext4, "-s", f"{self.args.size_gib}G", "-i", human(io),
                        "-w", str(n), "-I", io_type, "-T", str(secs)]
                self.add(case, "gpufile bench -x 0 (cuFile API)",
                         self.gpufile_bench(base + ["-x", "0"]), io=io, threads=n)
                self.add(case, "naive: gpufile bench -x 2 -O 1",
                         self.gpufile_bench(base + ["-x", "2", "-O", "1"]), io=io, threads=n)
                for lib, env in (("gpufile", {}), ("kvikio", {"KVIKIO_COMPAT_MODE": "ON",
                                                             "KVIKIO_NTHREADS": str(n)})):
                    spec = {"kind": "loop", "lib": lib, "path": self.ext4, "io": io, "threads": n,
                            "seconds": secs, "random": random_io}
                    name = "KvikIO (Python loop)" if lib == "kvikio" else "gpufile (Python loop)"
                    self.add(case, name, self.worker(spec, env), io=io, threads=n)

    # ---- report -----------------------------------------------------------------------------

    def report(self):
        a = self.args
        with open(os.path.join(a.out, "side_by_side.json"), "w") as f:
            json.dump({"machine": self.gpu_name, "versions": self.versions, "ceilings": self.ceilings,
                       "rows": self.rows}, f, indent=1)
        lines = [f"Machine: {self.gpu_name}, {os.cpu_count()} cores, Linux {platform.release()}. "
                 f"File: {a.size_gib} GiB of random bytes. Versions: " +
                 ", ".join(f"{k} {v}" for k, v in self.versions.items()), ""]
        fmt = lambda v, p=2: "—" if v is None else f"{v:.{p}f}"
        lines += ["| case | what | GiB/s | of ceiling | CPU-s/GiB | note |", "|---|---|---|---|---|---|"]
        for r in self.rows:
            if "io" in r:
                continue
            if "gib_s" not in r:
                lines.append(f"| {r['case']} | {r['loader']} | fails | | | {r.get('error', '')} |")
                continue
            of = f"{100 * r['of_ceiling']:.0f}% of {r['ceiling']}" if "of_ceiling" in r else ""
            lines.append(f"| {r['case']} | {r['loader']} | {fmt(r['gib_s'])} | {of} | "
                         f"{fmt(r.get('cpu_s_per_gib'), 3)} | {r.get('note', '')} |")
        for case in ("sweep read, warm", "random read, warm"):
            rows = [r for r in self.rows if r["case"] == case]
            if not rows:
                continue
            lines += ["", f"**{case}** (each point {a.seconds} s; p50/p99 per call in µs)", "",
                      "| IO | threads | loader | GiB/s | IOPS | p50 | p99 | CPU-s/GiB |",
                      "|---|---|---|---|---|---|---|---|"]
            for r in rows:
                if "gib_s" not in r:
                    lines.append(f"| {human(r['io'])} | {r['threads']} | {r['loader']} | fails: "
                                 f"{r.get('error', '')} | | | | |")
                    continue
                iops = r["ops"] / r["secs"] if r.get("ops") else 0
                lines.append(f"| {human(r['io'])} | {r['threads']} | {r['loader']} | {fmt(r['gib_s'])} | "
                             f"{iops:,.0f} | {fmt(r.get('p50_us'), 1)} | {fmt(r.get('p99_us'), 1)} | "
                             f"{fmt(r.get('cpu_s_per_gib'), 3)} |")
        with open(os.path.join(a.out, "side_by_side.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        self.chart()

    def chart(self):
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.say("no matplotlib: chart skipped")
            return
        rows = [r for r in self.rows if r["case"] == "sweep read, warm" and "gib_s" in r]
        if not rows:
            return  # this run had no sweep section
        fig, axes = plt.subplots(1, len(SWEEP_THREADS), figsize=(5 * len(SWEEP_THREADS), 4.2), sharey=True)
        for ax, n in zip(axes, SWEEP_THREADS):
            for loader in dict.fromkeys(r["loader"] for r in rows):
                pts = sorted((r["io"], r["gib_s"]) for r in rows if r["loader"] == loader and r["threads"] == n)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=loader)
            ax.set_xscale("log", base=2)
            ax.set_xticks(SWEEP_IO, [human(x) for x in SWEEP_IO])
            ax.set_title(f"{n} thread{'s' if n > 1 else ''}")
            ax.set_xlabel("IO size")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("GiB/s into the GPU (warm page cache)")
        if "h2d-pinned" in self.ceilings:
            for ax in axes:
                ax.axhline(self.ceilings["h2d-pinned"], color="grey", ls="--", lw=1)
        axes[-1].legend(fontsize=8, loc="upper left")
        fig.suptitle(f"Synchronous reads by application threads, {self.gpu_name}")
        fig.tight_layout()
        fig.savefig(os.path.join(self.args.out, "side_by_side_sweep.png"), dpi=90)

    def cleanup(self):
        for p in (self.ext4, self.shm):
            if os.path.exists(p):
                os.unlink(p)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        return worker_main(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/gpu", help="C++ build with cli/gpufile and bench/gpufile_compare")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpufile-out"))
    ap.add_argument("--dir", default="/root", help="ext4 directory for the data file")
    ap.add_argument("--size-gib", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=1, help="duration of each sweep / random point")
    ap.add_argument("--libcufile", default="/usr/local/cuda/lib64/libcufile.so.0")
    ap.add_argument("--sections", default="ceilings,sequential,sweep,random",
                    help="comma list of ceilings, sequential, sweep, random; or shm / writes "
                         "(those cases alone, with their ceilings)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    run = Run(a)
    sections = a.sections.split(",")
    try:
        run.machine()
        run.make_files()
        if "ceilings" in sections or "sequential" in sections:
            run.ceilings_section()
        else:  # the ceilings the cases below are measured against
            if "shm" in sections or "writes" in sections:
                run.ceiling("h2d-pinned", run.compare_run("h2d-pinned"))
            if "shm" in sections:
                run.warm(run.shm, times=2)
                run.ceiling("page cache read, /dev/shm", run.compare_run("pagecache", run.shm))
            if "writes" in sections:
                run.write_ceilings()
        if "shm" in sections:  # the /dev/shm read case alone
            run.read_case("/dev/shm read", run.shm, "h2d-pinned")
        if "writes" in sections:  # the write cases alone
            run.write_cases()
        if "sequential" in sections:
            run.sequential_section()
        if "sweep" in sections:
            run.per_io_section(False)
        if "random" in sections:
            run.per_io_section(True)
    finally:
        run.report()
        run.cleanup()


if __name__ == "__main__":
    main()
