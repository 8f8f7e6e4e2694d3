"""Tensor-parallel checkpoint loading with gpufile, one process per GPU.

    torchrun --nproc-per-node 2 examples/tp_load.py /data/ckpt --make-gb 4
    torchrun --nproc-per-node 2 examples/tp_load.py /data/ckpt --into --compare

Each rank reads only its part of every split tensor of a sharded checkpoint
(model.safetensors.index.json) straight into its GPU: `load_sharded` allocates the parts,
`--into` fills parts allocated beforehand, as a serving framework's model holds them
(`load_into`, no second allocation). A part split along columns (o_proj, down_proj) is one short
run per row in the file: where the page cache holds the rows, only the part's runs are gathered
out of it and copied to the GPU; elsewhere the rows' span is read and the part placed on the GPU.
`--span` reads every such part through its span, `--per-run` run by run (as gpufile once did),
to compare. `--compare`
then times each rank loading the whole checkpoint (`load_file`), what a loader without tensor
parallelism does; `--shared` adds the same load shared by the ranks as one group (each reads its
share of every file, the rest comes over NCCL). `--make-gb N` first writes a synthetic Llama-style checkpoint of about N GB
there, if none is there yet.

Without GPUs (`--backend gloo`, or no CUDA) it runs on the CPU: the same code path, host memory.
The times are each rank's wall time from a common barrier to its tensors being ready; the line
`slowest rank` is what start-up waits for.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist

from gpufile import safetensors as gst

# Llama-style names: column-parallel projections split their output rows (dimension 0),
# row-parallel ones their input columns (dimension 1); embeddings by vocabulary rows; norms whole.
COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "embed_tokens", "lm_head")
ROW = ("o_proj", "down_proj")


TORCH_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


def split_dim(name: str, shape) -> int | None:
    if len(shape) == 2 and any(k in name for k in COLUMN):
        return 0
    if len(shape) == 2 and any(k in name for k in ROW):
        return 1
    return None


def layer_shapes(hidden: int, inter: int):
    return {"self_attn.q_proj.weight": (hidden, hidden), "self_attn.k_proj.weight": (hidden, hidden),
            "self_attn.v_proj.weight": (hidden, hidden), "self_attn.o_proj.weight": (hidden, hidden),
            "mlp.gate_proj.weight": (inter, hidden), "mlp.up_proj.weight": (inter, hidden),
            "mlp.down_proj.weight": (hidden, inter), "input_layernorm.weight": (hidden,),
            "post_attention_layernorm.weight": (hidden,)}


def make_checkpoint(path: str, gigabytes: float, device: torch.device, hidden: int, inter: int,
                    vocab: int) -> None:
    """A bf16 checkpoint of about `gigabytes`, one shard file per layer, and its index."""
    per_layer = sum(math.prod(s) for s in layer_shapes(hidden, inter).values()) * 2  # bf16 bytes
    layers = max(1, int(gigabytes * 1e9 / per_layer))
    os.makedirs(path, exist_ok=True)
    weight_map = {}
    gen = torch.Generator(device=device).manual_seed(0)
    for i in range(layers + 1):
        file = f"model-{i + 1:05d}-of-{layers + 1:05d}.safetensors"
        if i < layers:
            shapes = {f"model.layers.{i}.{k}": s for k, s in layer_shapes(hidden, inter).items()}
        else:
            shapes = {"model.embed_tokens.weight": (vocab, hidden), "lm_head.weight": (vocab, hidden),
                      "model.norm.weight": (hidden,)}
        tensors = {n: torch.randn(s, generator=gen, device=device, dtype=torch.bfloat16) for n, s in shapes.items()}
        gst.save_file(tensors, os.path.join(path, file))
        weight_map.update({n: file for n in tensors})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def empty_parts(path: str, rank: int, world: int, device: torch.device):
    """This rank's tensors, allocated empty before loading (a serving framework's model)."""
    out = {}
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    for file in files:
        for name, info in gst.read_header(os.path.join(path, file)).tensors.items():
            dim = split_dim(name, info.shape)
            shape = list(info.shape)
            if dim is not None:
                part = gst.shard_slice(info.shape, dim, rank, world)[dim]
                shape[dim] = part.stop - part.start
            out[name] = torch.empty(shape, dtype=TORCH_DTYPES[info.dtype], device=device)
    return out


def timed(fn, device: torch.device) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def report(what: str, seconds: float, moved: int, device: torch.device) -> None:
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    rank = dist.get_rank()
    say(f"rank {rank}: {what}: {moved / 1e9:.2f} GB in {seconds:.3f} s = {moved / 1e9 / seconds:.2f} GB/s")
    dist.barrier()
    if rank == 0:
        say(f"{what}: slowest rank {slowest.item():.3f} s")


def say(line: str) -> None:
    """One line in one write: the ranks share torchrun's stdout, and print() writes the text and
    its newline apart, so that with PYTHONUNBUFFERED two ranks' lines could run into one."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a directory holding model.safetensors.index.json and its shards")
    p.add_argument("--make-gb", type=float, default=0, help="write a synthetic checkpoint of about this many GB first")
    p.add_argument("--into", action="store_true", help="fill tensors allocated beforehand (load_into)")
    p.add_argument("--compare", action="store_true", help="also time each rank loading the whole checkpoint")
    p.add_argument("--check", action="store_true", help="compare each part with the whole checkpoint's slice")
    p.add_argument("--shared", action="store_true",
                   help="with --compare: also load the whole checkpoint on each rank as one group "
                        "(load_file(..., group=WORLD): each rank reads its share, the rest comes "
                        "over the all-gather), checked equal to the plain load")
    p.add_argument("--per-run", action="store_true",
                   help="read column-split parts one run (row) at a time, not through their span")
    p.add_argument("--span", action="store_true",
                   help="read column-split parts through their span even where the page cache holds them")
    p.add_argument("--backend", default="nccl" if torch.cuda.is_available() else "gloo")
    p.add_argument("--hidden", type=int, default=4096, help="synthetic checkpoint: hidden size (Llama 3 8B's)")
    p.add_argument("--intermediate", type=int, default=14336, help="synthetic checkpoint: MLP size")
    p.add_argument("--vocab", type=int, default=32000, help="synthetic checkpoint: vocabulary")
    args = p.parse_args()

    if args.per_run or args.span:
        from gpufile import _scatter
        if args.per_run:
            _scatter.SPAN_RUN_BYTES = 0  # no part goes through a span: one read per run
        _scatter.GATHER = "never"  # no part is gathered out of the page cache
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")

    index = os.path.join(args.checkpoint, "model.safetensors.index.json")
    if args.make_gb and rank == 0 and not os.path.exists(index):
        make_checkpoint(args.checkpoint, args.make_gb, device, args.hidden, args.intermediate, args.vocab)
    dist.barrier()

    how = ", run by run" if args.per_run else ", through spans" if args.span else ""
    if args.into:
        parts = empty_parts(args.checkpoint, rank, world, device)
        seconds = timed(lambda: gst.load_into(parts, args.checkpoint, split=split_dim, rank=rank, world_size=world),
                        device)
        report(f"load_into, tensor-parallel over {world}{how}", seconds, nbytes(parts), device)
    else:
        parts = {}
        seconds = timed(lambda: parts.update(gst.load_sharded(args.checkpoint, device, split_dim)), device)
        report(f"load_sharded, tensor-parallel over {world}{how}", seconds, nbytes(parts), device)

    if args.compare or args.check:
        whole = {}
        seconds = timed(lambda: whole.update(gst.load_file(args.checkpoint, device=device)), device)
        report("load_file, the whole checkpoint on each rank", seconds, nbytes(whole), device)
        if args.shared:
            shared = {}
            seconds = timed(lambda: shared.update(gst.load_file(args.checkpoint, device=device,
                                                                group=dist.group.WORLD)), device)
            report("load_file shared by the group, the whole checkpoint on each rank", seconds,
                   nbytes(shared), device)
            assert set(shared) == set(whole) and all(torch.equal(shared[k], whole[k]) for k in whole)
            say(f"rank {rank}: the shared load equals the plain one")
            del shared
        if args.check:
            for name, part in parts.items():
                dim = split_dim(name, tuple(whole[name].shape))
                want = whole[name] if dim is None else whole[name][gst.shard_slice(whole[name].shape, dim, rank, world)]
                assert torch.equal(part, want), name
            say(f"rank {rank}: every part equals its slice of the whole checkpoint")
        del whole

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
