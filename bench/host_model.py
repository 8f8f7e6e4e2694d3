"""The host model (issue 29; DESIGN.md, "Performance model"): what the host of a multi-GPU machine
lets each data path reach, measured in one run, and each path's predicted ceiling for 1, 2, 4 and
8 GPUs. Run by bench/host-model.sh (its header says how and how long).

Measured, every point a fresh gpufile_compare process of --seconds (2):
  memcpy T            T threads copying between two 1 GiB host buffers (T = 1, 2, 4, ... 32,
                      capped at the core count): host memory's copy rate; each byte copied is
                      read once and written once, so host memory carries twice that
  pread T pinned      T threads pread 16 MiB pieces of a warm file into pinned buffers of their
                      own: the CPU copy of the staged path (page cache -> pinned)
  h2d-all (pinned)    8 threads a GPU copying 16 MiB pieces of 1 GiB of pinned memory into the
                      GPU: each GPU alone; the first 2 and 4 GPUs at once (where there are more);
                      all at once from one process (a thread per GPU) and from one process per
                      GPU started together (GPUFILE_COMPARE_START_AT): the links' ceiling
  h2d-all (file)      the same from each GPU's warm file, mapped and registered read-only in
                      64 MiB windows: the copy engine reading page-cache pages (page-cache DMA)
  direct-read         8 threads reading a file with O_DIRECT: the disk (one, shared by all GPUs)

The model: host memory's capacity M is the most traffic any measurement put on it (2 x memcpy,
2 x pread into pinned, 1 x the DMA copies). A path whose bytes cross host memory k times is held
to M / k; and to the links of N GPUs at once, and to its own stage's measured rate:
  page-cache DMA  1 crossing  (the copy engine reads the page cache)
  O_DIRECT slab   2 crossings (the disk writes a pinned slab, the copy engine reads it); the disk
  staged          3 crossings (the CPU reads the page cache and writes pinned staging, the copy
                  engine reads it); the CPU copy (pread into pinned, best thread count)
Where the machine has fewer GPUs than N, the N-GPU figures are estimates (marked ~): N times the
per-GPU rate of the most GPUs measured at once, held to M.
"""
import argparse
import json
import os
import sys
import time

import benchlib
from benchlib import GIB, MIB

PATHS = (  # name, host memory crossings a byte, the stage of its own, what the stage is called
    ("page-cache DMA", 1, "pagecache", "copy engine reading page cache"),
    ("O_DIRECT into a slab", 2, "disk", "disk (O_DIRECT)"),
    ("staged (pread into pinned, then copy)", 3, "cpu_copy", "CPU copy (pread into pinned)"),
)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    benchlib.multi_gpu_args(ap)
    ap.add_argument("--seconds", type=float, default=2, help="each timed point (2)")
    ap.add_argument("--memcpy-mib", type=int, default=1024, help="each of memcpy's two buffers (1024 MiB)")
    ap.add_argument("--threads", default="1,2,4,8,16,32", help="thread counts of memcpy and pread")
    ap.add_argument("--no-disk", action="store_true", help="skip the O_DIRECT read of the disk")
    return ap.parse_args()


class Model:
    def __init__(self, a):
        self.a = a
        os.makedirs(a.out, exist_ok=True)
        self.shell = benchlib.Shell(os.path.join(a.out, "host-model.log"))
        self.compare_tool = os.path.join(a.build, "bench", "gpufile_compare")
        self.gpus = a.gpus or benchlib.gpu_count()
        cores = os.cpu_count() or 1
        self.threads = [t for t in (int(x) for x in a.threads.split(",")) if t <= cores] or [1]
        self.pattern = os.path.join(a.dir, "gpufile-gpu%d.bin")
        self.points = []  # every measurement: {what, cmd, gib_s or error, ...}
        self.limit = a.seconds + 60  # per process: set-up (registering a file) plus the stretch

    def say(self, text):
        self.shell.say(text)

    def point(self, what, cmds, results, **extra):
        """Records one measurement: `results` of the processes that made it; their GiB/s summed."""
        errors = [r["error"] for r in results if "error" in r]
        p = {"what": what, "cmd": [" ".join(c) for c in cmds], **extra}
        if errors:
            p["error"] = errors[0]
        else:
            p["gib_s"] = sum(r["bytes"] / GIB / r["secs"] for r in results)
            p["notes"] = [r["note"] for r in results]
            if any("late" in r["note"] for r in results):
                p["late"] = True
        self.points.append(p)
        shown = f"{p['gib_s']:8.2f} GiB/s" if "gib_s" in p else f"FAILED: {p['error']}"
        self.say(f"  {what:<58} {shown}")
        return p.get("gib_s")

    def compare(self, what, *args, **extra):
        cmd = [self.compare_tool, *map(str, args)]
        return self.point(what, [cmd], [benchlib.parse_compare(self.shell.run(cmd, timeout=self.limit))], **extra)

    def h2d(self, what, source, gpu_sets, **extra):
        """h2d-all from `source` ("-": pinned memory, else the files' pattern): one process for
        each GPU list in `gpu_sets`, all started together and copying over the same stretch."""
        cmds, results = benchlib.h2d_together(self.shell, self.compare_tool, source, gpu_sets, self.a.seconds,
                                              self.limit)
        return self.point(what, cmds, results, **extra)

    # ---- measurements ------------------------------------------------------------------------

    def host_memory(self):
        self.say("host memory")
        self.memcpy = {t: self.compare(f"memcpy, {threads(t)}", "memcpy", t, self.a.memcpy_mib, self.a.seconds,
                                       kind="memcpy", threads=t) for t in self.threads}
        f0 = self.pattern % 0
        self.pread = {t: self.compare(f"pread 16 MiB into pinned, {threads(t)}", "pread", f0, t, 16384, "pinned",
                                      kind="pread_pinned", threads=t) for t in self.threads}

    def links(self, source, kind):
        label = "pinned memory" if source == "-" else "registered page cache"
        self.say(f"host -> device from {label}")
        alone = [self.h2d(f"{label}: GPU {g} alone", source, [str(g)], kind=kind, gpus=1, gpu=g)
                 for g in range(self.gpus)]
        at_once = {1: mean(alone)}
        for n in (2, 4):
            if n < self.gpus:
                at_once[n] = self.h2d(f"{label}: GPUs 0-{n - 1} at once, one process", source,
                                      [",".join(map(str, range(n)))], kind=kind, gpus=n, how="one process")
        if self.gpus > 1:
            every = ",".join(map(str, range(self.gpus)))
            one = self.h2d(f"{label}: all {self.gpus} at once, one process", source, [every],
                           kind=kind, gpus=self.gpus, how="one process")
            each = self.h2d(f"{label}: all {self.gpus} at once, a process per GPU", source,
                            [str(g) for g in range(self.gpus)], kind=kind, gpus=self.gpus, how="a process per GPU")
            best = max(((v, how) for v, how in ((one, "one process"), (each, "a process per GPU")) if v),
                       default=None)
            at_once[self.gpus] = best[0] if best else None
            self.say(f"  ceiling of {self.gpus} GPUs at once from {label}: {fmt(at_once[self.gpus])} "
                     f"({best[1] if best else 'none measured'}, the higher of the two)")
            setattr(self, f"{kind}_ceiling_how", best[1] if best else None)
        return at_once

    def disk(self):
        if self.a.no_disk:
            return None
        self.say("disk")
        return self.compare("O_DIRECT read, 8 threads, 16 MiB", "direct-read", self.pattern % 0, 8, kind="disk")

    # ---- the model ---------------------------------------------------------------------------

    def host_capacity(self):
        """M: the most traffic any measurement put on host memory, and which one."""
        candidates = [(2 * v, f"2 x memcpy, {threads(t)}") for t, v in self.memcpy.items() if v]
        candidates += [(2 * v, f"2 x pread into pinned, {threads(t)}") for t, v in self.pread.items() if v]
        for kind, runs in (("pinned DMA", self.pinned), ("page-cache DMA", self.pagecache)):
            candidates += [(v, f"{kind}, {n} GPUs at once") for n, v in runs.items() if v]
        return max(candidates) if candidates else (None, "nothing measured")

    @staticmethod
    def scaled(measured, n):
        """(GiB/s of n GPUs at once, estimated?): measured where the run has it, else n times the
        per-GPU rate of the most GPUs measured at once (the host memory bound of the model then
        holds it)."""
        if measured.get(n):
            return measured[n], False
        known = [k for k, v in measured.items() if v]
        return (n * measured[max(known)] / max(known) if known else None), True

    def predict(self):
        m, m_how = self.host_capacity()
        stages = {"cpu_copy": max((v for v in self.pread.values() if v), default=None), "disk": self.disk_rate}
        rows = []
        for name, crossings, stage, stage_name in PATHS:
            row = {"path": name, "crossings": crossings, "by_gpus": {}}
            for n in (1, 2, 4, 8):
                links, est_links = self.scaled(self.pinned, n)
                bounds = [("links (pinned H2D)", links), (f"host memory ({crossings} crossing"
                          f"{'s' if crossings > 1 else ''}: M/{crossings})", m / crossings if m else None)]
                est = est_links
                if stage == "pagecache":
                    own, est_own = self.scaled(self.pagecache, n)
                    est = est or est_own
                else:
                    own = stages[stage]
                bounds.append((stage_name, own))
                known = [(v, b) for b, v in bounds if v]
                if not known:
                    continue
                value, bound = min(known)
                row["by_gpus"][n] = {"gib_s": value, "bound": bound, "estimated": est,
                                     "bounds": {b: v for b, v in bounds}}
            rows.append(row)
        return {"host_memory_gib_s": m, "host_memory_from": m_how, "paths": rows}

    # ---- report ------------------------------------------------------------------------------

    def markdown(self, model):
        md = [f"# Host model: {self.gpus} GPUs ({self.machine['gpus']}), {self.machine['cores']} cores, "
              f"Linux {self.machine['kernel']}, gpufile {self.machine['commit']}, {time.strftime('%Y-%m-%d')}", "",
              "## Host memory (GiB/s)", "",
              "| threads | memcpy | host memory traffic of it (2x) | pread 16 MiB into pinned |", "|---|---|---|---|"]
        for t in self.threads:
            mc = self.memcpy.get(t)
            md.append(f"| {t} | {fmt(mc)} | {fmt(2 * mc if mc else None)} | {fmt(self.pread.get(t))} |")
        md += ["", "## Host to device (GiB/s; 8 threads a GPU, 16 MiB copies)", "",
               "| GPUs | from pinned memory | from registered page cache |", "|---|---|---|"]
        for p in self.points:
            if p["kind"] == "pinned":
                twin = next((q for q in self.points if q["kind"] == "pagecache" and q.get("gpu") == p.get("gpu")
                             and q["gpus"] == p["gpus"] and q.get("how") == p.get("how")), {})
                who = f"GPU {p['gpu']} alone" if "gpu" in p else f"{p['gpus']} at once, {p['how']}"
                md.append(f"| {who} | {cell(p)} | {cell(twin)} |")
        if self.gpus > 1:
            md += ["", f"Ceiling of all {self.gpus} at once: pinned {fmt(self.pinned.get(self.gpus))} "
                       f"({getattr(self, 'pinned_ceiling_how', None)}), registered page cache "
                       f"{fmt(self.pagecache.get(self.gpus))} ({getattr(self, 'pagecache_ceiling_how', None)}): "
                       "the higher of one process and a process per GPU."]
        md += ["", f"Disk, O_DIRECT, 8 threads: {fmt(self.disk_rate)} GiB/s.",
               f"Host memory capacity M = {fmt(model['host_memory_gib_s'])} GiB/s ({model['host_memory_from']}).",
               "", "## Predicted ceiling of each path (GiB/s, all GPUs together; ~ = estimated: fewer GPUs here)", "",
               "| path | crossings | " + " | ".join(f"{n} GPU{'s' if n > 1 else ''}" for n in (1, 2, 4, 8)) + " |",
               "|---|---|" + "---|" * 4]
        for row in model["paths"]:
            cells = []
            for n in (1, 2, 4, 8):
                c = row["by_gpus"].get(n)
                cells.append("-" if c is None else
                             f"{'~' if c['estimated'] else ''}{c['gib_s']:.1f} ({c['bound']})")
            md.append(f"| {row['path']} | {row['crossings']} | " + " | ".join(cells) + " |")
        failed = [p["what"] for p in self.points if "error" in p]
        if failed:
            md += ["", "Failed points: " + "; ".join(failed) + " (host-model.log)."]
        return "\n".join(md) + "\n"

    def run(self):
        t0 = time.time()
        self.machine = benchlib.machine(self.shell)
        if self.gpus < 1:
            self.say("host-model: no GPU found")
            return 1
        n_points = 2 * len(self.threads) + 2 * (self.gpus + 2 + sum(1 for n in (2, 4) if n < self.gpus)) + 1
        self.say(f"host model: {self.gpus} GPUs, {os.cpu_count()} cores; {n_points} points of "
                 f"{self.a.seconds:g} s; about {n_points * (self.a.seconds + 2.5) / 60:.1f} min "
                 f"+ the data files if they are made now")
        benchlib.gpu_files(self.a.dir, self.gpus, self.a.size_mib * MIB, self.say)
        self.host_memory()
        self.pinned = self.links("-", "pinned")
        self.pagecache = self.links(self.pattern, "pagecache")
        self.disk_rate = self.disk()
        model = self.predict()
        md = self.markdown(model)
        print(md)
        with open(os.path.join(self.a.out, "host-model.md"), "w") as f:
            f.write(md)
        with open(os.path.join(self.a.out, "host-model.json"), "w") as f:
            json.dump({"machine": self.machine, "gpus": self.gpus, "points": self.points, "model": model}, f, indent=1)
        self.say(f"host model: done in {(time.time() - t0) / 60:.1f} min; host-model.md, host-model.json, "
                 f"host-model.log in {self.a.out}")
        return 1 if any("error" in p for p in self.points) else 0


def threads(t):
    return f"{t} thread{'s' if t > 1 else ''}"


def mean(values):
    known = [v for v in values if v]
    return sum(known) / len(known) if known else None


def fmt(v):
    return "-" if v is None else f"{v:.2f}"


def cell(p):
    if not p:
        return "-"
    if "error" in p:
        return f"FAILED: {p['error'][:80]}"
    return fmt(p["gib_s"]) + (" (a process started late)" if p.get("late") else "")


if __name__ == "__main__":
    sys.exit(Model(parse_args()).run())
