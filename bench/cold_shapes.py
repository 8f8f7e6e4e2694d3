#!/usr/bin/env python3
"""Which read shape a cold disk serves fastest: fio's O_DIRECT points and gpufile's reads (each a
fresh process, with its own settings) of one cold file, in alternating rounds, the page cache
dropped before every reading. A virtual disk's readings differ from one to the next by more than
the shapes do, so each reader runs in every round and the table gives medians.

    python3 bench/cold_shapes.py FILE --rounds 5 \\
        fio:512K:16 fio:4M:48 gpufile:default gpufile:bypass:GPUFILE_CACHE_POLICY=bypass

A reader is `fio:BLOCK:DEPTH` (one job, io_uring, `O_DIRECT`), `gpufile:LABEL[:VAR=VALUE,...]`
(`gpufile.open(FILE).read` of the whole file into a `gpufile.DeviceBuffer` on GPU 0, the clock
around the read only) or `fastsafetensors` (its loader with `nogds=True`, as users call it, of
FILE as a safetensors file, the clock around `copy_files_to_device` and a synchronize; torch's
CUDA context made before). `--make GIB` first writes FILE, where it is missing, as a
safetensors file of one uint8 tensor of that many GiB of random bytes, which every reader can
read. Needs root (drop_caches); fio on PATH or --fio.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import drop_caches
from checkpoint_bench import GB, fio_direct_gbps

GPUFILE_READ = """
import gpufile, json, os, sys, time
path = sys.argv[1]
n = os.path.getsize(path)
buf = gpufile.DeviceBuffer(n, device=0)
with gpufile.open(path) as f:
    t = time.perf_counter()
    got = f.read(buf)
    seconds = time.perf_counter() - t
print(json.dumps({"bytes": got, "seconds": seconds}))
"""

FASTSAFETENSORS_READ = """
import json, sys, time, torch
from fastsafetensors import SafeTensorsFileLoader
path = sys.argv[1]
torch.empty(1, device="cuda:0")
loader = SafeTensorsFileLoader(None, "cuda:0", nogds=True)
loader.add_filenames({0: [path]})
t = time.perf_counter()
fb = loader.copy_files_to_device()
torch.cuda.synchronize()
seconds = time.perf_counter() - t
got = sum(fb.get_tensor(k).nbytes for k in loader.get_keys())
fb.close()
loader.close()
print(json.dumps({"bytes": got, "seconds": seconds}))
"""


def parse_reader(text):
    kind, _, rest = text.partition(":")
    if kind == "fio":
        bs, depth = rest.split(":")
        return {"label": f"fio {bs} x {depth}", "kind": "fio", "bs": bs, "depth": int(depth)}
    if kind == "gpufile":
        label, _, env = rest.partition(":")
        pairs = dict(kv.split("=", 1) for kv in env.split(",") if kv)
        return {"label": f"gpufile {label}", "kind": "gpufile", "env": pairs}
    if kind == "fastsafetensors" and not rest:
        return {"label": "fastsafetensors", "kind": "fastsafetensors", "env": {}}
    raise argparse.ArgumentTypeError(f"not a reader: {text}")


def read_once(reader, path, fio):
    """GB/s of one reading of the cold file (the page cache dropped first)."""
    if reader["kind"] == "fio":
        return fio_direct_gbps(fio, path, reader["bs"], reader["depth"], 1)
    drop_caches()
    script = GPUFILE_READ if reader["kind"] == "gpufile" else FASTSAFETENSORS_READ
    r = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, **reader["env"]))
    if r.returncode:
        raise RuntimeError((r.stderr.strip().splitlines() or ["?"])[-1])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # gpufile reads the whole file; fastsafetensors its data section (all but the header).
    want = os.path.getsize(path) - (data_offset(path) if reader["kind"] == "fastsafetensors" else 0)
    if out["bytes"] != want:
        raise RuntimeError(f"read {out['bytes']} bytes of {want}")
    return out["bytes"] / out["seconds"] / GB


def data_offset(path):
    """Where a safetensors file's data section starts: 8 bytes of header length, the header."""
    with open(path, "rb") as f:
        return 8 + int.from_bytes(f.read(8), "little")


def make_file(path, gib):
    """A safetensors file of one uint8 tensor of `gib` GiB of random bytes."""
    n = gib << 30
    header = json.dumps({"data": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
    header += b" " * (-len(header) % 8)  # the data section starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        for _ in range(gib * 16):
            f.write(os.urandom(64 << 20))
    os.sync()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("readers", nargs="+", type=parse_reader)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--fio", default=shutil.which("fio"))
    ap.add_argument("--make", type=int, metavar="GIB",
                    help="write FILE first, where it is missing: a safetensors file of GIB GiB")
    args = ap.parse_args()
    if args.make and not os.path.exists(args.path):
        make_file(args.path, args.make)
    results = {r["label"]: [] for r in args.readers}
    for rnd in range(args.rounds):
        order = args.readers if rnd % 2 == 0 else args.readers[::-1]
        for reader in order:
            try:
                gbps = read_once(reader, args.path, args.fio)
            except (OSError, RuntimeError, ValueError, KeyError, subprocess.SubprocessError) as e:
                print(f"round {rnd} {reader['label']}: failed: {e}", flush=True)
                continue
            results[reader["label"]].append(gbps)
            print(f"round {rnd} {reader['label']}: {gbps:.2f} GB/s", flush=True)
    print(f"\n{os.path.getsize(args.path) / GB:.2f} GB, {args.rounds} rounds, "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| reader | GB/s, each round | median | fastest |\n|---|---|---|---|")
    for label, xs in results.items():
        if xs:
            print(f"| {label} | {', '.join(f'{x:.2f}' for x in xs)} | {statistics.median(xs):.2f} | {max(xs):.2f} |")


if __name__ == "__main__":
    main()
