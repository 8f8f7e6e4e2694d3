#!/usr/bin/env python3
"""Tensor-parallel checkpoint loading side by side, on every GPU of the host: gpufile,
fastsafetensors and InstantTensor, each loading a sharded checkpoint the way its users do under
torchrun (issue 29). Every (round, loader) is a fresh `torchrun` start; the rounds reverse the
loaders' order; with --cold the page cache is dropped before each start.

    python3 bench/tp_peers.py /root/ckpt                       # warm, 2 rounds, every loader
    python3 bench/tp_peers.py /root/ckpt --cold --rounds 2 --loaders gpufile:parts,fastsafetensors:parts

What each rank holds at the end ("outcome"):
  parts  its tensor-parallel part of every split tensor (examples/tp_load.py's split rule:
         q/k/v/gate/up/embeddings along rows, o_proj/down_proj along columns), the rest whole
  whole  every tensor whole
Loaders (LOADER:OUTCOME):
  gpufile:parts           gpufile.safetensors.load_sharded(path, device, split): each rank reads
                          only its parts' bytes
  gpufile:whole           gpufile.safetensors.load_file(path, device) on every rank
  fastsafetensors:parts   SafeTensorsFileLoader(process group, device, nogds=True) with the files
                          dealt round-robin to the ranks, copy_files_to_device(), then
                          get_sharded(name, dim) for split tensors (a scatter over NCCL) and
                          get_tensor(name) for the rest (a broadcast): vLLM's use of it
  fastsafetensors:whole   the same, get_tensor for every tensor
  instanttensor:whole     instanttensor.safe_open(files, "pt", device, process_group=WORLD): its
                          distributed loading, every rank receives every tensor
  instanttensor:parts     the same, then each split tensor's part copied out (narrow + clone), as
                          a framework fills its parameter shards from whole tensors
Each rank's time runs from a barrier to its tensors being on its GPU (torch.cuda.synchronize);
the table gives the slowest rank. A digest of each rank's tensors (a sum of their bytes as
integers) is compared between the loaders of one outcome: a loader that returns other bytes is
marked. GB = 1e9 bytes.

Peers come from .whl (bench/tp-peers-run.sh installs them into /tmp/site); a loader that cannot
be imported gets a row that says so. Without CUDA (`--backend gloo`), gpufile and fastsafetensors
run on host memory: the same code, for checking this harness on a machine without a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

LOADERS = ("gpufile:parts", "fastsafetensors:parts", "instanttensor:parts",
           "gpufile:whole", "fastsafetensors:whole", "instanttensor:whole")


# ---- the worker: one loader on every rank, under torchrun ----------------------------------------

def shard_files(ckpt: str):
    with open(os.path.join(ckpt, "model.safetensors.index.json")) as f:
        names = sorted(set(json.load(f)["weight_map"].values()))
    return [os.path.join(ckpt, n) for n in names]


def part_of(t, dim, rank, world):
    """Rank `rank`'s part of the whole tensor `t` along `dim`, as its own tensor."""
    from gpufile import safetensors as gst
    return t[gst.shard_slice(tuple(t.shape), dim, rank, world)].clone()


def load_gpufile(ckpt, device, outcome, pg, rank, world):
    from gpufile import safetensors as gst
    import tp_load
    if outcome == "parts":
        return gst.load_sharded(ckpt, device, tp_load.split_dim), "load_sharded"
    return gst.load_file(ckpt, device=device), "load_file"


def load_fastsafetensors(ckpt, device, outcome, pg, rank, world):
    from fastsafetensors import SafeTensorsFileLoader
    import tp_load
    files = shard_files(ckpt)
    loader = SafeTensorsFileLoader(pg, str(device), nogds=True)
    out = {}
    try:
        loader.add_filenames({r: files[r::world] for r in range(world)})
        fb = loader.copy_files_to_device()
        try:
            for name in loader.get_keys():
                dim = tp_load.split_dim(name, tuple(loader.get_shape(name)))
                if outcome == "parts" and dim is not None:
                    out[name] = fb.get_sharded(name, dim)
                else:
                    out[name] = fb.get_tensor(name)
        finally:
            fb.close()  # tensors keep shared ownership of their buffer (its docs)
    finally:
        loader.close()
    return out, f"nogds=True, copier {loader.copier_class.__name__}, files dealt round-robin"


def load_instanttensor(ckpt, device, outcome, pg, rank, world):
    import tp_load
    from instanttensor import safe_open
    out = {}
    with safe_open(shard_files(ckpt), framework="pt", device=device, process_group=pg) as f:
        backend = f.backend.name
        for name, t in f.tensors():  # copy=True (the default): tensors own their memory
            dim = tp_load.split_dim(name, tuple(t.shape))
            out[name] = part_of(t, dim, rank, world) if outcome == "parts" and dim is not None else t
    how = "distributed safe_open" + (", parts narrowed and cloned" if outcome == "parts" else "")
    return out, f"backend {backend}; {how}"


LOAD = {"gpufile": load_gpufile, "fastsafetensors": load_fastsafetensors,
        "instanttensor": load_instanttensor}


def digest(tensors) -> int:
    """A digest of every tensor's bytes, in name order: each 64-bit word weighted by its place
    (so bytes moved within a tensor, a misplaced part, change it), summed mod 2**61. Equal bytes
    give equal digests whatever the loader; computed on the tensors' device, in blocks."""
    import torch
    total, block = 0, 1 << 24  # words a block
    for name in sorted(tensors):
        b = tensors[name].contiguous().view(torch.uint8).flatten()
        pad = (-b.numel()) % 8
        if pad:
            b = torch.cat([b, torch.zeros(pad, dtype=torch.uint8, device=b.device)])
        words = b.view(torch.int64)
        h = 0
        for start in range(0, words.numel(), block):
            w = words[start:start + block]
            place = torch.arange(start, start + w.numel(), device=w.device, dtype=torch.int64) % 65521 + 1
            h = (h + int((w * place).sum().item())) % (1 << 61)  # int64 products wrap alike everywhere
        total = (total * 1000003 + h) % (1 << 61)
    return total


def worker(args) -> int:
    import torch
    import torch.distributed as dist
    loader, outcome = args.worker.split(":")
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    cuda = args.backend == "nccl"
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    pg = dist.group.WORLD
    result = {"loader": args.worker, "rank": rank}
    try:
        dist.barrier()
        start = time.perf_counter()
        tensors, note = LOAD[loader](args.checkpoint, device, outcome, pg, rank, world)
        if cuda:
            torch.cuda.synchronize(device)
        result.update(seconds=time.perf_counter() - start, note=note,
                      bytes=sum(t.numel() * t.element_size() for t in tensors.values()),
                      digest=digest(tensors))
    except Exception as e:  # noqa: BLE001 - reported as the row's failure
        result["error"] = f"{type(e).__name__}: {e}"
    gathered = [None] * world
    dist.all_gather_object(gathered, result)
    if rank == 0:
        print("RESULT " + json.dumps(gathered), flush=True)
    dist.destroy_process_group()
    return 0


# ---- the driver: fresh starts, alternating rounds -------------------------------------------------

def one_start(args, loader):
    if args.cold:
        subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=False)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
           os.path.abspath(__file__), args.checkpoint, "--worker", loader, "--backend", args.backend]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        out = p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return {"error": f"no result within {args.timeout} s", "log": str(e.stdout or "")[-2000:]}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            ranks = json.loads(line[7:])
            errors = [r["error"] for r in ranks if "error" in r]
            if errors:
                return {"error": errors[0]}
            return {"seconds": [r["seconds"] for r in ranks], "bytes": [r["bytes"] for r in ranks],
                    "digest": [r["digest"] for r in ranks], "note": ranks[0]["note"]}
    return {"error": "no RESULT line (exit %d)" % p.returncode, "log": out[-2000:]}


def table(args, runs) -> str:
    from benchlib import commit
    lines = [f"# Tensor-parallel loading side by side: {args.nproc} ranks, "
             f"{'cold (caches dropped before each start)' if args.cold else 'warm'}, {args.checkpoint}, "
             f"gpufile {commit()}, {time.strftime('%Y-%m-%d')}",
             "", "| loader | outcome | slowest rank, s, each round | GB a rank | GB/s a rank (best) | digest | note |",
             "|---|---|---|---|---|---|---|"]
    reference = {}
    for loader in args.loaders:  # the first loader of an outcome that ran sets its reference
        for r in runs[loader]:
            if "digest" in r:
                reference.setdefault(loader.split(":")[1], r["digest"])
    for loader in args.loaders:
        name, outcome = loader.split(":")
        rs = runs[loader]
        ok = [r for r in rs if "seconds" in r]
        if not ok:
            lines.append(f"| {name} | {outcome} | failed: {rs[0].get('error', '?')[:160]} | | | | |")
            continue
        slowest = [max(r["seconds"]) for r in ok]
        gb = max(ok[0]["bytes"]) / 1e9
        same = all(r["digest"] == reference[outcome] for r in ok)
        lines.append(f"| {name} | {outcome} | {', '.join(f'{s:.3f}' for s in slowest)} | {gb:.2f} | "
                     f"{gb / min(slowest):.2f} | {'same' if same else 'DIFFERENT bytes'} | {ok[0]['note']} |")
    return "\n".join(lines)


def driver(args) -> int:
    index = os.path.join(args.checkpoint, "model.safetensors.index.json")
    if not os.path.exists(index):
        print(f"no checkpoint in {args.checkpoint}: make one with "
              f"`torchrun --nproc-per-node {args.nproc} examples/tp_load.py {args.checkpoint} --make-gb 8`")
        return 2
    runs = {loader: [] for loader in args.loaders}
    for round_no in range(args.rounds):
        order = args.loaders if round_no % 2 == 0 else list(reversed(args.loaders))
        for loader in order:
            r = one_start(args, loader)
            runs[loader].append(r)
            shown = f"slowest {max(r['seconds']):.3f} s" if "seconds" in r else r["error"][:200]
            print(f"round {round_no + 1} {loader}: {shown}", flush=True)
    text = table(args, runs)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "tp-peers.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(args.out, "tp-peers.json"), "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a directory holding model.safetensors.index.json and its shards")
    p.add_argument("--loaders", type=lambda s: s.split(","), default=list(LOADERS),
                   help="comma-separated LOADER:OUTCOME (default: all six)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cold", action="store_true", help="drop the page cache before each start (root)")
    p.add_argument("--nproc", type=int, default=0, help="ranks (default: every GPU, 2 without CUDA)")
    p.add_argument("--backend", default=None, help="nccl (default with CUDA) or gloo")
    p.add_argument("--timeout", type=int, default=240, help="seconds one start may take")
    p.add_argument("--out", default=os.environ.get("OUT"), help="where tp-peers.md and .json go")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.backend is None or args.nproc == 0:
        try:
            import torch
            gpus = torch.cuda.device_count()
        except ImportError:
            gpus = 0
        args.backend = args.backend or ("nccl" if gpus else "gloo")
        args.nproc = args.nproc or (gpus or 2)
    for loader in args.loaders:
        if loader not in LOADERS:
            p.error(f"unknown loader {loader!r}: one of {', '.join(LOADERS)}")
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
