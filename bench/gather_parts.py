"""Column-split parts of a warm checkpoint into one GPU: gathered out of the page cache
(gpufile.File._pread_rows_ptr, src/exec/gather.hpp) against read through their span (one read
of the rows' whole span, as the loaders' span path reads it; the pitched placement that follows
on the GPU is left out). Each world size's rank-0 parts of every tensor whose name holds one of
--names (row-parallel weights: split along their last dimension), one at a time (--serial
calls) and --at-once at a time, alternating gather and span, --rounds each. GB/s of the parts'
bytes (what each way must deliver).

    python3 bench/gather_parts.py /root/ckpt            # examples/tp_load.py's checkpoint

Needs torch with CUDA and gpufile; reads the checkpoint once first to warm it."""
import argparse
import glob
import os
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import gpufile
from gpufile import safetensors as gst


def parts(files, names, world):
    """(file, first row's offset, run, rows, row stride) of rank 0's part of each matching 2-D
    tensor split `world` ways along its last dimension."""
    out = []
    for path in files:
        h = gst.read_header(path)
        for name, t in h.tensors.items():
            if len(t.shape) == 2 and any(k in name for k in names):
                item = (t.end - t.begin) // (t.shape[0] * t.shape[1])
                run = -(-t.shape[1] // world) * item
                out.append((path, h.data_start + t.begin, run, t.shape[0], t.shape[1] * item))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", help="a directory of .safetensors shards")
    ap.add_argument("--names", default="o_proj,down_proj", help="comma list of name parts to split")
    ap.add_argument("--worlds", default="2,4,8", help="comma list of world sizes")
    ap.add_argument("--serial", type=int, default=8, help="parts read one at a time (the first N)")
    ap.add_argument("--at-once", type=int, default=8, help="parts in flight at once")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.checkpoint, "*.safetensors")))
    for path in files:
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass
    torch.cuda.set_device(a.device)
    opened = {p: gpufile.File(p) for p in files}
    biggest = max(rows * stride for w in map(int, a.worlds.split(","))
                  for _p, _o, _r, rows, stride in parts(files, a.names.split(","), w))
    slots = a.at_once
    buf = torch.empty(slots * biggest, dtype=torch.uint8, device=f"cuda:{a.device}")

    def one(way, part, slot):
        path, first, run, rows, stride = part
        f, at = opened[path], buf.data_ptr() + slot * biggest
        if way == "gather":
            got = f._pread_rows_ptr(at, run, [rows], [stride], first).result()
            assert got == run * rows, (got, run * rows)
        else:
            span = (rows - 1) * stride + run
            assert f.pread_ptr(at, span, first).result() == span
        return run * rows

    print(f"# {torch.cuda.get_device_name(a.device)}, {os.cpu_count()} CPUs, {len(files)} files; "
          f"GB/s of the parts' bytes")
    for world in map(int, a.worlds.split(",")):
        ps = parts(files, a.names.split(","), world)
        for r in range(a.rounds):
            for way in ("gather", "span"):
                t = time.perf_counter()
                moved = sum(one(way, p, 0) for p in ps[:a.serial])
                torch.cuda.synchronize()
                serial = moved / 1e9 / (time.perf_counter() - t)
                t = time.perf_counter()
                with ThreadPoolExecutor(a.at_once) as ex:
                    moved = sum(ex.map(lambda ip: one(way, ip[1], ip[0] % slots), enumerate(ps)))
                torch.cuda.synchronize()
                at_once = moved / 1e9 / (time.perf_counter() - t)
                print(f"world {world} round {r + 1} {way:6s}: one at a time {serial:6.2f}, "
                      f"{a.at_once} at once {at_once:6.2f} ({len(ps)} parts, {moved / 1e9:.2f} GB)", flush=True)


if __name__ == "__main__":
    main()
