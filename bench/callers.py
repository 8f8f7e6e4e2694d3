#!/usr/bin/env python3
"""Many concurrent synchronous callers, with the ceilings taken in the same run (issue 10).

Run by bench/callers-run.sh on the GPU machine; writes callers.md and callers.json to --out.
Every gpufile point is `gpufile bench` (one file shared by the threads, each thread its own
slice, registered device buffers unless said otherwise); every ceiling is `gpufile_compare`.
Sections (--sections, comma-separated; about a minute each but `callers`, about four):
  ceilings  pinned host-to-device; plain pread by N threads of each IO size (pageable and pinned
            buffers, the better counts), ext4 and /dev/shm
  callers   synchronous cuFileRead from 4, 8 and 16 threads, 1, 4 and 16 MiB, warm ext4 and
            /dev/shm, into GPU memory; pinned host memory at 4 MiB x 16; writes of 4 MiB
  dali      one registered 256 MiB pool, 2 MiB reads into slots inside it, 8 threads
  small     4 KiB random reads: 1 and 16 synchronous threads; the batch API, one batch of 128 in
            flight and four at once
  cold      16 callers x 4 MiB after dropping the page cache, against O_DIRECT at depth 16
"""
import argparse
import json
import os
import re
import subprocess
import sys

MIB = 1 << 20
SIZES = [("1M", 1), ("4M", 4), ("16M", 16)]
THREADS = [4, 8, 16]


class Run:
    def __init__(self, a):
        self.a = a
        self.points = []
        self.ceil = {}
        self.md = []
        self.files = {"ext4": os.path.join(a.dir, "callers.bin"), "shm": "/dev/shm/callers.bin"}

    def sh(self, cmd, timeout=300):
        r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
        return r.stdout + r.stderr

    def compare(self, *args):
        out = self.sh(" ".join([os.path.join(self.a.build, "bench/gpufile_compare")] + [str(x) for x in args]))
        m = re.search(r"([0-9.]+) GiB/s cpu\s+([0-9.]+) s/GiB(.*)", out)
        if not m:
            print("compare failed:", args, out.strip()[-300:])
            return None
        p50 = re.search(r"p50 ([0-9.]+) us p99 ([0-9.]+) us", out)
        return {"gib_s": float(m.group(1)), "cpu_s_per_gib": float(m.group(2)),
                "p50_us": float(p50.group(1)) if p50 else None, "p99_us": float(p50.group(2)) if p50 else None}

    def bench(self, args, env=""):
        cmd = f"{env} {os.path.join(self.a.build, 'cli/gpufile')} bench {args} --no-progress --json"
        out = self.sh(cmd)
        i = out.find("{")
        if i < 0:
            print("bench failed:", cmd, out.strip()[-300:])
            return None
        j = json.loads(out[i:out.index("}", i) + 1])
        return {"gib_s": j["throughput_gib_s"], "iops": j["ops"] / max(j["total_time_s"], 1e-9),
                "p50_us": j["p50_latency_us"], "p99_us": j["p99_latency_us"],
                "cpu_s_per_gib": j["cpu_s_per_gib"]}

    def say(self, line):
        print(line, flush=True)
        self.md.append(line)

    def make_files(self):
        f = self.files["ext4"]
        if not os.path.exists(f) or os.path.getsize(f) != self.a.size_gib << 30:
            self.sh(f"dd if=/dev/urandom of={f} bs=16M count={self.a.size_gib * 64} status=none", 600)
        if not os.path.exists(self.files["shm"]):
            self.sh(f"cp {f} {self.files['shm']}", 600)

    def warm(self, which):
        # Read three times: a page read the second time is dearer than later (the kernel
        # activates it then), and the first points of a run paid for that.
        for _ in range(3):
            self.sh(f"cat {self.files[which]} > /dev/null", 600)

    # ---- sections ---------------------------------------------------------------------------
    def ceilings(self):
        r = self.compare("h2d-pinned")
        self.ceil["h2d"] = r["gib_s"] if r else None
        self.say(f"\n### Ceilings\n\npinned host-to-device (1 GiB copies): **{self.ceil['h2d']}** GiB/s\n")
        self.say("| file | IO | threads | pread, pageable | pread, pinned | ceiling = min(H2D, best pread) |")
        self.say("|---|---|---|---|---|---|")
        for which in ("ext4", "shm"):
            self.warm(which)
            for name, mib in SIZES:
                for t in THREADS:
                    pg = self.compare("pread", self.files[which], t, mib * 1024)
                    pn = self.compare("pread", self.files[which], t, mib * 1024, "pinned")
                    best = max(x["gib_s"] for x in (pg, pn) if x)
                    c = min(best, self.ceil["h2d"])
                    self.ceil[(which, name, t)] = c
                    self.ceil[(which, name, t, "pread")] = best
                    self.say(f"| {which} | {name} | {t} | {pg and pg['gib_s']} | {pn and pn['gib_s']} | {c:.2f} |")

    def ceiling_of(self, which, name, t):
        return self.ceil.get((which, name, t)) or self.ceil.get("h2d")

    def row(self, label, r, ceiling, extra=""):
        if not r:
            self.say(f"| {label} | failed | | | | |")
            return
        frac = f"{100 * r['gib_s'] / ceiling:.0f}% of {ceiling:.2f}" if ceiling else "-"
        self.say(f"| {label} | **{r['gib_s']:.2f}** | {frac} | {r['p50_us']:.0f} / "
                 f"{r['p99_us']:.0f} | {r['cpu_s_per_gib']:.3f} | {extra} |")
        self.points.append({"case": label, **r, "ceiling": ceiling})

    def callers(self):
        self.say("\n### Synchronous callers (cuFileRead into GPU memory unless said)\n")
        self.say("| case | GiB/s | vs ceiling | p50 / p99 µs per call | CPU-s/GiB | |")
        self.say("|---|---|---|---|---|---|")
        for which in ("ext4", "shm"):
            self.warm(which)
            f = self.files[which]
            for name, _ in SIZES:
                for t in THREADS:
                    r = self.bench(f"-f {f} -s {self.a.size_gib}G -T {self.a.seconds} -i {name} -w {t} -x 0 -I 0")
                    self.row(f"{which} {name} x {t}", r, self.ceiling_of(which, name, t))
            r = self.bench(f"-f {f} -s {self.a.size_gib}G -T {self.a.seconds} -i 4M -w 16 -x 1 -I 0")
            self.row(f"{which} 4M x 16, pinned host memory", r, self.ceil.get((which, "4M", 16, "pread")),
                     "no copy to the GPU: the ceiling is pread's alone")
        for which in ("ext4", "shm"):
            f = self.files[which]
            wc = self.compare("fswrite", f, 16)
            note = f"for scale: 16 threads pwrite + fsync {wc['gib_s']:.2f} GiB/s" if wc else ""
            for t in THREADS:
                r = self.bench(f"-f {f} -s {self.a.size_gib}G -T {self.a.seconds} -i 4M -w {t} -x 0 -I 1")
                self.row(f"{which} write 4M x {t}", r, None, note)

    def dali(self):
        self.warm("ext4")
        self.say("\n### DALI's pattern: 8 threads, 2 MiB reads into one registered 256 MiB pool\n")
        self.say("| case | GiB/s | vs ceiling | p50 / p99 µs per call | CPU-s/GiB | |")
        self.say("|---|---|---|---|---|---|")
        pg = self.compare("pread", self.files["ext4"], 8, 2048)
        pn = self.compare("pread", self.files["ext4"], 8, 2048, "pinned")
        c = min(max(x["gib_s"] for x in (pg, pn) if x), self.ceil.get("h2d") or 1e9)
        r = self.compare("dali", self.files["ext4"], 8, self.a.seconds)
        self.row("ext4 warm, 2 MiB x 8 into one pool", r, c, "ceiling: min(H2D, pread 8 x 2 MiB)")

    def small(self):
        self.warm("ext4")
        f = self.files["ext4"]
        self.say("\n### 4 KiB random reads (IOPS)\n")
        self.say("| case | IOPS | p50 / p99 µs | CPU-s/GiB |")
        self.say("|---|---|---|---|")
        for label, args in (("synchronous, 1 thread", "-w 1 -x 0"), ("synchronous, 16 threads", "-w 16 -x 0"),
                            ("batch API, one batch of 128 in flight", "-w 128 -x 6"),
                            ("batch API, one batch of 32 in flight", "-w 32 -x 6")):
            r = self.bench(f"-f {f} -s {self.a.size_gib}G -T {self.a.seconds} -i 4K -I 2 {args}")
            if r:
                self.say(f"| {label} | **{r['iops']:,.0f}** | {r['p50_us']:.1f} / {r['p99_us']:.1f} | {r['cpu_s_per_gib']:.2f} |")
                self.points.append({"case": "4K " + label, **r})
        job = os.path.join(self.a.out, "batch4.gdsio")
        with open(job, "w") as j:
            j.write(f"[global]\nxfer_type=6\nrw=randread\nbs=4K\nsize={self.a.size_gib}G\nruntime={self.a.seconds}\n"
                    f"filename={f}\nnum_threads=128\n[job1]\n[job2]\n[job3]\n[job4]\n")
        out = self.sh(f"{os.path.join(self.a.build, 'cli/gpufile')} bench {job}")
        m = re.search(r"ops: (\d+) total_time ([0-9.]+)", out)
        if m:
            iops = int(m.group(1)) / float(m.group(2))
            self.say(f"| batch API, four batches of 128 in flight (four threads) | **{iops:,.0f}** | | |")
            self.points.append({"case": "4K batch x4", "iops": iops})
        else:
            print("batch job failed:", out[-300:])

    def cold(self):
        f = self.files["ext4"]
        drop = "sync; echo 3 > /proc/sys/vm/drop_caches"
        self.say("\n### Cold: 16 callers x 4 MiB, page cache dropped before each\n")
        self.say("| case | GiB/s | vs ceiling | p50 / p99 µs per call | CPU-s/GiB | |")
        self.say("|---|---|---|---|---|---|")
        self.sh(drop)
        d = self.compare("direct-read", f, 16)
        self.sh(drop)
        r = self.bench(f"-f {f} -s {self.a.size_gib}G -i 4M -w 16 -x 0 -I 0")
        self.row("ext4 cold, 4M x 16 (one pass)", r, d["gib_s"] if d else None,
                 "ceiling: O_DIRECT, 16 threads x 16 MiB")

    def write(self):
        with open(os.path.join(self.a.out, "callers.md"), "w") as f:
            f.write("\n".join(self.md) + "\n")
        with open(os.path.join(self.a.out, "callers.json"), "w") as f:
            json.dump({"ceilings": {str(k): v for k, v in self.ceil.items()}, "points": self.points}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/gpu")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpufile-out"))
    ap.add_argument("--dir", default="/root")
    ap.add_argument("--size-gib", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=2)
    ap.add_argument("--sections", default="ceilings,callers,dali,small,cold")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    run = Run(a)
    run.make_files()
    sections = a.sections.split(",")
    if "ceilings" not in sections:
        r = run.compare("h2d-pinned")
        run.ceil["h2d"] = r["gib_s"] if r else None
    for s in ("ceilings", "callers", "dali", "small", "cold"):
        if s in sections:
            getattr(run, s)()
    run.write()
    for f in run.files.values():
        if f.startswith("/dev/shm") and "keep" not in os.environ.get("CALLERS_KEEP", ""):
            os.remove(f)


if __name__ == "__main__":
    sys.exit(main())
