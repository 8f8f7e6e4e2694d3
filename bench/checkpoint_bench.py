#!/usr/bin/env python3
"""Same-run checkpoint loading benchmark: one safetensors checkpoint into the GPU, every loader.

One command generates a Llama-style bf16 checkpoint (once), measures the machine's ceilings
(pinned host-to-device copy, the disk's O_DIRECT sequential read), then loads the checkpoint
into cuda:0 with each loader in its own fresh process, for cold, warm and /dev/shm files, and
writes one table (markdown and JSON). It also times saving the same GPU tensors with
safetensors and with gpufile.

    python3 bench/checkpoint_bench.py --size 8 --dir /root/ckpt --out /tmp/gpufile-out
    python3 bench/checkpoint_bench.py --size 8 --plan-only        # shapes only, no torch
    python3 bench/checkpoint_bench.py --size 8 --shards 4 --cases cold --cold-reps 4
                                         # the same bytes as 4 shards and an index, cold

Units: sizes and rates are decimal (GB = 1e9 bytes, GB/s = 1e9 B/s) unless a number says GiB.
--size takes decimal GB ("8", "8GB") or binary GiB ("8GiB").

The parent process never imports torch: it orchestrates, prepares the page cache and records.
Every measurement runs in a child started as `checkpoint_bench.py --worker JOB.json`, so no loader
profits from another's warm CUDA context, allocator or Python state.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import traceback

GB = 1e9
GiB = 1 << 30
SEED = 20240601
CASE_ORDER = ("cold", "warm", "shm")
# Execution order: gpufile first so its rows exist even if the time budget runs out; the
# mmap variant of torch.load last (the least used).
LOADER_ORDER = ("gpufile", "gpufile-views", "safetensors", "torch-load", "fastsafetensors",
                "instanttensor", "runai", "kvikio", "torch-load-mmap")
SHM_DIR = "/dev/shm/gpufile-ckpt"


# ----------------------------------------------------------------------------------------------
# The checkpoint plan (pure Python: --plan-only and --help work without torch or numpy)

def parse_size(text):
    """'8' or '8GB' or '8G' -> 8e9 bytes (decimal); '8GiB' -> 8 * 2**30 bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(GiB|GB|G)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"size {text!r}: want a number of GB, e.g. 8 or 8GiB")
    unit = GiB if (m.group(2) or "").lower() == "gib" else GB
    return int(float(m.group(1)) * unit)


def layer_tensors(i, hidden, inter, kv_dim):
    """One Llama decoder layer, in Hugging Face naming and [out, in] weight layout."""
    p = f"model.layers.{i}."
    return [
        (p + "self_attn.q_proj.weight", [hidden, hidden]),
        (p + "self_attn.k_proj.weight", [kv_dim, hidden]),
        (p + "self_attn.v_proj.weight", [kv_dim, hidden]),
        (p + "self_attn.o_proj.weight", [hidden, hidden]),
        (p + "mlp.gate_proj.weight", [inter, hidden]),
        (p + "mlp.up_proj.weight", [inter, hidden]),
        (p + "mlp.down_proj.weight", [hidden, inter]),
        (p + "input_layernorm.weight", [hidden]),
        (p + "post_attention_layernorm.weight", [hidden]),
    ]


def nbytes(shapes, itemsize=2):
    total = 0
    for _, shape in shapes:
        n = itemsize
        for d in shape:
            n *= d
        total += n
    return total


def make_plan(size_bytes, hidden=4096, inter=14336, vocab=128256, heads=32, kv_heads=8):
    """As many layers as fit size_bytes (at least one), Llama-3-8B shapes by default:
    GQA with 8 KV heads, untied embeddings, bf16."""
    kv_dim = hidden // heads * kv_heads
    ends = [("model.embed_tokens.weight", [vocab, hidden]), ("model.norm.weight", [hidden]),
            ("lm_head.weight", [vocab, hidden])]
    layer_bytes = nbytes(layer_tensors(0, hidden, inter, kv_dim))
    layers = max(1, (size_bytes - nbytes(ends)) // layer_bytes)
    tensors = ends[:1]
    for i in range(layers):
        tensors += layer_tensors(i, hidden, inter, kv_dim)
    tensors += ends[1:]
    return {"target_bytes": size_bytes, "layers": layers, "hidden": hidden,
            "intermediate": inter, "vocab": vocab, "heads": heads, "kv_heads": kv_heads,
            "dtype": "bf16", "seed": SEED, "layer_bytes": layer_bytes,
            "embedding_bytes": nbytes(ends), "payload_bytes": nbytes(tensors),
            "tensors": tensors}


def plan_signature(plan):
    """What decides the bytes of the generated files (the sidecar compares it)."""
    return {k: v for k, v in plan.items() if k not in ("tensors", "target_bytes")}


def describe_plan(plan):
    p = plan
    over = " (one layer is the minimum: over the target)" if (
        p["payload_bytes"] > p["target_bytes"]) else ""
    return (f"Llama-style bf16 checkpoint: {p['layers']} layers, hidden {p['hidden']}, "
            f"intermediate {p['intermediate']}, vocab {p['vocab']}, {p['heads']} heads / "
            f"{p['kv_heads']} KV heads, {len(p['tensors'])} tensors; payload "
            f"{p['payload_bytes'] / GB:.3f} GB ({p['payload_bytes'] / GiB:.3f} GiB) for a "
            f"target of {p['target_bytes'] / GB:.3f} GB{over}; {p['layer_bytes'] / GB:.3f} GB per "
            f"layer, {p['embedding_bytes'] / GB:.3f} GB embeddings + lm_head + final norm")


def checkpoint_paths(plan, directory):
    stem = os.path.join(directory, f"llama-{plan['layers']}L-h{plan['hidden']}-bf16")
    return {"st": stem + ".safetensors", "pt": stem + ".pt", "sidecar": stem + ".plan.json"}


def read_header(path):
    """The safetensors header: (offset of the data section, {name: entry})."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return 8 + n, header


def shard_paths(st_path, shards):
    """The shard files and the index of `st_path` cut into `shards` files (Hugging Face names)."""
    stem = st_path[:-len(".safetensors")]
    files = [f"{stem}-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    return files, f"{stem}-of-{shards:05d}.safetensors.index.json"


def files_of(path):
    """The files a load of `path` reads: an index's shards, in order, or the file itself."""
    if not path.endswith(".index.json"):
        return [path]
    with open(path) as f:
        weight_map = json.load(f)["weight_map"]
    names = sorted(set(weight_map.values()))
    return [os.path.join(os.path.dirname(path), n) for n in names]


def write_shards(st_path, shards):
    """Cuts the checkpoint `st_path` into `shards` files of about equal bytes, tensors in file
    order, each a byte range of the original, and writes their index. Returns the index path.
    Pure Python: no torch, no GPU."""
    files, index_path = shard_paths(st_path, shards)
    start, header = read_header(st_path)
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    if not 1 <= shards <= len(entries):
        raise ValueError(f"{shards} shards for {len(entries)} tensors")
    # Cut k falls on the tensor boundary nearest to k/shards of the bytes, after the cut before
    # it and leaving a tensor for every later shard.
    sizes = [e["data_offsets"][1] - e["data_offsets"][0] for _, e in entries]
    before = [sum(sizes[:i]) for i in range(len(sizes) + 1)]  # bytes ahead of boundary i
    cuts = [0]
    for k in range(1, shards):
        goal = k * before[-1] / shards
        cuts.append(min(range(cuts[-1] + 1, len(entries) - (shards - k) + 1),
                        key=lambda i: abs(before[i] - goal)))
    cuts.append(len(entries))
    groups = [entries[a:b] for a, b in zip(cuts, cuts[1:])]
    total = before[-1]
    weight_map = {}
    with open(st_path, "rb") as src:
        for path, group in zip(files, groups):
            first, last = group[0][1]["data_offsets"][0], group[-1][1]["data_offsets"][1]
            head = {"__metadata__": {"format": "pt"}}
            for name, e in group:
                a, b = e["data_offsets"]
                head[name] = dict(e, data_offsets=[a - first, b - first])
                weight_map[name] = os.path.basename(path)
            text = json.dumps(head, separators=(",", ":")).encode()
            text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
            tmp = path + ".tmp"
            with open(tmp, "wb") as out:
                out.write(len(text).to_bytes(8, "little") + text)
                src.seek(start + first)
                left = last - first
                while left:
                    chunk = src.read(min(left, 64 << 20))
                    if not chunk:
                        raise IOError(f"{st_path} ends early")
                    out.write(chunk)
                    left -= len(chunk)
            os.replace(tmp, path)
    with open(index_path, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    return index_path


# ----------------------------------------------------------------------------------------------
# Worker side: everything below imports torch lazily, inside the child process.

def proc_status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak_rss():
    """Reset VmHWM to the current RSS so the peak covers the load, not imports (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def cuda_ready():
    """Import torch and create the CUDA context before any timing starts."""
    import torch
    torch.cuda.init()
    torch.empty(1, device="cuda:0")
    torch.cuda.synchronize()
    return torch


def make_tensors(torch, plan, device="cuda:0"):
    """Deterministic weights (same seed, same GPU -> same bytes), in checkpoint order."""
    g = torch.Generator(device=device)
    g.manual_seed(plan["seed"])
    out = {}
    for name, shape in plan["tensors"]:
        t = torch.randn(shape, generator=g, device=device, dtype=torch.bfloat16).mul_(0.02)
        out[name] = t.add_(1.0) if len(shape) == 1 else t  # norms sit around 1.0
    torch.cuda.synchronize()
    return out


def st_dtypes(torch):
    return {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
            "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
            "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def views_of_file_buffer(torch, buf, path):
    """Tensors as views into a device buffer holding the whole safetensors file."""
    start, header = read_header(path)
    dtypes = st_dtypes(torch)
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = buf[start + a:start + b].view(dtypes[e["dtype"]]).view(e["shape"])
    return out


class Unsupported(Exception):
    """The loader variant does not exist in this build (not a failure)."""


# Each setup function imports its library (import time is not part of the load) and returns
# load(path) -> (dict of tensors on cuda:0, note).

def setup_safetensors():
    from safetensors.torch import load_file  # safetensors.torch.load_file(filename, device)

    def load(p):
        out = {}
        for f in files_of(p):  # shards one after another, as transformers loads them
            out.update(load_file(f, device="cuda:0"))
        return out, "default backend (mmap)"
    return load


def setup_torch_load(mmap=False):
    import torch

    def load(p):
        # torch.load's default weights_only=True is enough for a plain state_dict.
        return torch.load(p, map_location="cuda:0", mmap=mmap), f"mmap={mmap}, weights_only"
    return load


def setup_fastsafetensors():
    # fastsafetensors/loader.py: SafeTensorsFileLoader(pg, device, ..., nogds), add_filenames,
    # copy_files_to_device -> file_buffer.FilesBufferOnDevice.get_tensor
    from fastsafetensors import SafeTensorsFileLoader

    def load(p):
        loader = SafeTensorsFileLoader(None, "cuda:0", nogds=True)
        note = f"nogds=True, copier {loader.copier_class.__name__}; views into one device buffer"
        try:
            loader.add_filenames({0: files_of(p)})  # every shard at once
            fb = loader.copy_files_to_device()
            try:
                out = {k: fb.get_tensor(k) for k in loader.get_keys()}
            finally:
                fb.close()  # tensors keep shared ownership of the buffer (documented)
        finally:
            loader.close()
        return out, note
    return load


def setup_runai():
    # runai_model_streamer/safetensors_streamer/safetensors_streamer.py: SafetensorsStreamer,
    # stream_file(path, device=...), get_tensors(); with a CUDA device the file streamer moves
    # each chunk out of its host buffer with tensor.to(device).
    from runai_model_streamer import SafetensorsStreamer

    def load(p):
        out = {}
        with SafetensorsStreamer() as s:
            s.stream_files(files_of(p), device="cuda:0")  # every shard at once
            for name, t in s.get_tensors():
                out[name] = t
        return out, "stream_files(device='cuda:0'): host buffer, then .to(cuda) per tensor"
    return load


def setup_instanttensor():
    # instanttensor/_impl.py: safe_open(filename, framework="pt", device, copy=True).tensors()
    from instanttensor import safe_open

    def load(p):
        out, files = {}, files_of(p)
        with safe_open(files if len(files) > 1 else files[0], framework="pt",
                       device="cuda:0") as f:
            backend = f.backend.name
            for name, t in f.tensors():
                out[name] = t
        # copy=True (the default) clones each tensor out of the reused ring buffer.
        return out, f"backend {backend}; copy=True (tensors cloned out of its ring buffer)"
    return load


def setup_kvikio():
    # kvikio/cufile.py: CuFile(path, "r").read(buf) (blocking pread); kvikio/defaults.py: get().
    # KVIKIO_COMPAT_MODE and KVIKIO_NTHREADS come from the environment the parent sets.
    import torch
    import kvikio
    import kvikio.defaults

    def load(p):
        out = {}
        for path in files_of(p):  # one shard after another
            buf = torch.empty(os.path.getsize(path), dtype=torch.uint8, device="cuda:0")
            with kvikio.CuFile(path, "r") as f:
                n = f.read(buf)
            if n != buf.numel():
                raise IOError(f"short read: {n} of {buf.numel()} bytes")
            out.update(views_of_file_buffer(torch, buf, path))
        d = kvikio.defaults
        note = (f"{d.get('num_threads')} threads, compat_mode {d.get('compat_mode')}, "
                f"auto_direct_io_read {d.get('auto_direct_io_read')}; "
                "each file into one buffer, tensors are views")
        return out, note
    return load


def setup_gpufile(views=False):
    import inspect
    import gpufile.safetensors as gs
    if not views:
        return lambda p: (gs.load_file(p, device="cuda:0"), "")
    if "views" not in inspect.signature(gs.load_file).parameters:
        raise Unsupported("gpufile.safetensors.load_file has no views parameter")
    return lambda p: (gs.load_file(p, device="cuda:0", views=True),
                      "views=True: views into one device buffer")


LOADERS = {
    "safetensors": setup_safetensors,
    "torch-load": setup_torch_load,
    "torch-load-mmap": lambda: setup_torch_load(mmap=True),
    "fastsafetensors": setup_fastsafetensors,
    "runai": setup_runai,
    "instanttensor": setup_instanttensor,
    "kvikio": setup_kvikio,
    "gpufile": setup_gpufile,
    "gpufile-views": lambda: setup_gpufile(views=True),
}
TORCH_FORMAT = ("torch-load", "torch-load-mmap")


def same_bits(torch, a, b):
    a = a.detach().to("cpu").contiguous()
    b = b.contiguous()
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


def verify(torch, tensors, ref_path):
    """All keys, on cuda:0, right shape and dtype; bitwise: every tensor's first and last row,
    every small tensor whole, and the middle tensor (by name) whole, against safe_open reads."""
    from safetensors import safe_open
    with safe_open(ref_path, framework="pt", device="cpu") as f:
        keys = set(f.keys())
        if set(tensors) != keys:
            return False, (f"keys: {len(keys - set(tensors))} missing, "
                           f"{len(set(tensors) - keys)} extra")
        middle = sorted(keys)[len(keys) // 2]
        for k in sorted(keys):
            t, sl = tensors[k], f.get_slice(k)
            if not t.is_cuda or t.device.index != 0:
                return False, f"{k} is on {t.device}"
            if k == middle or t.numel() <= (1 << 20):
                pairs = [(t, f.get_tensor(k))]
            else:
                rows = sl.get_shape()[0]
                pairs = [(t[:1], sl[0:1]), (t[-1:], sl[rows - 1:rows])]
            if not all(same_bits(torch, a, b) for a, b in pairs):
                return False, f"{k}: bytes differ"
    return True, f"{len(keys)} tensors"


def worker_load(job):
    torch = cuda_ready()
    try:
        load = LOADERS[job["loader"]]()
    except Unsupported as e:
        return {"status": "unsupported", "reason": str(e)}
    reset_peak_rss()
    rss0 = proc_status_kib("VmRSS")
    t0 = time.perf_counter()
    tensors, note = load(job["path"])
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    hwm = proc_status_kib("VmHWM")
    ok, vnote = verify(torch, tensors, job["ref"])
    return {"status": "ok", "seconds": seconds, "rss_before_kib": rss0, "peak_kib": hwm,
            "verified": ok, "verify_note": vnote, "note": note}


def worker_save(job):
    torch = cuda_ready()
    tensors = make_tensors(torch, job["plan"])
    if job["saver"] == "safetensors":
        from safetensors.torch import save_file  # moves each GPU tensor to the host itself
    else:
        from gpufile.safetensors import save_file
    path = job["path"]
    if os.path.exists(path):
        os.unlink(path)
    reset_peak_rss()
    rss0 = proc_status_kib("VmRSS")
    t0 = time.perf_counter()
    save_file(tensors, path, metadata={"format": "pt"})
    t1 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    t2 = time.perf_counter()
    return {"status": "ok", "seconds": t1 - t0, "fsync_seconds": t2 - t1,
            "bytes": os.path.getsize(path), "rss_before_kib": rss0,
            "peak_kib": proc_status_kib("VmHWM")}


def worker_generate(job):
    torch = cuda_ready()
    cpu = {k: v.cpu() for k, v in make_tensors(torch, job["plan"]).items()}
    out = {}
    if "st" in job["write"]:
        from safetensors.torch import save_file
        tmp = job["st"] + ".tmp"
        save_file(cpu, tmp, metadata={"format": "pt"})
        os.replace(tmp, job["st"])
        out["st_bytes"] = os.path.getsize(job["st"])
    if "pt" in job["write"]:
        tmp = job["pt"] + ".tmp"
        torch.save(cpu, tmp)  # a plain state_dict, as torch.load users have
        os.replace(tmp, job["pt"])
        out["pt_bytes"] = os.path.getsize(job["pt"])
    return dict(out, status="ok")


def worker_h2d(job):
    """Host-to-device copy of 1 GiB: pinned (the ceiling) and pageable (for reference)."""
    torch = cuda_ready()
    dst = torch.empty(GiB, dtype=torch.uint8, device="cuda:0")
    out = {"status": "ok", "bytes": GiB}
    for kind, pinned in (("pinned", True), ("pageable", False)):
        src = torch.ones(GiB, dtype=torch.uint8, pin_memory=pinned)
        best = float("inf")
        for i in range(4):  # the first is a warm-up
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            if i:
                best = min(best, time.perf_counter() - t0)
        out[kind + "_gbps"] = GiB / best / GB
        del src
    return out


WORKERS = {"load": worker_load, "save": worker_save, "generate": worker_generate,
           "h2d": worker_h2d}


def worker_main(job_path):
    with open(job_path) as f:
        job = json.load(f)
    try:
        result = WORKERS[job["kind"]](job)
    except BaseException as e:  # anything, so the parent gets one line instead of a guess
        traceback.print_exc()
        lines = str(e).strip().splitlines()
        result = {"status": "failed",
                  "reason": f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]}
    with open(job["result"], "w") as f:
        json.dump(result, f)


# ----------------------------------------------------------------------------------------------
# Parent side: page cache preparation, ceilings, orchestration, output.

T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def warm_file(path):
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)


def prepare_case(case, path):
    """Put the page cache in the state the case names (shm needs nothing per run)."""
    if case == "cold":
        drop_caches()
    elif case == "warm":
        for f in files_of(path):
            warm_file(f)


def dd_direct_gbps(path):
    """Single-stream O_DIRECT sequential read of the cold file, as dd reports it."""
    drop_caches()
    r = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M", "iflag=direct"],
                       capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    m = re.search(r"(\d+) bytes .* copied, ([0-9.]+) s", r.stderr)
    if r.returncode or not m:
        raise RuntimeError(f"dd failed: {(r.stderr.strip().splitlines() or [''])[-1]}")
    return int(m.group(1)) / float(m.group(2)) / GB


# The disk's own ceiling, at its best block size and queue depth: fio reading the cold
# checkpoint with O_DIRECT through io_uring, caches dropped before each point. 512 KiB reads 16
# at a time are fastsafetensors' shape, which outran every larger point on the lent H200's disk.
FIO_POINTS = [(bs, depth, 1) for bs in ("512K", "1M", "4M", "16M") for depth in (1, 4, 16, 64)] + \
             [(bs, 16, 4) for bs in ("1M", "4M", "16M")]


def fio_direct_gbps(fio, path, bs, depth, jobs):
    """One fio run over the cold file: `jobs` processes, each reading its slice once with
    O_DIRECT, `depth` reads of `bs` in flight; GB/s of them all."""
    drop_caches()
    cmd = [fio, "--name=ceiling", f"--filename={path}", "--readonly", "--rw=read", "--direct=1",
           "--ioengine=io_uring", f"--bs={bs}", f"--iodepth={depth}", f"--numjobs={jobs}",
           "--group_reporting", "--output-format=json"]
    if jobs > 1:
        share = f"{100 // jobs}%"
        cmd += [f"--size={share}", f"--offset_increment={share}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise RuntimeError(f"fio failed: {(r.stderr.strip().splitlines() or [''])[-1]}")
    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]
    return job["read"]["bw_bytes"] / GB


def fio_sweep(fio, path, points_to_run=FIO_POINTS):
    """Every point (bs, depth, jobs) as a dict with its gbps or error."""
    points = []
    for bs, depth, jobs in points_to_run:
        point = {"bs": bs, "depth": depth, "jobs": jobs}
        try:
            point["gbps"] = fio_direct_gbps(fio, path, bs, depth, jobs)
        except (OSError, RuntimeError, ValueError, KeyError, subprocess.SubprocessError) as e:
            point["error"] = str(e)
        log(f"  fio bs={bs} depth={depth} jobs={jobs}: "
            f"{point['gbps']:.2f} GB/s" if "gbps" in point else f"  fio: {point['error']}")
        points.append(point)
    return points


def best_fio(ceilings):
    ok = [p for p in ceilings.get("fio", []) if "gbps" in p]
    return max(ok, key=lambda p: p["gbps"]) if ok else None


def fio_label(point):
    return f"fio O_DIRECT (bs {point['bs']}, depth {point['depth']}, {point['jobs']} job(s))"


def command_output(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cmd[0]}: {e}"


def machine_info(args):
    from importlib import metadata
    versions = {}
    for dist in ("torch", "safetensors", "fastsafetensors", "instanttensor", "kvikio-cu13",
                 "runai-model-streamer", "cupy-cuda13x", "gpufile"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed (or no metadata)"
    with open("/proc/meminfo") as f:
        mem = f"{int(f.readline().split()[1]) / (1 << 20):.0f} GiB RAM"  # MemTotal comes first
    return {"gpus": command_output(["nvidia-smi", "-L"]), "nproc": os.cpu_count(),
            "kernel": os.uname().release, "memory": mem, "python": sys.version.split()[0],
            "df": command_output(["df", "-h", args.dir, "/dev/shm"]), "versions": versions}


class Bench:
    def __init__(self, args):
        self.args = args
        self.t_start = time.monotonic()
        self.logs = os.path.join(args.out, "logs")
        self.plan = make_plan(args.size, args.hidden, args.intermediate, args.vocab)
        self.paths = checkpoint_paths(self.plan, args.dir)
        self.best_kvikio = args.kvikio_threads[-1]
        self.dropped = set()  # loaders that reported "unsupported"
        self.state = {"command": shlex.join([sys.executable] + sys.argv),
                      "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                      "plan": {k: v for k, v in self.plan.items() if k != "tensors"},
                      "plan_text": describe_plan(self.plan), "files": {}, "ceilings": {},
                      "save": [], "save_check": None, "results": [], "notes": []}

    # -- child processes

    def spawn(self, tag, job, env=None, timeout=None):
        """Run one worker; returns its result dict, or a failed one (timeout, crash)."""
        timeout = timeout or self.args.timeout
        job = dict(job, result=os.path.join(self.logs, tag + ".result.json"))
        if os.path.exists(job["result"]):
            os.unlink(job["result"])
        job_path = os.path.join(self.logs, tag + ".job.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", job_path]
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        logpath = os.path.join(self.logs, tag + ".log")
        with open(logpath, "w") as logf:
            try:
                rc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=full_env,
                                    timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                return {"status": "failed", "reason": f"timeout after {timeout} s"}
        try:
            with open(job["result"]) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"status": "failed", "reason": f"exit {rc}: {last_line(logpath)}"}

    def out_of_time(self):
        return time.monotonic() - self.t_start > self.args.budget

    # -- steps

    def ensure_checkpoint(self, need_pt):
        p, sig = self.paths, plan_signature(self.plan)
        try:
            with open(p["sidecar"]) as f:
                side = json.load(f)
        except (OSError, ValueError):
            side = {}
        fresh = side.get("plan") == sig
        write = [k for k in (["st", "pt"] if need_pt else ["st"])
                 if not (fresh and os.path.exists(p[k])
                         and os.path.getsize(p[k]) == side.get(k + "_bytes"))]
        if write:
            log(f"generating {', '.join(p[k] for k in write)}")
            t0 = time.monotonic()
            r = self.spawn("generate", {"kind": "generate", "plan": self.plan, "write": write,
                                        "st": p["st"], "pt": p["pt"]},
                           timeout=max(600, self.args.timeout))
            if r["status"] != "ok":
                raise SystemExit(f"checkpoint generation failed: {r['reason']}")
            side = dict(side if fresh else {}, plan=sig, **r)
            side.pop("status", None)
            with open(p["sidecar"], "w") as f:
                json.dump(side, f)
            os.sync()  # the generated files must not be dirty when the cold case starts
            log(f"generated in {time.monotonic() - t0:.1f} s")
        else:
            log("checkpoint present, reusing it")
        self.state["files"] = {k: {"path": p[k], "bytes": os.path.getsize(p[k])}
                               for k in (["st", "pt"] if need_pt else ["st"])}
        if self.args.shards > 1:
            shard_files, index = shard_paths(p["st"], self.args.shards)
            if not all(os.path.exists(f) and os.path.getmtime(f) >= os.path.getmtime(p["st"])
                       for f in shard_files + [index]):
                log(f"cutting the checkpoint into {self.args.shards} shards")
                write_shards(p["st"], self.args.shards)
                os.sync()
            self.state["files"]["index"] = {
                "path": index, "bytes": sum(os.path.getsize(f) for f in shard_files)}

    def save_compare(self):
        """safetensors.torch.save_file vs gpufile.safetensors.save_file of the same GPU
        tensors, each followed by an fsync that is timed separately."""
        need = 2.2 * self.plan["payload_bytes"]
        if shutil.disk_usage(self.args.dir).free < need:
            self.state["notes"].append("save comparison skipped: not enough free disk space")
            return
        paths = {}
        for saver in ("safetensors", "gpufile"):
            paths[saver] = os.path.join(self.args.dir, f"save-{saver}.safetensors")
            os.sync()
            log(f"save: {saver}")
            r = self.spawn(f"save-{saver}", {"kind": "save", "saver": saver, "plan": self.plan,
                                             "path": paths[saver]})
            self.state["save"].append(dict(r, saver=saver))
            self.write_outputs()
        if all(s["status"] == "ok" for s in self.state["save"]):
            self.state["save_check"] = compare_files(paths["safetensors"], paths["gpufile"])
        for path in paths.values():
            if os.path.exists(path):
                os.unlink(path)

    def ceilings(self):
        log("ceiling: host-to-device copy (1 GiB, best of 3)")
        r = self.spawn("h2d", {"kind": "h2d"})
        self.state["ceilings"]["h2d"] = r
        if "cold" not in self.args.cases:
            self.write_outputs()
            return
        try:
            log("ceiling: dd O_DIRECT read of the cold checkpoint")
            self.state["ceilings"]["dd_direct_gbps"] = dd_direct_gbps(self.paths["st"])
        except (OSError, RuntimeError) as e:
            self.state["ceilings"]["dd_direct_error"] = str(e)
        if self.args.fio:
            points = [self.args.fio_point] if self.args.fio_point else FIO_POINTS
            log(f"ceiling: fio O_DIRECT reads of the cold checkpoint ({len(points)} points)")
            self.state["ceilings"]["fio"] = fio_sweep(self.args.fio, self.paths["st"], points)
        self.write_outputs()

    def ceiling_for(self, case):
        c = self.state["ceilings"]
        if case == "cold":
            best = best_fio(c)
            return best["gbps"] if best else c.get("dd_direct_gbps")
        return c.get("h2d", {}).get("pinned_gbps")

    # -- loaders

    def variants(self, loader, case):
        """(label, extra environment) for each run of a loader in a case. KvikIO is tuned in
        the warm case (every --kvikio-threads count); other cases use the best warm count.
        gpufile runs once as set, then once more for each --gpufile-env."""
        if loader == "gpufile":
            return [(loader, {})] + [(f"gpufile ({name})", env) for name, env in self.args.gpufile_env]
        if loader != "kvikio":
            return [(loader, {})]
        counts = self.args.kvikio_threads if case == "warm" else [self.best_kvikio]
        return [(f"kvikio ({n} threads)", {"KVIKIO_COMPAT_MODE": "ON", "KVIKIO_NTHREADS": str(n)})
                for n in counts]

    def run_case(self, case, files):
        log(f"case {case}")
        # Warm and shm runs are short: each loader runs `reps` times, the order reversed on
        # every other round so that no loader is always the first after the case's set-up.
        reps = self.args.cold_reps if case == "cold" else self.args.reps
        # fio's best point of the sweep reads the cold file again in every round, in turn with
        # the loaders: from one reading to the next this disk varies more than loaders differ,
        # so the ceiling a loader is held to is fio's median over the same rounds.
        fio_point = best_fio(self.state["ceilings"]) if case == "cold" and reps > 1 else None
        for rep in range(reps):
            order = (["fio"] if fio_point else []) + self.loaders_in_order()
            for loader in order if rep % 2 == 0 else order[::-1]:
                if loader == "fio":
                    self.record(self.run_fio_round(fio_point, rep))
                    continue
                if loader in self.dropped:
                    continue
                if loader in TORCH_FORMAT and "index" in files:
                    self.dropped.add(loader)  # torch.load reads the one .pt file
                    self.state["notes"].append(f"{loader}: not run with --shards (one .pt file)")
                    continue
                path = files["pt"] if loader in TORCH_FORMAT else files.get("index") or files["st"]
                for label, env in self.variants(loader, case):
                    row = self.run_loader(case, loader, label, path, self.paths["st"], env)
                    if row is not None:
                        row["rep"] = rep
                    self.record(row)
        if case == "warm":
            self.pick_kvikio()

    def run_loader(self, case, loader, label, path, ref, env):
        row = {"loader": label, "case": case, "file": path,
               "bytes": sum(os.path.getsize(f) for f in files_of(path))}
        if self.out_of_time():
            return dict(row, status="skipped", reason=f"time budget ({self.args.budget} s) spent")
        try:
            prepare_case(case, path)
        except (OSError, subprocess.CalledProcessError) as e:
            return dict(row, status="failed", reason=f"cannot prepare the {case} case: {e}")
        tag = f"{case}-{re.sub(r'[^a-z0-9]+', '-', label.lower()).strip('-')}"
        r = self.spawn(tag, {"kind": "load", "loader": loader, "path": path, "ref": ref}, env)
        if r["status"] == "unsupported":
            self.dropped.add(loader)
            self.state["notes"].append(f"{label}: not measured: {r['reason']}")
            return None
        row.update(r)
        if r["status"] == "ok":
            row["gbps"] = row["bytes"] / r["seconds"] / GB
            ceiling = self.ceiling_for(case)
            row["ceiling_gbps"] = ceiling
            row["fraction"] = row["gbps"] / ceiling if ceiling else None
        return row

    def run_fio_round(self, point, rep):
        row = {"loader": fio_label(point), "case": "cold", "file": self.paths["st"],
               "bytes": os.path.getsize(self.paths["st"]), "rep": rep, "fio": True}
        if self.out_of_time():
            return dict(row, status="skipped", reason=f"time budget ({self.args.budget} s) spent")
        try:
            gbps = fio_direct_gbps(self.args.fio, self.paths["st"], point["bs"], point["depth"],
                                   point["jobs"])
        except (OSError, RuntimeError, ValueError, KeyError, subprocess.SubprocessError) as e:
            return dict(row, status="failed", reason=str(e))
        return dict(row, status="ok", gbps=gbps, seconds=row["bytes"] / gbps / GB)

    def pick_kvikio(self):
        rows = [r for r in self.state["results"] if r["case"] == "warm"
                and r["loader"].startswith("kvikio") and r.get("status") == "ok"]
        if rows:
            best = min(rows, key=lambda r: r["seconds"])
            self.best_kvikio = int(re.search(r"\d+", best["loader"]).group())
            self.state["notes"].append(
                f"KvikIO: {self.best_kvikio} threads was fastest warm; used for other cases")

    def loaders_in_order(self):
        return [name for name in LOADER_ORDER if name in self.args.loaders]

    def record(self, row):
        if row is None:
            return
        self.state["results"].append(row)
        log("  " + " | ".join(table_row(row)))
        self.write_outputs()

    # -- the whole run

    def run(self):
        os.makedirs(self.logs, exist_ok=True)
        self.state["machine"] = machine_info(self.args)
        m = self.state["machine"]
        print(f"command: {self.state['command']}\n{m['gpus']}\nnproc {m['nproc']}, "
              f"{m['memory']}, kernel {m['kernel']}\n{describe_plan(self.plan)}", flush=True)
        need_pt = any(name in self.args.loaders for name in TORCH_FORMAT)
        self.ensure_checkpoint(need_pt)
        if not self.args.no_save:
            self.save_compare()
        self.ceilings()
        on_disk = {k: v["path"] for k, v in self.state["files"].items()}
        # Warm first: it tunes KvikIO's thread count for the other cases.
        for case in sorted(self.args.cases, key=lambda c: c != "warm"):
            if case == "shm":
                self.run_shm_case(on_disk)
            else:
                self.run_case(case, on_disk)
        self.state["elapsed_s"] = time.monotonic() - self.t_start
        self.write_outputs()
        print("\n" + render_md(self.state), flush=True)

    def run_shm_case(self, on_disk):
        if "index" in on_disk:  # the shards are read, not the whole file (it stays the reference)
            on_disk = {k: v for k, v in on_disk.items() if k != "st"}
        # An index travels with its shards (it names them relative to its own directory).
        copies = [f for p in on_disk.values()
                  for f in files_of(p) + ([p] if p.endswith(".index.json") else [])]
        need = sum(os.path.getsize(p) for p in copies)
        if shutil.disk_usage(os.path.dirname(SHM_DIR)).free < need * 1.05:
            self.state["notes"].append("shm case skipped: not enough space in /dev/shm")
            return
        shutil.rmtree(SHM_DIR, ignore_errors=True)
        os.makedirs(SHM_DIR)
        try:
            log("copying the checkpoint into /dev/shm")
            files = {k: os.path.join(SHM_DIR, os.path.basename(p)) for k, p in on_disk.items()}
            for p in copies:
                shutil.copyfile(p, os.path.join(SHM_DIR, os.path.basename(p)))
        except OSError as e:
            self.state["notes"].append(f"shm case skipped: copying into /dev/shm: {e}")
            shutil.rmtree(SHM_DIR, ignore_errors=True)
            return
        try:
            self.run_case("shm", files)
        finally:
            shutil.rmtree(SHM_DIR, ignore_errors=True)

    def write_outputs(self):
        self.state["elapsed_s"] = time.monotonic() - self.t_start
        with open(os.path.join(self.args.out, "checkpoint.json"), "w") as f:
            json.dump(self.state, f, indent=1)
        with open(os.path.join(self.args.out, "checkpoint.md"), "w") as f:
            f.write(render_md(self.state))


def last_line(path):
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        return lines[-1][:300] if lines else "no output"
    except OSError:
        return "no log"


def compare_files(a, b):
    """'identical', or whether the tensors match when the layout differs."""
    if os.path.getsize(a) == os.path.getsize(b) and same_range(a, b, 0, 0, os.path.getsize(a)):
        return "identical bytes"
    (sa, ha), (sb, hb) = read_header(a), read_header(b)
    if set(ha) != set(hb):
        return "DIFFERENT: tensor names differ"
    for name, ea in ha.items():
        eb = hb[name]
        if (ea["dtype"], ea["shape"]) != (eb["dtype"], eb["shape"]):
            return f"DIFFERENT: {name} dtype or shape"
        (a0, a1), (b0, _) = ea["data_offsets"], eb["data_offsets"]
        if not same_range(a, b, sa + a0, sb + b0, a1 - a0):
            return f"DIFFERENT: {name} bytes"
    return "same tensors, different header or layout"


def same_range(a, b, off_a, off_b, length, chunk=16 << 20):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        fa.seek(off_a)
        fb.seek(off_b)
        while length > 0:
            n = min(chunk, length)
            if fa.read(n) != fb.read(n):
                return False
            length -= n
    return True


# ----------------------------------------------------------------------------------------------
# Rendering

def fmt(x, spec):
    return "" if x is None else format(x, spec)


def table_row(r):
    if r.get("status") != "ok":
        return [r["loader"], r["case"], f"{r.get('status')}: {r.get('reason', '')}", "", "",
                "", "", ""]
    if r.get("fio"):
        return [r["loader"], r["case"], f"{r['seconds']:.2f}", f"{r['gbps']:.2f}", "", "", "",
                r.get("note", "")]
    peak = r["peak_kib"] / (1 << 20)
    delta = (r["peak_kib"] - r["rss_before_kib"]) / (1 << 20)
    pct = f"{100 * r['fraction']:.0f}%" if r.get("fraction") else ""
    note = "; ".join(x for x in (r.get("note"), "" if r["verified"] else r["verify_note"]) if x)
    return [r["loader"], r["case"], f"{r['seconds']:.2f}", f"{r['gbps']:.2f}", pct,
            f"{peak:.2f} (+{delta:.2f})", "yes" if r["verified"] else "NO", note]


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def shards_text(state):
    index = state["files"].get("index")
    if not index:
        return ""
    n = len(files_of(index["path"])) if os.path.exists(index["path"]) else "?"
    return (f" Loaded as a sharded checkpoint: {n} files and their index "
            f"(`{os.path.basename(index['path'])}`); torch.load rows are not run.")


def render_ceilings(state):
    c = state["ceilings"]
    h2d = c.get("h2d", {})
    rows = [["pinned host -> device copy, 1 GiB, best of 3 (warm, shm ceiling)",
             fmt(h2d.get("pinned_gbps"), ".2f") or h2d.get("reason", "")],
            ["pageable host -> device copy, 1 GiB, best of 3 (reference)",
             fmt(h2d.get("pageable_gbps"), ".2f")],
            ["dd bs=16M iflag=direct of the cold checkpoint" +
             ("" if best_fio(c) else " (cold ceiling)"),
             fmt(c.get("dd_direct_gbps"), ".2f") or c.get("dd_direct_error", "")]]
    best = best_fio(c)
    if best:
        rows.append([f"fio O_DIRECT io_uring of the cold checkpoint, the best of "
                     f"{len(c['fio'])} points: bs {best['bs']}, depth {best['depth']}, "
                     f"{best['jobs']} job(s) (cold ceiling)", f"{best['gbps']:.2f}"])
    text = md_table(["ceiling", "GB/s"], rows)
    if c.get("fio"):
        sweep = [[p["bs"], p["depth"], p["jobs"], fmt(p.get("gbps"), ".2f") or p.get("error", "")]
                 for p in c["fio"]]
        text += "\n\nfio's points (caches dropped before each):\n\n" + md_table(
            ["block", "depth", "jobs", "GB/s"], sweep)
    return text


def render_save(state):
    rows = []
    for s in state["save"]:
        if s["status"] != "ok":
            rows.append([s["saver"], f"failed: {s.get('reason')}", "", "", "", ""])
            continue
        total = s["seconds"] + s["fsync_seconds"]
        rows.append([s["saver"], f"{s['seconds']:.2f}", f"{s['bytes'] / s['seconds'] / GB:.2f}",
                     f"{total:.2f}", f"{s['bytes'] / total / GB:.2f}",
                     f"{s['peak_kib'] / (1 << 20):.2f}"])
    text = md_table(["saver (same GPU tensors, file on the --dir filesystem)", "seconds",
                     "GB/s", "seconds incl. fsync", "GB/s incl. fsync", "peak host GiB"], rows)
    ok = {s["saver"]: s for s in state["save"] if s["status"] == "ok"}
    if len(ok) == 2:
        a, b = ok["safetensors"], ok["gpufile"]
        durable = (a["seconds"] + a["fsync_seconds"]) / (b["seconds"] + b["fsync_seconds"])
        text += (f"\n\ngpufile vs safetensors: {a['seconds'] / b['seconds']:.1f}x faster to "
                 f"return, {durable:.1f}x including fsync; files: {state['save_check']}")
    return text


def best_rows(results):
    """One row per (loader, case): its fastest successful run, noting every run's seconds."""
    groups = {}
    for r in results:
        groups.setdefault((r["loader"], r["case"]), []).append(r)
    out = []
    for runs in groups.values():
        ok = [r for r in runs if r.get("status") == "ok"]
        if not ok:
            out.append(runs[0])
            continue
        best = dict(min(ok, key=lambda r: r["seconds"]))
        if len(runs) > 1:
            times = ", ".join(f"{r['seconds']:.2f}" if r.get("status") == "ok" else r.get("status", "?")
                              for r in runs)
            best["note"] = "; ".join(x for x in (f"best of {len(runs)} runs: {times} s", best.get("note")) if x)
        out.append(best)
    return out


def render_cold_rounds(state):
    """Per loader over the cold rounds: the median and fastest run, and the median against
    fio's median in the same rounds (the ceiling a noisy disk allows to be compared)."""
    runs = {}
    for r in state["results"]:
        if r["case"] == "cold" and r.get("status") == "ok":
            runs.setdefault(r["loader"], []).append(r)
    fio = next((v for k, v in runs.items() if v[0].get("fio")), None)
    if not fio or len(fio) < 2:
        return ""
    fio_median = statistics.median([r["gbps"] for r in fio])
    rows = []
    for label, rs in runs.items():
        seconds = statistics.median([r["seconds"] for r in rs])
        gbps = statistics.median([r["gbps"] for r in rs])
        rows.append([label, len(rs), f"{seconds:.2f}", f"{min(r['seconds'] for r in rs):.2f}",
                     f"{gbps:.2f}", f"{100 * gbps / fio_median:.0f}%"])
    return ("Cold, over the rounds (fio's best point of the sweep read again in every round, "
            "in turn with the loaders):\n\n" +
            md_table(["reader", "runs", "median s", "fastest s", "median GB/s",
                      "of fio's median"], rows))


def render_md(state):
    order = {c: i for i, c in enumerate(CASE_ORDER)}
    rows = sorted(best_rows(state["results"]), key=lambda r: order[r["case"]])
    m = state.get("machine", {})
    parts = [
        "# Checkpoint load benchmark", "",
        f"Command: `{state['command']}`  ", f"Started {state['started']}; "
        f"{state.get('elapsed_s', 0):.0f} s elapsed when this was written.  ",
        f"Machine: {m.get('gpus', '?')}; {m.get('nproc', '?')} CPUs; {m.get('memory', '')}; "
        f"kernel {m.get('kernel', '')}; Python {m.get('python', '')}.  ",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items()), "",
        state["plan_text"] + "." + shards_text(state), "",
        "## Ceilings", "", render_ceilings(state), "",
        "## Loading into cuda:0", "",
        md_table(["loader", "case", "seconds", "GB/s", "% of ceiling", "peak host GiB (+load)",
                  "verified", "notes"], [table_row(r) for r in rows]), "",
        render_cold_rounds(state), "",
        "## Saving", "", render_save(state) if state["save"] else "not run", "",
        "## How to read this", "", LEGEND, ""]
    if state["notes"]:
        parts += ["Notes:", ""] + [f"- {n}" for n in state["notes"]] + [""]
    return "\n".join(parts)


LEGEND = """\
- Each row is a fresh process. Timed: the load call until `torch.cuda.synchronize()` returns.
  Not timed: `import torch`, CUDA context creation, a warm-up allocation, importing the loader's
  library.
- GB/s = bytes of the files the loader read / seconds (the torch rows read the `.pt` file).
- % of ceiling: cold against the disk's best O_DIRECT read of the same file, fio's best
  block size, queue depth and job count where --fio is given (else dd's single stream, which
  parallel readers can exceed); warm and shm against the pinned host-to-device copy. With
  several cold rounds, fio's best point reads the file again in every round, in turn with the
  loaders, and the cold rounds' table holds each reader's median against fio's median: one
  reading of a virtual disk can differ from the next by more than loaders differ.
- cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before the run; warm: the file read once with
  `cat` before the run; shm: the checkpoint copied to /dev/shm (tmpfs). Runs of a case go in
  rounds whose loader order reverses every other round: a virtual disk may cache below the
  page cache and favour whoever reads the same blocks again, so compare cold loaders over an
  even number of rounds (--cold-reps).
- peak host GiB: VmHWM, reset just before the load (/proc/self/clear_refs); (+load) is the rise
  over the RSS before the load. It counts mapped file pages, so mmap-based loaders show the
  mapped part of the checkpoint.
- verified: every key present, on cuda:0 with the right shape and dtype; first and last row of
  every tensor, every tensor up to 1 Mi elements and the middle tensor (by name) whole, bitwise
  equal to `safetensors.safe_open(..., device="cpu")` reads of the safetensors file.
- Saving: both savers get the same GPU tensors (same seed) in fresh processes; each file is
  fsynced after the save call returns; both times are shown."""


# ----------------------------------------------------------------------------------------------
# Command line

def csv_choice(choices):
    def parse(text):
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {', '.join(choices)}")
        return items
    return parse


def fio_point(text):
    try:
        bs, depth, jobs = text.split(":")
        return (bs, int(depth), int(jobs))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not BS:DEPTH:JOBS: {text}") from None


def labelled_env(text):
    """'label:VAR=VALUE,VAR=VALUE' -> (label, {VAR: VALUE, ...})."""
    label, sep, assignments = text.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if "=" in a)
    if not sep or not label or not env or len(env) != len([a for a in assignments.split(",") if a]):
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL:VAR=VALUE[,VAR=VALUE]")
    return label, env


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Loaders: " + ", ".join(LOADER_ORDER))
    ap.add_argument("--size", type=parse_size, default=parse_size("8"),
                    help="checkpoint payload target: decimal GB (8, 8GB) or GiB (8GiB); "
                         "as many layers as fit (default 8 GB)")
    ap.add_argument("--dir", default="/root/ckpt", help="where the checkpoint lives (default "
                    "/root/ckpt); generated once, reused while the plan matches")
    ap.add_argument("--out", default="/tmp/gpufile-out",
                    help="writes checkpoint.md, checkpoint.json and logs/ here")
    ap.add_argument("--cases", type=csv_choice(CASE_ORDER), default=list(CASE_ORDER),
                    help="comma-separated subset of cold,warm,shm")
    ap.add_argument("--loaders", type=csv_choice(LOADER_ORDER), default=list(LOADER_ORDER),
                    help="comma-separated subset of the loaders below")
    ap.add_argument("--kvikio-threads", type=lambda s: [int(x) for x in s.split(",")],
                    default=[8, 16], help="KVIKIO_NTHREADS values tried warm; the fastest is "
                    "used cold and shm; the last one if warm is not run (default 8,16)")
    ap.add_argument("--gpufile-env", type=labelled_env, action="append", default=[],
                    metavar="LABEL:VAR=VALUE[,VAR=VALUE]",
                    help="one more gpufile row per use, run with these variables set, e.g. "
                         "'buffered:GPUFILE_DIRECT_IO=never' or 'deep:GPUFILE_WORKERS=16,"
                         "GPUFILE_SLABS_PER_WORKER=4' (repeatable)")
    ap.add_argument("--shards", type=int, default=1, help="load the checkpoint cut into this many "
                    "files with a Hugging Face index (model-0000k-of-0000n.safetensors), as a "
                    "sharded checkpoint: gpufile loads the index, the others every shard, at once "
                    "where their API takes several files (default 1: the single file)")
    ap.add_argument("--cold-reps", type=int, default=1, help="runs of each loader in the cold "
                    "case, caches dropped before each (default 1)")
    ap.add_argument("--fio", default=shutil.which("fio"), metavar="PATH",
                    help="fio, for the cold ceiling: O_DIRECT reads of the cold checkpoint at "
                         "several block sizes, queue depths and job counts (default: fio on "
                         "PATH; none: dd's single stream is the ceiling)")
    ap.add_argument("--fio-point", type=fio_point, metavar="BS:DEPTH:JOBS",
                    help="fio at this one point instead of the sweep (e.g. 512K:16:1): the point "
                         "a sweep on the same disk chose, read again in every cold round")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per child process")
    ap.add_argument("--reps", type=int, default=2, help="runs of each loader in the warm and shm "
                    "cases (alternating order); the table shows the fastest (default 2)")
    ap.add_argument("--budget", type=int, default=400, help="start no loader run after this "
                    "many seconds of the whole benchmark (rows say 'skipped')")
    ap.add_argument("--no-save", action="store_true", help="skip the save comparison")
    ap.add_argument("--plan-only", action="store_true",
                    help="print the checkpoint plan and exit (needs no torch)")
    ap.add_argument("--hidden", type=int, default=4096, help=argparse.SUPPRESS)
    ap.add_argument("--intermediate", type=int, default=14336, help=argparse.SUPPRESS)
    ap.add_argument("--vocab", type=int, default=128256, help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def print_plan(args):
    plan = make_plan(args.size, args.hidden, args.intermediate, args.vocab)
    print(describe_plan(plan))
    for k, v in checkpoint_paths(plan, args.dir).items():
        print(f"  {k:8s} {v}")
    for name, shape in plan["tensors"]:
        if ".layers." not in name or ".layers.0." in name:
            print(f"  {name:48s} {shape}")
    print(f"  ... and the same 9 tensors for layers 1..{plan['layers'] - 1}"
          if plan["layers"] > 1 else "")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        return worker_main(args.worker)
    if args.plan_only:
        return print_plan(args)
    args.dir, args.out = os.path.abspath(args.dir), os.path.abspath(args.out)
    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    Bench(args).run()


if __name__ == "__main__":
    main()
