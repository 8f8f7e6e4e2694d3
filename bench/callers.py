#!/usr/bin/env python3
"""Many concurrent synchronous callers against ceilings measured in the same run (issue 10).

Run by bench/callers-run.sh (its header has the commands). Every gpufile point is a client's
shape: `gpufile bench` (threads of synchronous cuFileRead / cuFileWrite, each thread its own
slice of one shared file and its own registered buffer; the `-b` rows leave it unregistered, as
KvikIO does), gpufile_compare's dali mode, or KvikIO itself. Every ceiling is gpufile_compare,
taken by this process tree before the first point compared with it; a section run alone takes
the ones it needs.

Sections (--sections, comma-separated; they run in this order and the run prints each one's
estimate first):
  ceilings  every ceiling of the sections below
  callers   cuFileRead into GPU memory, warm ext4 and /dev/shm, 1/4/16 MiB x 4/8/16 threads,
            against min(pinned H2D, pread by as many threads of that IO size into pageable or
            pinned memory, the better); 4 MiB x 16 into pinned (-m 2) and pageable (-m 3) host
            memory, against pread into that memory; 1 and 4 MiB x 16 unregistered (-b). Each
            read point's note gives the staged loop of its shape (gpufile_compare staged: pread
            into pinned memory, copy, sync, 4 parts a call), what bounds any path that copies
            through the CPU
  writes    cuFileWrite from GPU memory, 4 MiB x 4/8/16, ext4 (O_DIRECT) and /dev/shm, against
            min(pinned D2H, the best of pwrite in place (pinned, pageable) and pwrite + fsync)
  dali      DALI's reader (one registered 256 MiB pool, 8 threads of 2 MiB reads at random
            offsets into their own region of it), against min(H2D, pread 8 x 2 MiB)
  small     4 KiB random reads: 1 and 16 synchronous threads; the batch API, one batch of 128
            and of 32 in flight, four of 128 at once
  cold      16 callers x 4 MiB after dropping the page cache, against O_DIRECT at depth 16
  kvikio    KvikIO CuFile.pread of the whole warm file into CuPy, each in a fresh process: the
            first call and the best of 3 more, over gpufile (KVIKIO_COMPAT_MODE=OFF) and on its
            own POSIX path (ON), default threads and KVIKIO_NTHREADS=16
Output in --out: callers.md (a table per section), callers.json (every point and ceiling, with
its command), callers.log (every command and what it printed). Both are rewritten after each
section, so a run cut short keeps what it measured.
"""
import argparse
import json
import os
import platform
import shutil
import sys
import time

import benchlib
from benchlib import GIB, MIB

HERE = os.path.dirname(os.path.abspath(__file__))
SECTIONS = ["ceilings", "callers", "writes", "dali", "small", "cold", "kvikio"]
IO_MIB = [1, 4, 16]
THREADS = [4, 8, 16]
HOST_POINT = (4, 16)                 # IO MiB, threads of the host-memory rows
UNREGISTERED = [(1, 16), (4, 16)]    # the -b rows
WRITE_IO, WRITE_THREADS = 4, [4, 8, 16]
DALI_THREADS, DALI_IO = 8, 2
COLD_IO, COLD_THREADS = 4, 16
STAGED_PARTS = 4                     # the staged loop's parts per call (gpufile_compare staged)
KVIKIO_IO = 4                        # KvikIO's default task size (MiB): its callers' IO size
KVIKIO_RUNS = [  # (label, over gpufile, KVIKIO_NTHREADS or None for KvikIO's default)
    ("over gpufile, default settings", True, None),
    ("over gpufile, KVIKIO_NTHREADS=16", True, 16),
    ("own POSIX path, default settings", False, None),
    ("own POSIX path, KVIKIO_NTHREADS=16", False, 16)]
KVIKIO_DEFAULT_THREADS = 1           # KvikIO 26.10's num_threads when KVIKIO_NTHREADS is unset


def ceilings_md(rows):
    lines = ["| ceiling | GiB/s | CPU-s/GiB | what ran |", "|---|---|---|---|"]
    for r in rows:
        shown = f"**{r['gib_s']:.2f}** | {r['cpu_s_per_gib']:.3f}" if "gib_s" in r else f"failed: {r['error']} |"
        lines.append(f"| {r['case']} | {shown} | `{os.path.basename(r['command'].split()[0])} "
                     f"{' '.join(r['command'].split()[1:])}` |")
    return lines


def points_md(rows, iops=False):
    """Throughput against the ceiling, latency per call, CPU (and IOPS)."""
    lines = ["| case | GiB/s | of ceiling | ceiling | " + ("IOPS | " if iops else "") +
             "p50 / p99 µs per call | CPU-s/GiB | note |", "|---|---|---|---|" + ("---|" if iops else "") + "---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | failed | | {r['ceiling']} | " + ("| " if iops else "") +
                         f"| | {r['error']} |")
            continue
        of = f"{100 * r['of_ceiling']:.0f}%" if "of_ceiling" in r else ""
        lat = f"{r['p50_us']:.0f} / {r['p99_us']:.0f}" if "p50_us" in r else ""
        lines.append(f"| {r['case']} | **{r['gib_s']:.2f}** | {of} | {r['ceiling']} | " +
                     (f"{r.get('iops', 0):,.0f} | " if iops else "") +
                     f"{lat} | {r['cpu_s_per_gib']:.3f} | {r.get('note', '')} |")
    return lines


def kvikio_md(rows):
    """One line per KvikIO run: its first call and its steady state side by side, then how
    KvikIO over gpufile compares with KvikIO on its own POSIX path."""
    runs = {}
    for r in rows:
        runs.setdefault(r["run"], {})[r["call"]] = r
    shown = lambda r: (f"{r['gib_s']:.2f} ({r['cpu_s_per_gib']:.3f})" if r and "gib_s" in r
                       else f"failed: {r['error']}" if r else "—")
    lines = ["| KvikIO | first call: GiB/s (CPU-s/GiB) | steady state, best of 3 | steady / ceiling | "
             "ceiling | served by gpufile |", "|---|---|---|---|---|---|"]
    for label, calls in runs.items():
        first, steady = calls.get("first"), calls.get("steady")
        of = f"{100 * steady['of_ceiling']:.0f}%" if steady and "of_ceiling" in steady else ""
        lines.append(f"| {label} | {shown(first)} | {shown(steady)} | {of} | {first['ceiling']} | "
                     f"{first.get('served_verdict', '—')} |")
    return lines + [""] + kvikio_ratios(runs)


def kvikio_ratios(runs):
    """Over gpufile / own POSIX path, per thread setting and call."""
    lines = []
    for setting in ("default settings", "KVIKIO_NTHREADS=16"):
        ours, theirs = runs.get(f"over gpufile, {setting}", {}), runs.get(f"own POSIX path, {setting}", {})
        parts = [f"{call} {ours[call]['gib_s'] / theirs[call]['gib_s']:.2f}x"
                 for call in ("first", "steady")
                 if "gib_s" in ours.get(call, {}) and "gib_s" in theirs.get(call, {})]
        if parts:
            lines.append(f"KvikIO over gpufile / on its own POSIX path, {setting}: " + ", ".join(parts) + "  ")
    return lines


class Run:
    def __init__(self, a):
        self.a = a
        self.size = a.size_mib * MIB
        self.shell = benchlib.Shell(os.path.join(a.out, "callers.log"))
        self.say = self.shell.say
        self.files = {"ext4": os.path.join(a.dir, "callers.bin"), "shm": "/dev/shm/callers.bin"}
        self.write_files = {k: v.replace("callers.bin", "callers-w.bin") for k, v in self.files.items()}
        self.ceil = {}        # ceiling key -> its point (each measured once per run)
        self.points = []      # every point of the sections, in the order measured
        self.tables = []      # (section, title) of the sections run
        self.warm_now = set()  # the data files read through the page cache since the last drop
        self.started = time.time()
        self.machine, self.commit = "?", "?"

    # ---- running the measuring programs ----------------------------------------------------

    def tool(self, name):
        return os.path.join(self.a.build, "bench/gpufile_compare" if name == "compare" else "cli/gpufile")

    def compare(self, *args):
        cmd = [self.tool("compare")] + [str(x) for x in args]
        return cmd, benchlib.parse_compare(self.shell.run(cmd))

    def bench(self, flags):
        cmd = [self.tool("gpufile"), "bench"] + [str(x) for x in flags] + ["--json"]
        return cmd, benchlib.parse_bench(self.shell.run(cmd))

    def read_flags(self, which, io_mib, threads, extra=()):
        return ["-f", self.files[which], "-s", f"{self.a.size_mib}M", "-T", self.a.seconds,
                "-i", f"{io_mib}M", "-w", threads, "-x", 0, "-I", 0, *extra]

    # ---- the page cache and the files ------------------------------------------------------

    def make_files(self):
        f = self.files["ext4"]
        if not os.path.exists(f) or os.path.getsize(f) != self.size:
            self.say(f"data: {self.a.size_mib} MiB of random bytes at {f}")
            benchlib.make_random_file(f, self.size)
        shm = self.files["shm"]
        if not os.path.exists(shm) or os.path.getsize(shm) != self.size:
            shutil.copyfile(f, shm)

    def warm(self, which):
        """Three reads: a page read the second time costs more than later (the kernel moves it
        to its active list then), and the first points of a run paid for that."""
        benchlib.warm(self.files[which], 3)
        self.warm_now.add(which)

    def drop(self):
        if self.a.no_drop:
            self.say("  (--no-drop: the page cache is NOT dropped; the cold rows are not cold)")
            return
        benchlib.drop_caches()
        self.warm_now.discard("ext4")  # tmpfs pages stay: they are the file

    def write_file(self, which):
        """Writes go to a copy, so that no read section ever finds the data file rewritten. The
        copy is synced: O_DIRECT writes over dirty pages would first wait for them."""
        w = self.write_files[which]
        if not os.path.exists(w):
            shutil.copyfile(self.files[which], w)
            fd = os.open(w, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        return w

    def cleanup(self):
        for path in list(self.write_files.values()) + [self.files["shm"]]:
            if os.path.exists(path) and not self.a.keep:
                os.unlink(path)

    # ---- ceilings --------------------------------------------------------------------------
    # Keys: ("h2d",), ("d2h",), ("pread" | "pwrite", file, IO MiB, threads, memory),
    # ("staged", file, IO MiB, threads), ("fswrite", file, threads), ("direct", threads).

    def measure_ceiling(self, key):
        kind = key[0]
        if kind in ("h2d", "d2h"):
            return f"{kind} pinned, 1 GiB copies", self.compare(f"{kind}-pinned")
        if kind == "pread":
            _, which, io, t, mem = key
            if which not in self.warm_now:
                self.warm(which)
            return f"pread {which} {io}M x {t}, {mem}", self.compare(
                "pread", self.files[which], t, io * 1024, mem)
        if kind == "staged":
            _, which, io, t = key
            if which not in self.warm_now:
                self.warm(which)
            return f"staged loop {which} {io}M x {t}, 4 parts", self.compare(
                "staged", self.files[which], t, io * 1024, STAGED_PARTS)
        if kind == "pwrite":
            _, which, io, t, mem = key
            return f"pwrite {which} {io}M x {t}, {mem}", self.compare(
                "pwrite", self.write_file(which), t, io * 1024, mem)
        if kind == "fswrite":
            _, which, t = key
            return f"pwrite + fsync {which}, {t} threads", self.compare(
                "fswrite", self.write_file(which), t)
        _, t = key  # direct
        self.drop()
        return f"O_DIRECT read ext4, {t} threads x 16 MiB", self.compare(
            "direct-read", self.files["ext4"], t)

    def ceiling(self, key):
        """GiB/s of one ceiling, measured the first time it is asked for; None if it failed."""
        if key not in self.ceil:
            label, (cmd, res) = self.measure_ceiling(key)
            self.ceil[key] = self.point("ceilings", label, cmd, res)
        return self.ceil[key].get("gib_s")

    def lowest(self, parts):
        """The ceiling a point is held to: the lowest of `parts` [(name, GiB/s)], each the
        best of its alternatives; (GiB/s, how it was made) or (None, why)."""
        if any(v is None for _, v in parts):
            return None, "a ceiling failed: " + ", ".join(n for n, v in parts if v is None)
        v = min(v for _, v in parts)
        return v, "min(" + ", ".join(f"{n} {x:.2f}" for n, x in parts) + ")"

    def best(self, keys):
        vals = [self.ceiling(k) for k in keys]
        return None if None in vals else max(vals)

    def read_ceiling(self, which, io, t):
        """min(pinned H2D, pread by t threads of io MiB into pageable or pinned memory)."""
        pread = self.best([("pread", which, io, t, m) for m in ("pageable", "pinned")])
        return self.lowest([("H2D", self.ceiling(("h2d",))), (f"pread {t} x {io}M", pread)])

    def host_ceiling(self, which, io, t, mem):
        return self.lowest([(f"pread {t} x {io}M {mem}", self.ceiling(("pread", which, io, t, mem)))])

    def write_ceiling(self, which, io, t):
        """min(pinned D2H, the best host write of t threads: pwrite in place or pwrite + fsync)."""
        host = self.best([("pwrite", which, io, t, m) for m in ("pageable", "pinned")] +
                         [("fswrite", which, t)])
        return self.lowest([("D2H", self.ceiling(("d2h",))), (f"host write {t} threads", host)])

    def needs(self, section):
        """The ceilings a section is measured against, in the order it asks for them."""
        keys = []
        if section == "callers":
            for which in self.files:
                keys += [("h2d",)] + [("pread", which, io, t, m) for io in IO_MIB for t in THREADS
                                      for m in ("pageable", "pinned")]
                keys += [("staged", which, io, t) for io in IO_MIB for t in THREADS]
        elif section == "writes":
            for which in self.files:
                keys += [("d2h",)] + [("pwrite", which, WRITE_IO, t, m) for t in WRITE_THREADS
                                      for m in ("pageable", "pinned")]
                keys += [("fswrite", which, t) for t in WRITE_THREADS]
        elif section == "dali":
            keys = [("h2d",)] + [("pread", "ext4", DALI_IO, DALI_THREADS, m) for m in ("pageable", "pinned")]
            keys += [("staged", "ext4", DALI_IO, DALI_THREADS)]
        elif section == "cold":
            keys = [("direct", COLD_THREADS)]
        elif section == "kvikio":
            keys = [("h2d",)] + [("pread", "ext4", KVIKIO_IO, t, m) for t in (KVIKIO_DEFAULT_THREADS, 16)
                                 for m in ("pageable", "pinned")]
        elif section == "ceilings":
            for s in SECTIONS[1:]:
                keys += [k for k in self.needs(s) if k not in keys]
        return list(dict.fromkeys(keys))

    # ---- points and tables -----------------------------------------------------------------

    def point(self, section, case, cmd, res, ceiling=(None, ""), note="", **extra):
        """One measurement: res {bytes, secs, cpu, ...} or {error}; `ceiling` (GiB/s, what)."""
        row = {"section": section, "case": case, "command": " ".join(map(str, cmd)), **extra}
        if res.get("secs") and res.get("bytes"):
            gib = res["bytes"] / GIB
            row.update(gib_s=gib / res["secs"], cpu_s_per_gib=res["cpu"] / gib)
            if res.get("ops"):
                row["iops"] = res["ops"] / res["secs"]
            row.update({k: res[k] for k in ("p50_us", "p99_us", "max_us", "ops", "note") if k in res})
        else:
            row["error"] = res.get("error", "moved no data")
        if ceiling[0] is not None and "gib_s" in row:
            row.update(ceiling_gib_s=ceiling[0], of_ceiling=row["gib_s"] / ceiling[0])
        row["ceiling"] = ceiling[1]
        if note:
            row["note"] = note
        self.points.append(row)
        self.say(f"  {case:<44} " + (f"{row['gib_s']:8.2f} GiB/s" if "gib_s" in row else f"FAILED: {row['error']}") +
                 (f"  {100 * row['of_ceiling']:.0f}% of {ceiling[0]:.2f}" if "of_ceiling" in row else ""))
        return row

    def table(self, section, title):
        self.say(f"{section}: {title}")
        self.tables.append((section, title))

    def write_report(self):
        with open(os.path.join(self.a.out, "callers.json"), "w") as f:
            json.dump(self.header() | {"points": self.points}, f, indent=1)
        with open(os.path.join(self.a.out, "callers.md"), "w") as f:
            f.write(self.markdown())

    def header(self):
        return {"machine": self.machine, "cores": os.cpu_count(), "kernel": platform.release(),
                "commit": self.commit, "file_bytes": self.size, "seconds_per_point": self.a.seconds,
                "files": self.files, "args": vars(self.a)}

    def markdown(self):
        h = self.header()
        out = [f"Machine: {h['machine']}, {h['cores']} cores, Linux {h['kernel']}; gpufile {h['commit']}; "
               f"file {self.a.size_mib} MiB of random bytes (ext4: {self.files['ext4']}); timed points "
               f"{self.a.seconds} s each. Ceilings measured in this run.", ""]
        tables = [("ceilings", "Ceilings measured in this run")] + [t for t in self.tables if t[0] != "ceilings"]
        for section, title in tables:
            rows = [p for p in self.points if p["section"] == section]
            render = {"ceilings": ceilings_md, "kvikio": kvikio_md,
                      "small": lambda rows: points_md(rows, iops=True)}.get(section, points_md)
            if rows:
                out += [f"### {title}", ""] + render(rows) + [""]
        return "\n".join(out) + "\n"

    # ---- the sections ----------------------------------------------------------------------

    def ceilings(self):
        self.table("ceilings", "Ceilings measured in this run")
        for key in self.needs("ceilings"):
            self.ceiling(key)

    def callers(self):
        self.table("callers", "Synchronous callers: cuFileRead into GPU memory unless said")
        for which in self.files:
            self.warm(which)
            for io in IO_MIB:
                for t in THREADS:
                    c = self.read_ceiling(which, io, t)
                    self.point("callers", f"{which} {io}M x {t}", *self.bench(self.read_flags(which, io, t)), c,
                               note=self.staged_note(which, io, t))
            self.host_rows(which)
            for io, t in UNREGISTERED:
                c = self.read_ceiling(which, io, t)
                self.point("callers", f"{which} {io}M x {t}, unregistered (-b)",
                           *self.bench(self.read_flags(which, io, t, ["-b"])), c)

    def staged_note(self, which, io, t):
        """The best a hand-written loop staging through pinned memory reached for this shape:
        not a ceiling of the target, but what bounds every path that copies through the CPU."""
        v = self.ceiling(("staged", which, io, t))
        return "" if v is None else f"staged loop of this shape: {v:.2f}"

    def host_rows(self, which):
        io, t = HOST_POINT
        for mem, flag in (("pinned", 2), ("pageable", 3)):
            c = self.host_ceiling(which, io, t, mem)
            self.point("callers", f"{which} {io}M x {t}, {mem} host memory (-m {flag})",
                       *self.bench(self.read_flags(which, io, t, ["-m", flag])), c,
                       note="no copy to the GPU: held to pread into the same memory")

    def writes(self):
        self.table("writes", f"cuFileWrite from GPU memory, {WRITE_IO} MiB per call, timed")
        for which in self.files:
            for t in WRITE_THREADS:
                c = self.write_ceiling(which, WRITE_IO, t)
                flags = ["-f", self.write_file(which), "-s", f"{self.a.size_mib}M", "-T", self.a.seconds,
                         "-i", f"{WRITE_IO}M", "-w", t, "-x", 0, "-I", 1]
                note = "O_DIRECT" if which == "ext4" else "page cache (tmpfs has no O_DIRECT)"
                self.point("writes", f"{which} write {WRITE_IO}M x {t}", *self.bench(flags), c, note=note)

    def dali(self):
        self.table("dali", f"DALI's pattern: {DALI_THREADS} threads, {DALI_IO} MiB reads into one "
                           "registered 256 MiB pool (warm ext4)")
        self.warm("ext4")
        c = self.read_ceiling("ext4", DALI_IO, DALI_THREADS)
        cmd, res = self.compare("dali", self.files["ext4"], DALI_THREADS, self.a.seconds)
        self.point("dali", f"ext4 {DALI_IO}M x {DALI_THREADS} into one pool", cmd, res, c,
                   note=self.staged_note("ext4", DALI_IO, DALI_THREADS))

    def small(self):
        self.table("small", "4 KiB random reads, warm ext4")
        self.warm("ext4")
        f = self.files["ext4"]
        for label, args in (("synchronous, 1 thread", ["-w", 1, "-x", 0]),
                            ("synchronous, 16 threads", ["-w", 16, "-x", 0]),
                            ("batch API, one batch of 128 in flight", ["-w", 128, "-x", 6]),
                            ("batch API, one batch of 32 in flight", ["-w", 32, "-x", 6])):
            flags = ["-f", f, "-s", f"{self.a.size_mib}M", "-T", self.a.seconds, "-i", "4K", "-I", 2, *args]
            self.point("small", f"4K {label}", *self.bench(flags))
        job = os.path.join(self.a.out, "batch4.gdsio")
        with open(job, "w") as j:
            j.write(f"[global]\nxfer_type=6\nrw=randread\nbs=4K\nsize={self.a.size_mib}M\n"
                    f"runtime={self.a.seconds}\nfilename={f}\nnum_threads=128\n[job1]\n[job2]\n[job3]\n[job4]\n")
        self.point("small", "4K batch API, four batches of 128 in flight (four threads)", *self.bench([job]))

    def cold(self):
        self.table("cold", f"Cold: {COLD_THREADS} callers x {COLD_IO} MiB, page cache dropped before each")
        c = self.lowest([(f"O_DIRECT {COLD_THREADS} threads", self.ceiling(("direct", COLD_THREADS)))])
        self.drop()
        flags = ["-f", self.files["ext4"], "-s", f"{self.a.size_mib}M", "-i", f"{COLD_IO}M",
                 "-w", COLD_THREADS, "-x", 0, "-I", 0]
        self.point("cold", f"ext4 cold, {COLD_IO}M x {COLD_THREADS} (one pass)", *self.bench(flags), c)

    # ---- KvikIO ----------------------------------------------------------------------------

    def kvikio_env(self, over_gpufile, threads):
        """KvikIO dlopens "libcufile.so.0", but libkvikio's loader first has cuda.pathfinder
        load libcufile, which prefers NVIDIA's wheel (nvidia-cufile, a torch dependency) over
        LD_LIBRARY_PATH; the later dlopen then gets that library by its soname. Preloading
        gpufile's library makes it the one found first by both."""
        env = {"KVIKIO_COMPAT_MODE": "OFF" if over_gpufile else "ON"}
        if threads:
            env["KVIKIO_NTHREADS"] = str(threads)
        if over_gpufile:
            lib_dir = os.path.abspath(os.path.join(self.a.build, "src"))
            env["LD_PRELOAD"] = os.path.join(lib_dir, "libcufile.so.0")
            env["LD_LIBRARY_PATH"] = lib_dir + (":" + os.environ["LD_LIBRARY_PATH"]
                                                if os.environ.get("LD_LIBRARY_PATH") else "")
        return env

    def kvikio(self):
        self.table("kvikio", "KvikIO CuFile.pread of the whole warm file: first call of a fresh "
                             "process, then steady state (best of 3 more in the same process)")
        self.warm("ext4")
        for label, over_gpufile, threads in KVIKIO_RUNS:
            t = threads or KVIKIO_DEFAULT_THREADS
            c = self.read_ceiling("ext4", KVIKIO_IO, t)
            spec = {"kind": "kvikio-whole", "path": self.files["ext4"], "size": self.size, "write": False,
                    "array": self.a.kvikio_array, "repeats": 3, "verify": over_gpufile}
            env = self.kvikio_env(over_gpufile, threads)
            res = benchlib.run_worker(self.shell, os.path.join(HERE, "side_by_side.py"), spec, env)
            cmd = [f"{k}={v}" for k, v in env.items()] + ["side_by_side.py worker", json.dumps(spec)]
            self.kvikio_rows(label, over_gpufile, cmd, res, c)

    def kvikio_rows(self, label, over_gpufile, cmd, res, ceiling):
        verdict = self.kvikio_served(res) if over_gpufile and "error" not in res else "—"
        common = {"run": label, "served": res.get("served"), "served_verdict": verdict,
                  "kvikio": res.get("kvikio"), "note": res.get("note", "")}
        first = {k: res[k] for k in ("bytes", "secs", "cpu", "error") if k in res}
        self.point("kvikio", f"{label}: first call", cmd, first, ceiling, call="first", **common)
        if res.get("more"):
            best = min(res["more"], key=lambda m: m["secs"])
            self.point("kvikio", f"{label}: steady state", cmd, {"bytes": res["bytes"], **best}, ceiling,
                       call="steady", all_gib_s=[res["bytes"] / GIB / m["secs"] for m in res["more"]], **common)

    def kvikio_served(self, res):
        """Whether gpufile served the reads: its library is the only libcufile mapped, and a
        read after the timed ones was counted by its statistics."""
        s = res.get("served") or {}
        lib = os.path.realpath(os.path.join(self.a.build, "src", "libcufile.so.0"))
        mapped = [os.path.realpath(p) for p in s.get("libcufile_mapped", [])]
        ok = mapped == [lib] and s.get("cufile_reads", 0) > 0
        self.say(f"  served by gpufile: {ok}; libcufile mapped: {', '.join(mapped) or 'none'}; one more "
                 f"read: {s.get('cufile_reads', '?')} cuFileRead calls, {s.get('cufile_read_bytes', '?')} bytes")
        return (f"yes: {s['cufile_reads']} cuFileRead calls counted in one read" if ok else
                f"NO (libcufile mapped: {', '.join(mapped) or 'none'}; reads counted: {s.get('cufile_reads', '?')})")

    # ---- the estimate ----------------------------------------------------------------------

    def cost(self, key, done):
        """Seconds one ceiling takes on the H100 machine (a process start with the CUDA context
        is about a second; a 4 GiB pass: page cache 15-20 GiB/s with threads, disk 1.5)."""
        if key in done:
            return 0
        done.add(key)
        gib = self.size / GIB
        disk = 0.4 + 1 + gib / 1.5
        return {"h2d": 2, "d2h": 2, "pread": 1 + 3 * gib / 15, "staged": 1 + 3 * gib / 25, "pwrite": 1 + gib / (1.5 if key[1:2] == ("ext4",) else 4),
                "fswrite": disk, "direct": disk}[key[0]]

    def work(self, section):
        """Seconds a section's own points take (its ceilings apart)."""
        gib, point, warm = self.size / GIB, self.a.seconds + 2, 3 * self.size / GIB / 6
        return {"ceilings": 2 * warm + 2 * gib / 1.5,
                "callers": 2 * (warm + (len(IO_MIB) * len(THREADS) + 2 + len(UNREGISTERED)) * point),
                "writes": 2 * len(WRITE_THREADS) * point + 1 + gib / 1.5,
                "dali": warm + point + 1, "small": warm + 5 * point, "cold": 2 + gib / 1.5,
                "kvikio": warm + len(KVIKIO_RUNS) * (6 + 5 * gib / 6)}[section]

    def estimates(self, sections):
        done, out = set(), []
        for s in sections:
            out.append((s, self.work(s) + sum(self.cost(k, done) for k in self.needs(s))))
        return out

    # ---- the run ---------------------------------------------------------------------------

    def describe_machine(self):
        m = benchlib.machine(self.shell)
        self.machine, self.commit = m["gpus"], m["commit"]
        self.say(f"machine: {self.machine}; {m['cores']} cores; Linux {m['kernel']}; gpufile {self.commit}")

    def run(self, sections):
        plan = self.estimates(sections)
        self.say("estimate: " + ", ".join(f"{s} {t / 60:.1f} min" for s, t in plan) +
                 f"; total {sum(t for _, t in plan) / 60:.1f} min (+ the data file if it is made now)")
        self.make_files()
        for s in sections:
            t0 = time.time()
            getattr(self, s)()
            self.say(f"{s}: took {(time.time() - t0) / 60:.1f} min")
            self.write_report()


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/gpu", help="the build with cli/gpufile, bench/gpufile_compare, src/")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpufile-out"))
    ap.add_argument("--dir", default="/root", help="the ext4 directory of the data file")
    ap.add_argument("--size-mib", type=int, default=4096, help="the data file (4096 MiB)")
    ap.add_argument("--seconds", type=int, default=2, help="each timed point (2)")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--kvikio-array", default="cupy", choices=["cupy", "torch", "cuda", "numpy"],
                    help="the GPU memory KvikIO reads into: a CuPy array (default), a torch tensor, "
                         "or cuMemAlloc memory (cuda: no CuPy needed); numpy: host memory")
    ap.add_argument("--no-drop", action="store_true", help="never drop the page cache (cold rows are then not cold)")
    ap.add_argument("--keep", action="store_true", help="keep /dev/shm and the write copies at the end")
    ap.add_argument("--estimate", action="store_true", help="print the estimate of the sections and stop")
    a = ap.parse_args()
    unknown = [s for s in a.sections.split(",") if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown sections {unknown}; known: {','.join(SECTIONS)}")
    return a


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    run = Run(a)
    sections = [s for s in SECTIONS if s in a.sections.split(",")]
    if a.estimate:
        for s, t in run.estimates(sections):
            print(f"{s}: {t / 60:.1f} min")
        return 0
    run.describe_machine()
    try:
        run.run(sections)
    finally:
        run.write_report()
        run.cleanup()
    failed = [p["case"] for p in run.points if "error" in p]
    run.say(f"done in {(time.time() - run.started) / 60:.1f} min; {len(run.points)} points, "
            f"{len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
