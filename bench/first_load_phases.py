#!/usr/bin/env python3
"""Where the first load of a checkpoint spends its time (issue 13): one safetensors file into
cuda:0, each variant in a fresh process whose CUDA context exists before the clock starts (as in
bench/checkpoint_bench.py), the page cache warm.

Variants, each timed from the first gpufile call to torch.cuda.synchronize():
  load_file             gpufile.safetensors.load_file(path, device="cuda:0"), as users call it
  load_file/open-first  the same, gpufile's session opened before the clock starts
  load_file/with-import the same, the clock started before `import gpufile.safetensors`: what a
                        serving process's start pays from its import to weights in GPU memory
                        (torch imported and its CUDA context made before, as a server has)
  views                 load_file(..., views=True): one allocation and one read per file
  phases                load_file's steps one after another, each timed: headers, the
                        destinations' allocation, the session's open, the reads (one future
                        per tensor)
  raw                   one read of the file's data section into one device buffer allocated
                        before the clock, the session opened before it: the ceiling a loader
                        is compared against (issue 13's "raw read of the same bytes")
  raw/with-open         the same read, the session's open inside the clock
  allocate              no read: only load_file's destinations allocated (torch.empty per
                        tensor), to tell slow allocations from slow reads

--pause S sleeps S seconds between processes (the GPU's memory, freed by the last process,
may still be being cleared when the next one allocates).

    python3 bench/first_load_phases.py /root/ckpt/model.safetensors --reps 3 --out /tmp/o
Each variant runs --reps times, each in its own process; one markdown table to stdout and
first_load_phases.json in --out.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from benchlib import warm
from checkpoint_bench import cuda_ready

VARIANTS = ("raw", "raw/with-open", "load_file", "load_file/open-first", "load_file/with-import", "views",
            "phases", "allocate")


def data_section(path):
    import gpufile.safetensors as gs
    h = gs.read_header(path)
    lo = min((t.begin for t in h.tensors.values()), default=0)
    hi = max((t.end for t in h.tensors.values()), default=0)
    return h.data_start + lo, hi - lo


def run_raw(torch, path, open_first):
    import gpufile
    offset, nbytes = data_section(path)
    buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    if open_first:
        gpufile.driver_open()
    t0 = time.perf_counter()
    with gpufile.File(path, "r") as f:
        got = f.pread_ptr(buf.data_ptr(), nbytes, offset).result()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    assert got == nbytes, f"read {got} of {nbytes} bytes"
    return {"seconds": seconds, "bytes": nbytes}


def run_load(torch, path, open_first, views):
    import gpufile
    import gpufile.safetensors as gs
    if open_first:
        gpufile.driver_open()
    t0 = time.perf_counter()
    out = gs.load_file(path, device="cuda:0", views=views)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "bytes": sum(t.numel() * t.element_size() for t in out.values()),
            "tensors": len(out)}


def run_load_with_import(torch, path):
    if any(m == "gpufile" or m.startswith("gpufile.") for m in sys.modules):
        raise SystemExit("gpufile was imported before the clock started")
    t0 = time.perf_counter()
    import gpufile.safetensors as gs
    imported = time.perf_counter()
    out = gs.load_file(path, device="cuda:0")
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "bytes": sum(t.numel() * t.element_size() for t in out.values()),
            "tensors": len(out), "steps": {"import": imported - t0, "load_file": seconds - (imported - t0)}}


def run_phases(torch, path):
    """load_file's steps in order, none overlapped (the background open waited for at once)."""
    import gpufile.safetensors as gs
    marks = [("start", time.perf_counter())]
    t = gs._target("pt", "cuda:0")
    sources = gs._sources(path)
    marks.append(("headers", time.perf_counter()))
    plans, total = allocate_all(gs, t, sources)
    gs._settle_allocations(t)
    marks.append(("allocate", time.perf_counter()))
    gs._SessionOpening().wait()
    marks.append(("session open", time.perf_counter()))
    gs._read_all([(src, [io[:4] for io in ios], []) for src, ios in plans])
    torch.cuda.synchronize()
    marks.append(("reads", time.perf_counter()))
    steps = {name: marks[i][1] - marks[i - 1][1] for i, (name, _) in enumerate(marks) if i}
    return {"seconds": marks[-1][1] - marks[0][1], "bytes": total, "steps": steps}


def allocate_all(gs, t, sources):
    """load_file's destinations of every tensor of `sources`: per source, (src, [(ptr, nbytes,
    file offset, name, tensor)]); and the bytes they hold."""
    plans, total = [], 0
    for src in sources:
        ios = []
        for n in src.names:
            info = src.header.tensors[n]
            dest = gs._allocate(t, info.dtype, info.shape)
            ios.append((dest.ptr, info.nbytes, src.header.data_start + info.begin, n, dest.obj))
            total += info.nbytes
        plans.append((src, ios))
    return plans, total


def run_allocate(torch, path):
    import gpufile.safetensors as gs
    t0 = time.perf_counter()
    t = gs._target("pt", "cuda:0")
    _plans, total = allocate_all(gs, t, gs._sources(path))
    torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - t0, "bytes": total}


def path_bytes():
    """GiB read by each of gpufile's data paths so far in this process (a slow run may have
    staged what a fast one copied straight out of the page cache)."""
    import gpufile
    paths = gpufile.stats()["read"]["paths"]
    return {k: round(v["bytes"] / 2**30, 2) for k, v in paths.items() if v["bytes"]}


def worker(variant, path):
    r = run_variant(variant, path)
    if variant != "allocate":
        r["paths"] = path_bytes()
    return r


def run_variant(variant, path):
    torch = cuda_ready()
    if variant == "raw":
        return run_raw(torch, path, open_first=True)
    if variant == "raw/with-open":
        return run_raw(torch, path, open_first=False)
    if variant == "load_file":
        return run_load(torch, path, open_first=False, views=False)
    if variant == "load_file/open-first":
        return run_load(torch, path, open_first=True, views=False)
    if variant == "load_file/with-import":
        return run_load_with_import(torch, path)
    if variant == "views":
        return run_load(torch, path, open_first=False, views=True)
    if variant == "phases":
        return run_phases(torch, path)
    if variant == "allocate":
        return run_allocate(torch, path)
    raise SystemExit(f"unknown variant {variant}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker, args.path)), flush=True)
        return
    warm(args.path, times=2)
    rows = []
    for rep in range(args.reps):
        for v in args.variants.split(","):
            time.sleep(args.pause)
            p = subprocess.run([sys.executable, __file__, args.path, "--worker", v],
                               capture_output=True, text=True, timeout=300)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"{v}: failed rc {p.returncode}\n{p.stderr[-2000:]}", file=sys.stderr)
                continue
            r = json.loads(line[0][7:])
            r.update(variant=v, rep=rep)
            rows.append(r)
    raw = [r["bytes"] / r["seconds"] for r in rows if r["variant"] == "raw"]
    best_raw = max(raw) if raw else None
    print("| variant | seconds (each run) | GB/s (best) | of the best raw read (each run) | steps (ms, best run) |")
    print("|---|---|---|---|---|")
    for v in args.variants.split(","):
        rs = [r for r in rows if r["variant"] == v]
        if not rs:
            continue
        best = min(rs, key=lambda r: r["seconds"])
        rate = best["bytes"] / best["seconds"]
        frac = ", ".join(f"{r['bytes'] / r['seconds'] / best_raw:.0%}" for r in rs) \
            if best_raw and v != "allocate" else ""
        steps = ", ".join(f"{k} {s * 1e3:.1f}" for k, s in best.get("steps", {}).items())
        print(f"| {v} | {', '.join('%.3f' % r['seconds'] for r in rs)} | {rate / 1e9:.2f} | {frac} | {steps} |")
    for r in rows:  # every run's steps and data paths: a slow run shows which step was slow
        steps = ", ".join(f"{k} {s * 1e3:.1f} ms" for k, s in r.get("steps", {}).items())
        paths = ", ".join(f"{k} {g} GiB" for k, g in r.get("paths", {}).items())
        print(f"{r['variant']} run {r['rep']}: {r['seconds']:.3f} s; " + "; ".join(x for x in (steps, paths) if x))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "first_load_phases.json"), "w") as f:
            json.dump({"path": args.path, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
