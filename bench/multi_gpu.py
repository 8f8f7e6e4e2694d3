"""Issue 29's table on whatever number of GPUs the machine has, against the summed pinned ceiling
of the same run. Run by bench/multi-gpu-run.sh (its header says how and how long).

Each GPU g reads its own warm file DIR/gpufile-gpu<g>.bin (4 GiB). Rows, in order:
  ceiling         gpufile_compare h2d-all from pinned memory to every GPU at once, from one process
                  (a thread per GPU) and from a process per GPU started together: the higher is
                  the summed ceiling every row is a share of; and, where the lone Python row
                  runs, GPU 0's pinned ceiling alone (its link with no other GPU copying), the
                  share that row is measured against
  bench           gpufile bench -x 0 -I 0 with -i 16M -w 8 -T S, -i 4M -w 16 -T S, -i 4G -w 1 -T S
                  and -i 1G -w 1 (one pass: a fresh process's first reads): a process per GPU
                  started together, every clock starting at one moment after set-up (--start-at;
                  their GiB/s summed), then one process for all GPUs (a gdsio job file, one job
                  per GPU: the total line)
  python          gpufile.open(f).read(cupy array of the whole file): first call in a fresh process,
                  then the best of --rounds (5); a process per GPU (every read starts together, across
                  processes), the same with each process seeing only its GPU (CUDA_VISIBLE_DEVICES:
                  processes that no launcher announced, finding each other through NVML), one process
                  with a thread per GPU, and one process alone on the host
  pieces          (only with --pieces LIST) the one-pass row again as ranks (LOCAL_WORLD_SIZE
                  set), once for each gpufile.shared_piece_kb in LIST ("auto" leaves it as the environment has it,
                  4096 keeps whole slabs): how the size of a staged piece of cached bytes moves a
                  fresh process's first reads where GPUs share the host's memory, rounds of the
                  list repeated --piece-rounds times (2), alternating
  tp_load         examples/tp_load.py --into --compare --shared under torchrun, one rank per GPU:
                  each rank's part (load_into; the slowest rank against its part's bytes over its
                  share of the ceiling), load_file of the whole checkpoint on every rank, and the
                  same shared by the ranks as one group (load_file(group=...); GB/s summed)
GiB/s throughout (tp_load's GB/s converted). With --ranks the processes carry LOCAL_RANK and
LOCAL_WORLD_SIZE, as torchrun's ranks do; without, they announce nothing.
"""
import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

import benchlib
from benchlib import GIB, MIB

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# tp_load.py's "rank R: load_into, ...: X GB in S s = Y GB/s" (and load_file's)
TP_LOAD_LINE = re.compile(r"rank (?P<rank>\d+): (?P<what>load_into|load_file shared|load_file)\b[^\n]*?: "
                          r"(?P<gb>[\d.]+) GB in (?P<secs>[\d.]+) s")
BENCH_SHAPES = (  # IO size, threads, timed (-T) or one pass
    (16 * MIB, 8, True), (4 * MIB, 16, True), (4 * GIB, 1, True), (1 * GIB, 1, False))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    benchlib.multi_gpu_args(ap)
    ap.add_argument("--seconds", type=int, default=6, help="-T of the timed bench rows (6)")
    ap.add_argument("--ceiling-seconds", type=float, default=3, help="each ceiling point (3)")
    ap.add_argument("--checkpoint", default="/root/ckpt", help="tp_load's checkpoint, made if missing")
    ap.add_argument("--checkpoint-gb", type=float, default=8, help="its size when it is made (8)")
    ap.add_argument("--ranks", action="store_true", help="give each process LOCAL_RANK and LOCAL_WORLD_SIZE")
    ap.add_argument("--quick", action="store_true",
                    help="-T 4, no one-process bench rows, no lone Python process, one tp_load start")
    ap.add_argument("--rounds", type=int, default=5,
                    help="Python reads after the first call in each process (5): a read of bytes read "
                         "before makes page-cache windows where several GPUs share the host, and "
                         "the rounds after it copy out of them")
    ap.add_argument("--skip", default="", help="comma list of sections to leave out: bench,python,tp_load")
    ap.add_argument("--pieces", default="",
                    help="comma list of gpufile.shared_piece_kb values for the pieces section (auto: as the environment has it; "
                         "e.g. auto,4096,2048,1024,512); empty: no such section")
    ap.add_argument("--piece-rounds", type=int, default=2, help="rounds of the --pieces list (2)")
    return ap.parse_args()


class Run:
    def __init__(self, a):
        self.a = a
        if a.quick:
            a.seconds = min(a.seconds, 4)
        os.makedirs(a.out, exist_ok=True)
        self.shell = benchlib.Shell(os.path.join(a.out, "multi-gpu.log"))
        self.gpus = a.gpus or benchlib.gpu_count()
        self.size = a.size_mib * MIB
        self.rounds = max(1, a.rounds)
        self.files = [os.path.join(a.dir, f"gpufile-gpu{g}.bin") for g in range(self.gpus)]
        self.rows = []
        self.ceiling = None
        self.link_alone = None  # GPU 0's pinned ceiling with the host to itself, where measured
        self.skip = set(filter(None, a.skip.split(",")))
        self.started = time.time()

    def say(self, text):
        self.shell.say(text)

    def tool(self, name):
        return os.path.join(self.a.build, *{"gpufile": ("cli", "gpufile"),
                                            "compare": ("bench", "gpufile_compare")}[name])

    def env(self, g):
        return {"LOCAL_RANK": str(g), "LOCAL_WORLD_SIZE": str(self.gpus)} if self.a.ranks else {}

    def row(self, section, what, how, gib_s=None, error=None, first=None, of=None, **extra):
        """One line of the table: GiB/s of all GPUs together (steady state, or the only figure),
        and `first`, a fresh process's first call, where the row has one; both as shares of `of`
        (default: the summed ceiling; 0: no share)."""
        r = {"section": section, "what": what, "how": how, **extra}
        of = self.ceiling if of is None else of
        if error:
            r["error"] = error
        else:
            r["gib_s"] = gib_s
            if first is not None:
                r["first_gib_s"] = first
            if of:
                r["of_ceiling"] = gib_s / of
                if first is not None:
                    r["first_of_ceiling"] = first / of
        self.rows.append(r)
        self.say(f"  {what} [{how}]: " + (f"FAILED: {error}" if error else
                 (f"first {first:.2f}, " if first is not None else "") + f"{gib_s:.2f} GiB/s" +
                 (f" ({100 * r['of_ceiling']:.0f}% of {of:.1f})" if of else "")))
        self.write_report()

    # ---- the ceiling -------------------------------------------------------------------------

    def measure_ceiling(self):
        self.say(f"ceiling: pinned host -> device, all {self.gpus} GPUs at once")
        every = ",".join(map(str, range(self.gpus)))
        limit = self.a.ceiling_seconds + 60
        found = []
        ways = [("one process", [every])]
        if self.gpus > 1:
            ways.append(("a process per GPU", [str(g) for g in range(self.gpus)]))
        for how, sets in ways:
            cmds, results = benchlib.h2d_together(self.shell, self.tool("compare"), "-", sets,
                                                  self.a.ceiling_seconds, limit)
            bad = [r["error"] for r in results if "error" in r]
            if bad:
                self.row("ceiling", "pinned H2D, all GPUs at once", how, error=bad[0])
                continue
            gib_s = sum(r["bytes"] / GIB / r["secs"] for r in results)
            late = any("late" in r["note"] for r in results)
            found.append((gib_s, how))
            self.row("ceiling", "pinned H2D, all GPUs at once", how, gib_s, cmd=[" ".join(c) for c in cmds],
                     notes=[r["note"] for r in results], late=late)
        if found:
            self.ceiling, self.ceiling_how = max(found)
            self.say(f"summed ceiling: {self.ceiling:.2f} GiB/s ({self.ceiling_how}, the higher)")
            for r in self.rows:  # the ceiling rows, measured before the ceiling was known
                if "gib_s" in r:
                    r["of_ceiling"] = r["gib_s"] / self.ceiling
        if self.lone_python_row():
            self.measure_link_alone(limit)

    def lone_python_row(self):
        return self.gpus > 1 and not self.a.quick and "python" not in self.skip

    def measure_link_alone(self, limit):
        """GPU 0's pinned ceiling with no other GPU copying. The lone Python process reads into GPU
        0 with the host to itself; one GPU's share of the summed ceiling is what a link gets while
        every GPU copies, less than a link alone, and a lone read measured against it passed 100%."""
        cmds, results = benchlib.h2d_together(self.shell, self.tool("compare"), "-", ["0"],
                                              self.a.ceiling_seconds, limit)
        if "error" in results[0]:
            return self.row("ceiling", "pinned H2D, GPU 0 alone", "one process", error=results[0]["error"])
        self.link_alone = results[0]["bytes"] / GIB / results[0]["secs"]
        self.row("ceiling", "pinned H2D, GPU 0 alone", "one process", self.link_alone, of=0,
                 cmd=" ".join(cmds[0]), notes=[results[0]["note"]], note="the lone process's ceiling")

    # ---- gpufile bench -----------------------------------------------------------------------

    def bench_flags(self, io, threads, timed):
        io = min(io, self.size)
        flags = ["-s", benchlib.human(self.size), "-i", benchlib.human(io), "-w", str(threads), "-x", "0", "-I", "0"]
        return flags + (["-T", str(self.a.seconds)] if timed else [])

    def shape_name(self, io, threads, timed):
        return f"bench -i {benchlib.human(min(io, self.size))} -w {threads}" + (
            f" -T {self.a.seconds}" if timed else " (one pass)")

    def bench(self):
        self.say("gpufile bench")
        limit = self.a.seconds + 90
        for io, threads, timed in BENCH_SHAPES:
            name = self.shape_name(io, threads, timed)
            self.bench_per_gpu("bench", name, "a process per GPU", self.bench_flags(io, threads, timed),
                               min(io, self.size), [self.env(g) for g in range(self.gpus)], limit)
            if not self.a.quick and self.gpus > 1:
                self.bench_one_process(name, io, threads, timed, limit)

    def bench_per_gpu(self, section, name, how, flags, io, envs, limit):
        """One `gpufile bench` process per GPU, started together, their GiB/s summed."""
        # Every process's clock starts at one moment after its set-up (a context, the session,
        # its buffers: 4 GiB of them took over 5 s on 4 H200s): started only together, a
        # one-pass run (about 0.1 s a GPU) overlapped the others by chance, and their rates
        # summed as if it had not.
        lead = 4 + 0.25 * self.gpus + 1.5 * io / GIB
        start = ["--start-at", f"{time.time() + lead:.3f}"] if self.gpus > 1 else []
        cmds = [[self.tool("gpufile"), "bench", "-f", f, "-d", str(g), *flags, "--json", *start]
                for g, f in enumerate(self.files)]
        procs = self.shell.run_together(cmds, envs, limit)
        results = [benchlib.parse_bench(p) for p in procs]
        bad = [r["error"] for r in results if "error" in r]
        late = sum("began late" in p.stderr for p in procs)
        if bad:
            return self.row(section, name, how, error=bad[0])
        each = [r["bytes"] / GIB / r["secs"] for r in results]
        self.row(section, name, how, sum(each), per_gpu=each, cmd=" ".join(cmds[0]),
                 **({"note": f"{late} process(es) began late: not every GPU overlapped"} if late else {}))

    def pieces(self):
        """The one-pass row as ranks of one job, for each gpufile.shared_piece_kb of --pieces."""
        values = [v for v in self.a.pieces.split(",") if v]
        self.say(f"pieces: one pass, ranks, gpufile.shared_piece_kb {', '.join(values)}")
        flags = self.bench_flags(GIB, 1, False)
        for k in range(max(1, self.a.piece_rounds)):
            for v in (values if k % 2 == 0 else values[::-1]):
                ranks = [{"LOCAL_RANK": str(g), "LOCAL_WORLD_SIZE": str(self.gpus)} for g in range(self.gpus)]
                envs = [dict(e, GPUFILE_SHARED_PIECE_KB=v) if v != "auto" else e for e in ranks]
                self.bench_per_gpu("pieces", f"{self.shape_name(GIB, 1, False)}, shared_piece_kb {v}",
                                   f"ranks, round {k + 1}", flags, min(GIB, self.size), envs,
                                   self.a.seconds + 90)

    def bench_one_process(self, name, io, threads, timed, limit):
        """The same shape from one process: a gdsio job file of one job per GPU."""
        job = os.path.join(self.a.out, "multi-gpu.gdsio")
        lines = ["[global]", "xfer_type=0", "rw=read", f"bs={benchlib.human(min(io, self.size))}",
                 f"size={benchlib.human(self.size)}"] + ([f"runtime={self.a.seconds}"] if timed else [])
        for g, f in enumerate(self.files):
            lines += ["", f"[gpu{g}]", f"gpu_dev_id={g}", f"num_threads={threads}", f"filename={f}"]
        with open(job, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        r = benchlib.parse_bench(self.shell.run([self.tool("gpufile"), "bench", "--json", job], timeout=limit))
        if "error" in r:
            self.row("bench", name, "one process, a job per GPU", error=r["error"])
        else:
            self.row("bench", name, "one process, a job per GPU", r["bytes"] / GIB / r["secs"],
                     cmd=f"gpufile bench --json {job}: " + "; ".join(lines))

    # ---- Python ------------------------------------------------------------------------------

    def python(self):
        self.say("Python: gpufile.open(f).read(cupy array)")
        limit = 180
        name = f"Python File.read of {benchlib.human(self.size)}"
        specs = [{"path": f, "gpu": g, "size": self.size, "parties": self.gpus,
                  "rounds": self.rounds} for g, f in enumerate(self.files)]
        self.per_gpu_python_row(name, "a process per GPU", specs,
                                [self.env(g) for g in range(self.gpus)], limit)
        if self.gpus > 1 and not self.a.quick:
            # Each process sees only its GPU and no launcher variable: whether they find each
            # other (exec::HostSharing asks NVML) shows in the rounds after the first call.
            self.per_gpu_python_row(name, "a process per GPU, each seeing only its GPU",
                                    [dict(s, gpu=0, me=g) for g, s in enumerate(specs)],
                                    [dict(self.env(g), CUDA_VISIBLE_DEVICES=str(g)) for g in range(self.gpus)],
                                    limit)
        if self.gpus > 1:
            spec = {"paths": self.files, "size": self.size, "rounds": self.rounds}
            cmd = [sys.executable, os.path.abspath(__file__), "threads", json.dumps(spec)]
            self.python_row(name, "one process, a thread per GPU", [self.shell.run(cmd, timeout=limit)])
            if self.lone_python_row():
                solo = dict(specs[0], parties=1)
                cmd = [sys.executable, os.path.abspath(__file__), "worker", json.dumps(solo)]
                self.python_row(name, "GPU 0's process alone on the host", [self.shell.run(cmd, timeout=limit)],
                                alone=True)

    def per_gpu_python_row(self, name, how, specs, envs, limit):
        """A worker process per spec, started together, every read of theirs starting together
        (a barrier of files in a fresh directory)."""
        barrier = tempfile.mkdtemp(prefix="gpufile-barrier-")  # the readers' arrivals, as files
        cmds = [[sys.executable, os.path.abspath(__file__), "worker", json.dumps(dict(s, barrier=barrier))]
                for s in specs]
        self.python_row(name, how, self.shell.run_together(cmds, envs, limit))
        shutil.rmtree(barrier, ignore_errors=True)

    def python_row(self, name, how, procs, alone=False):
        results = []
        for p in procs:
            lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if not lines:
                return self.row("python", name, how, error=benchlib.failure(p)["error"])
            results += json.loads(lines[-1][7:])
        first = sum(self.size / GIB / r["first_s"] for r in results)
        rounds = [sum(self.size / GIB / r["steady_s"][k] for r in results) for k in range(len(results[0]["steady_s"]))]
        extra = {"open_s": [r["open_s"] for r in results], "rounds_gib_s": rounds}
        of = None
        if alone:  # one link with the host to itself: against that link's ceiling measured alone
            of = self.link_alone or 0
            extra["note"] = (f"% of GPU 0's pinned ceiling alone, {of:.1f}" if of else
                             "GPU 0's pinned ceiling alone not measured: no %")
        self.row("python", name, how, max(rounds), first=first, of=of, **extra)

    # ---- tp_load -----------------------------------------------------------------------------

    def torchrun(self, *args, limit=240):
        cmd = ["timeout", "-k", "10", str(limit), sys.executable, "-m", "torch.distributed.run",
               "--nproc-per-node", str(self.gpus), os.path.join(ROOT, "examples", "tp_load.py"),
               self.a.checkpoint, *args]
        return self.shell.run(cmd, timeout=limit + 20)

    def tp_load(self):
        if not benchlib.installed("torch"):
            return self.row("tp_load", "examples/tp_load.py", "torchrun", error="skipped: no torch here")
        index = os.path.join(self.a.checkpoint, "model.safetensors.index.json")
        if not os.path.exists(index):
            self.say(f"tp_load: making a {self.a.checkpoint_gb:g} GB checkpoint in {self.a.checkpoint}")
            p = self.torchrun("--make-gb", str(self.a.checkpoint_gb), limit=400)
            if p.returncode != 0:
                return self.row("tp_load", "making the checkpoint", "torchrun", error=benchlib.failure(p)["error"])
        for f in sorted(os.listdir(self.a.checkpoint)):
            benchlib.warm(os.path.join(self.a.checkpoint, f), 2)
        for start in range(1 if self.a.quick else 2):
            label = "first start" if start == 0 else "second start"
            p = self.torchrun("--into", "--compare", "--shared")
            self.tp_rows(p, label)

    def tp_rows(self, p, label):
        """Rows from tp_load's lines: "rank R: WHAT: X GB in S s = Y GB/s", "WHAT: slowest rank T s"."""
        ranks = {"load_into": {}, "load_file": {}, "load_file shared": {}}
        for m in TP_LOAD_LINE.finditer(p.stdout):
            ranks[m["what"]][int(m["rank"])] = (float(m["gb"]) * 1e9, float(m["secs"]))
        ranks = {what: list(by_rank.values()) for what, by_rank in ranks.items()}
        if any(len(r) != self.gpus for r in ranks.values()):
            said = ", ".join(f"{what} from {len(r)}" for what, r in ranks.items())
            return self.row("tp_load", f"tp_load.py --into --compare --shared, {label}", "torchrun",
                            error=f"{said} of {self.gpus} ranks (exit {p.returncode}): " +
                            benchlib.failure(p)["error"])
        parts = ranks["load_into"]
        slowest = max(s for _, s in parts)
        moved = sum(b for b, _ in parts)
        extra = {"slowest_rank_s": slowest, "ranks": [{"bytes": b, "secs": s} for b, s in parts]}
        if self.ceiling:  # each rank's part over its share of the summed ceiling
            ideal = max(b for b, _ in parts) / GIB / (self.ceiling / self.gpus)
            extra.update(ideal_s=ideal, slowest_over_ideal=slowest / ideal)
        self.row("tp_load", f"tp_load.py --into: each rank's part, {label}", "torchrun",
                 moved / GIB / slowest, **extra)
        for what, how in (("load_file", "load_file of the whole checkpoint on every rank"),
                          ("load_file shared", "load_file(group=WORLD): the whole checkpoint on every rank, "
                                               "each reading its share")):
            whole = ranks[what]
            self.row("tp_load", f"tp_load.py --compare: {how}, {label}", "torchrun",
                     sum(b / GIB / s for b, s in whole), ranks=[{"bytes": b, "secs": s} for b, s in whole])

    # ---- report ------------------------------------------------------------------------------

    def markdown(self):
        m = self.machine
        md = [f"# Many GPUs: {self.gpus} GPUs ({m['gpus']}), {m['cores']} cores, gpufile {m['commit']}, "
              f"{time.strftime('%Y-%m-%d')}{', LOCAL_RANK/LOCAL_WORLD_SIZE set' if self.a.ranks else ''}", "",
              "Summed pinned ceiling: " + (f"{self.ceiling:.2f} GiB/s ({self.ceiling_how})" if self.ceiling
                                            else "not measured"), "",
              "| what | how | first call, GiB/s | % | steady / only figure, GiB/s | % | notes |",
              "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            if "error" in r:
                said = r["error"] if r["error"].startswith("skipped") else f"FAILED: {r['error']}"
                md.append(f"| {r['what']} | {r['how']} | | | {said[:110]} | | |")
                continue
            first = f"{r['first_gib_s']:.2f}" if "first_gib_s" in r else ""
            first_pct = f"{100 * r['first_of_ceiling']:.0f}%" if "first_of_ceiling" in r else ""
            pct = f"{100 * r['of_ceiling']:.0f}%" if "of_ceiling" in r else ""
            md.append(f"| {r['what']} | {r['how']} | {first} | {first_pct} | {r['gib_s']:.2f} | {pct} | "
                      f"{notes(r)} |")
        return "\n".join(md) + "\n"

    def write_report(self):
        with open(os.path.join(self.a.out, "multi-gpu.json"), "w") as f:
            json.dump({"machine": getattr(self, "machine", None), "gpus": self.gpus, "ranks": self.a.ranks,
                       "ceiling_gib_s": self.ceiling, "ceiling_how": getattr(self, "ceiling_how", None),
                       "rows": self.rows}, f, indent=1)

    def run(self):
        self.machine = benchlib.machine(self.shell)
        if self.gpus < 1:
            self.say("multi-gpu: no GPU found")
            return 1
        self.say(f"many GPUs: {self.gpus} GPUs, {os.cpu_count()} cores, {self.a.size_mib} MiB a GPU; "
                 f"about {self.estimate() / 60:.1f} min + the data files and checkpoint if made now")
        benchlib.gpu_files(self.a.dir, self.gpus, self.size, self.say)
        try:
            self.measure_ceiling()
            for section in ("bench", "pieces", "python", "tp_load"):
                if section not in self.skip and (section != "pieces" or self.a.pieces):
                    getattr(self, section)()
        finally:
            self.write_report()
            md = self.markdown()
            print(md)
            with open(os.path.join(self.a.out, "multi-gpu.md"), "w") as f:
                f.write(md)
            self.say(f"many GPUs: done in {(time.time() - self.started) / 60:.1f} min; multi-gpu.md, "
                     f"multi-gpu.json, multi-gpu.log in {self.a.out}")
        return 1 if any(not r.get("error", "skipped").startswith("skipped") for r in self.rows) else 0

    def estimate(self):
        bench = (3 * (self.a.seconds + 3) + 4) * (1 if self.a.quick or self.gpus < 2 else 2)
        alone = self.a.ceiling_seconds + 5 if self.lone_python_row() else 0
        pieces = 10 * len([v for v in self.a.pieces.split(",") if v]) * max(1, self.a.piece_rounds)
        return 2 * (self.a.ceiling_seconds + 5) + alone + bench + pieces + 25 + (25 if self.a.quick else 50)


def notes(r):
    out = []
    if "per_gpu" in r:
        out.append("per GPU " + " + ".join(f"{v:.1f}" for v in r["per_gpu"]))
    if "open_s" in r:
        out.append(f"gpufile.open up to {max(r['open_s']):.3f} s")
    if "rounds_gib_s" in r:
        out.append(f"{len(r['rounds_gib_s'])} rounds " + ", ".join(f"{v:.1f}" for v in r["rounds_gib_s"]))
    if "slowest_rank_s" in r:
        out.append(f"slowest rank {r['slowest_rank_s']:.3f} s" +
                   (f", ideal {r['ideal_s']:.3f} s ({r['slowest_over_ideal']:.2f}x)" if "ideal_s" in r else ""))
    if r.get("late"):
        out.append("a process started its copies late")
    if "note" in r:
        out.append(r["note"])
    return "; ".join(out)


# ---- the Python readers (fresh processes) ---------------------------------------------------------

def read_rounds(path, gpu, size, wait, rounds=3):
    """Opens `path`, allocates a CuPy array of `size` bytes on `gpu`, and reads the file into it:
    once (the first call) and `rounds` more times, each read after `wait()` (so that the readers
    of every GPU start together). Seconds of each."""
    import cupy as cp
    import gpufile
    device = getattr(cp.cuda, "Device", None)  # the CPU stand-in of CuPy has one device
    with (device(gpu) if device else contextlib.nullcontext()):
        buf = cp.empty(size, dtype=cp.uint8)
        t = time.perf_counter()
        f = gpufile.open(path)
        opened = time.perf_counter() - t
        times = []
        for _ in range(1 + rounds):
            wait()
            t = time.perf_counter()
            n = f.read(buf)
            cp.cuda.runtime.deviceSynchronize()
            times.append(time.perf_counter() - t)
            if n != size:
                raise RuntimeError(f"read {n} of {size} bytes")
        f.close()
    return {"gpu": gpu, "open_s": opened, "first_s": times[0], "steady_s": times[1:]}


def file_barrier(directory, parties, me):
    """A barrier between processes: each arrival leaves a file named after its round; all go on
    once `parties` files of the round are there (or after two minutes, which a stuck peer costs)."""
    count = [0]

    def wait():
        tag = f"r{count[0]}."
        count[0] += 1
        open(os.path.join(directory, f"{tag}{me}"), "w").close()
        until = time.time() + 120
        while sum(1 for n in os.listdir(directory) if n.startswith(tag)) < parties and time.time() < until:
            time.sleep(0.0005)
    return wait


def worker(spec):
    me = spec.get("me", spec["gpu"])  # its name at the barrier: the GPU, unless all see device 0
    wait = file_barrier(spec["barrier"], spec["parties"], me) if spec["parties"] > 1 else (lambda: None)
    print("RESULT " + json.dumps([read_rounds(spec["path"], spec["gpu"], spec["size"], wait,
                                              spec.get("rounds", 3))]), flush=True)


def threads(spec):
    paths = spec["paths"]
    barrier = threading.Barrier(len(paths))
    out, errors = [None] * len(paths), []

    def one(g):
        try:
            out[g] = read_rounds(paths[g], g, spec["size"], barrier.wait, spec.get("rounds", 3))
        except Exception as e:  # noqa: BLE001 (reported, and the others released)
            errors.append(repr(e))
            barrier.abort()
    pool = [threading.Thread(target=one, args=(g,)) for g in range(len(paths))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    print("RESULT " + json.dumps(out), flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] in ("worker", "threads"):
        return {"worker": worker, "threads": threads}[sys.argv[1]](json.loads(sys.argv[2]))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout`: still print what was measured
    return Run(parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
