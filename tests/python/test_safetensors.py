"""gpufile.safetensors: compatibility with the safetensors package both ways, sharded
checkpoints, views, the DLPack path, lazy slices and tensor-parallel loading. NumPy everywhere;
torch cases run where torch is installed (the GPU machine)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file as st_load
from safetensors.numpy import save_file as st_save

import gpufile
from gpufile import safetensors as gst
from gpufile.safetensors import _loaders, _reading
from conftest import needs_gpu_driver

try:
    import torch
except ImportError:  # CI has no torch: those cases run on the GPU machine
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
needs_cuda_torch = pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                                      reason="needs torch with a GPU")


def sample(rng, n=12):
    """A small model-like dict: matrices, vectors, scalars, an empty tensor, several dtypes."""
    out = {}
    for i in range(n):
        dtype = [np.float32, np.float16, np.int64, np.uint8, np.float64, np.int32][i % 6]
        shape = [(64, 48), (1000,), (), (0, 5), (3, 4, 5), (7, 1)][i % 6]
        out[f"layers.{i}.w"] = np.asarray(rng.standard_normal(shape) * 100).astype(dtype)
    return out


def assert_same(got, want):
    assert set(got) == set(want)
    for k in want:
        g = got[k] if isinstance(got[k], np.ndarray) else np.asarray(got[k])
        assert g.dtype == want[k].dtype and g.shape == want[k].shape, k
        assert np.array_equal(g, want[k]), k


def test_loads_what_safetensors_writes(tmp_path, rng):
    t = sample(rng)
    st_save(t, tmp_path / "m.safetensors", metadata={"format": "np"})
    assert_same(gst.load_file(tmp_path / "m.safetensors", framework="numpy"), t)
    assert_same(gst.load_file(tmp_path / "m.safetensors", framework="numpy", views=True), t)
    assert gst.read_header(tmp_path / "m.safetensors").metadata == {"format": "np"}


FRESH_LOAD = """
import sys, gpufile
from gpufile import safetensors as gst
if sys.argv[2] == "refuse":  # a session that cannot open: compat mode forbidden
    gpufile.set_setting("properties.allow_compat_mode", False)
assert not gpufile.driver_is_open()
try:
    framework = "numpy" if sys.argv[3] == "cpu" else "dlpack"
    tensors = gst.load_file(sys.argv[1], device=sys.argv[3], framework=framework)
except gpufile.Error as e:
    print("ERROR", e)
else:
    print("LOADED", len(tensors), gpufile.driver_is_open())
"""


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=needs_gpu_driver)])
def test_a_first_load_opens_the_session_meanwhile_and_reports_its_failure(tmp_path, rng, device):
    # In a fresh process the loader opens gpufile's session on a thread of its own while it
    # parses the header and allocates; the load ends with the session open, and a session that
    # cannot open fails the load with gpufile's error (no hang, nothing reported read).
    want = sample(rng)
    st_save(want, str(tmp_path / "m.safetensors"))
    for mode, expect in (("open", "LOADED 12 True"), ("refuse", "ERROR")):
        run = subprocess.run([sys.executable, "-c", FRESH_LOAD, str(tmp_path / "m.safetensors"), mode, device],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(expect), (mode, run.stdout, run.stderr)


class _Watched:
    """A read's Future that records whether the loader waited for it."""

    def __init__(self, future):
        self.future, self.waited = future, False

    def result(self):
        self.waited = True
        return self.future.result()


@pytest.fixture
def session():
    """gpufile's session open for the test, and closed again after it (later tests open theirs
    with settings of their own)."""
    gpufile.driver_open()
    yield
    gpufile.driver_close()


def _watch_reads(monkeypatch, allocations):
    """Each read the loader starts, with the number of destinations allocated before it."""
    started = []

    def start(f, reads, ptr, nbytes, offset, what):
        if nbytes:
            w = _Watched(f.pread_ptr(ptr, nbytes, offset))
            started.append((w, len(allocations)))
            reads.add(w, nbytes, what)

    monkeypatch.setattr(_reading, "_start_read", start)
    return started


def test_reads_start_while_later_tensors_are_still_being_allocated(tmp_path, rng, monkeypatch, session):
    # With the session open, each tensor's read starts once its destination exists: the reads of
    # the first tensors overlap the allocation of the later ones (issue 13).
    want = sample(rng)
    st_save(want, str(tmp_path / "m.safetensors"))
    allocations = []
    allocate = _loaders._allocate
    monkeypatch.setattr(_loaders, "_allocate", lambda *a: allocations.append(a) or allocate(*a))
    started = _watch_reads(monkeypatch, allocations)
    assert_same(gst.load_file(tmp_path / "m.safetensors", framework="numpy"), want)
    assert len(allocations) == len(want)
    assert started and started[0][1] == 1  # the first read began before the second allocation
    assert [n for _w, n in started] == sorted(n for _w, n in started)
    assert all(w.waited for w, _n in started)


def test_a_failed_allocation_waits_for_the_reads_already_started(tmp_path, rng, monkeypatch, session):
    # A destination that cannot be made after earlier reads began: the load raises, and only
    # after every read it started has ended (none writes into memory the caller got back).
    st_save(sample(rng), str(tmp_path / "m.safetensors"))
    allocations = []
    allocate = _loaders._allocate

    def fail_fifth(*a):
        allocations.append(a)
        if len(allocations) == 5:
            raise MemoryError("no room for the fifth tensor")
        return allocate(*a)

    monkeypatch.setattr(_loaders, "_allocate", fail_fifth)
    started = _watch_reads(monkeypatch, allocations)
    with pytest.raises(MemoryError, match="fifth"):
        gst.load_file(tmp_path / "m.safetensors", framework="numpy")
    assert len(started) >= 3  # the empty tensor (0 bytes) starts no read
    assert all(w.waited for w, _n in started)


def test_writes_what_safetensors_loads_byte_for_byte(tmp_path, rng):
    t = sample(rng)
    gst.save_file(t, tmp_path / "g.safetensors")
    st_save(t, tmp_path / "s.safetensors")
    assert_same(st_load(tmp_path / "g.safetensors"), t)
    assert (tmp_path / "g.safetensors").read_bytes() == (tmp_path / "s.safetensors").read_bytes()
    gst.save_file(t, tmp_path / "meta.safetensors", metadata={"a": "1"}, fsync=True)
    assert gst.read_header(tmp_path / "meta.safetensors").metadata == {"a": "1"}


def test_save_refuses_bad_input(tmp_path):
    with pytest.raises(gst.SafetensorError, match="C-contiguous"):
        gst.save_file({"x": np.zeros((4, 4))[:, ::2]}, tmp_path / "x.safetensors")
    with pytest.raises(gst.SafetensorError, match="cannot save"):
        gst.save_file({"x": [1, 2, 3]}, tmp_path / "x.safetensors")
    with pytest.raises(gst.SafetensorError, match="metadata"):
        gst.save_file({"x": np.zeros(2)}, tmp_path / "x.safetensors", metadata={"a": 1})
    with pytest.raises(gst.SafetensorError, match="invalid tensor name"):
        gst.save_file({"__metadata__": np.zeros(2)}, tmp_path / "x.safetensors")


def write_sharded(tmp_path, t, nshards=3):
    names = sorted(t)
    weight_map = {}
    for s in range(nshards):
        part = {n: t[n] for n in names[s::nshards]}
        file = f"model-{s + 1:05d}-of-{nshards:05d}.safetensors"
        st_save(part, tmp_path / file)
        weight_map.update({n: file for n in part})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return index


def test_sharded_checkpoint_by_index_and_directory(tmp_path, rng):
    t = sample(rng, 20)
    index = write_sharded(tmp_path, t)
    assert_same(gst.load_file(index, framework="numpy"), t)
    assert_same(gst.load_file(tmp_path, framework="numpy"), t)


def test_index_may_not_point_outside_its_directory(tmp_path, rng):
    st_save({"a": np.zeros(3)}, tmp_path / "a.safetensors")
    sub = tmp_path / "ckpt"
    sub.mkdir()
    (sub / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../a.safetensors"}}))
    with pytest.raises(gst.SafetensorError, match="leaves the checkpoint"):
        gst.load_file(sub, framework="numpy")
    (sub / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"b": "x.safetensors"}}))
    st_save({"a": np.zeros(3)}, sub / "x.safetensors")
    with pytest.raises(gst.SafetensorError, match="lacks 1 tensor"):
        gst.load_file(sub, framework="numpy")


def test_safe_open_and_slices(tmp_path, rng):
    t = sample(rng)
    st_save(t, tmp_path / "m.safetensors", metadata={"k": "v"})
    with gst.safe_open(tmp_path / "m.safetensors", framework="numpy") as f:
        assert sorted(f.keys()) == sorted(t) and f.metadata() == {"k": "v"}
        for k in t:
            assert np.array_equal(f.get_tensor(k), t[k])
        s = f.get_slice("layers.0.w")
        assert s.get_shape() == [64, 48] and s.get_dtype() == "F32"
        w = t["layers.0.w"]
        for key in [np.s_[3:9], np.s_[:, 5:20], np.s_[-1], np.s_[2:5, -3], np.s_[10:2], np.s_[:, :]]:
            assert np.array_equal(s[key], w[key]), key
        with pytest.raises(gst.SafetensorError, match="step 1"):
            s[::2]
        with pytest.raises(gst.SafetensorError, match="no tensor named"):
            f.get_tensor("nope")


TP_SPLIT = {"col": 1, "row": 0}


def tp_sample(rng, path):
    """Tensors split along columns and rows (TP_SPLIT) and one every rank holds, saved to path."""
    t = {"col": rng.standard_normal((10, 7)).astype(np.float32),
         "row": rng.standard_normal((11, 4)).astype(np.float32),
         "norm": rng.standard_normal((7,)).astype(np.float32)}
    st_save(t, path)
    return t


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_tensor_parallel_parts_tile_the_tensor(tmp_path, rng, world_size):
    t = tp_sample(rng, tmp_path / "m.safetensors")
    split = TP_SPLIT
    parts = [gst.load_sharded(tmp_path / "m.safetensors", "cpu", split, rank=r, world_size=world_size,
                              framework="numpy") for r in range(world_size)]
    assert np.array_equal(np.concatenate([p["col"] for p in parts], axis=1), t["col"])
    assert np.array_equal(np.concatenate([p["row"] for p in parts], axis=0), t["row"])
    for p, want in zip(parts, np.array_split(t["col"], world_size, axis=1)):
        assert np.array_equal(p["col"], want)
        assert np.array_equal(p["norm"], t["norm"])
    with pytest.raises(gst.SafetensorError, match="no dimension 2"):
        gst.load_sharded(tmp_path / "m.safetensors", "cpu", {"col": 2}, rank=0, world_size=2, framework="numpy")


@needs_gpu_driver
def test_dlpack_framework_on_the_gpu(tmp_path, rng):
    t = sample(rng)
    st_save(t, tmp_path / "m.safetensors")
    for views in (False, True):
        got = gst.load_file(tmp_path / "m.safetensors", device="cuda:0", framework="dlpack", views=views)
        for k, v in t.items():
            assert isinstance(got[k], gpufile.DeviceArray) and got[k].shape == v.shape
            assert got[k].to_bytes() == v.tobytes(), k
    gst.save_file(got, tmp_path / "back.safetensors")  # straight from device memory
    assert_same(st_load(tmp_path / "back.safetensors"), t)


# ---- torch ----------------------------------------------------------------------------------------

def torch_sample():
    g = torch.Generator().manual_seed(0)
    return {"emb": torch.randn(300, 64, generator=g).to(torch.bfloat16),
            "w": torch.randn(64, 64, generator=g),
            "i": torch.arange(17, dtype=torch.int64),
            "f8": torch.randn(32, generator=g).to(torch.float8_e4m3fn),
            "empty": torch.zeros(0, 3)}


def assert_torch_same(got, want, device):
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and tuple(got[k].shape) == tuple(v.shape), k
        assert got[k].device.type == torch.device(device).type, k
        assert torch.equal(got[k].cpu().view(torch.uint8), v.view(torch.uint8)), k


@needs_torch
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=needs_cuda_torch)])
def test_torch_round_trip_with_safetensors(tmp_path, device):
    from safetensors.torch import load_file as st_torch_load
    from safetensors.torch import save_file as st_torch_save
    t = torch_sample()
    st_torch_save(t, tmp_path / "s.safetensors")
    for views in (False, True):
        assert_torch_same(gst.load_file(tmp_path / "s.safetensors", device=device, views=views), t, device)
    gst.save_file({k: v.to(device) for k, v in t.items()}, tmp_path / "g.safetensors")
    assert_torch_same(st_torch_load(tmp_path / "g.safetensors"), t, "cpu")
    assert (tmp_path / "g.safetensors").read_bytes() == (tmp_path / "s.safetensors").read_bytes()


@needs_cuda_torch
def test_torch_views_share_one_allocation(tmp_path):
    t = torch_sample()
    gst.save_file(t, tmp_path / "g.safetensors")
    got = gst.load_file(tmp_path / "g.safetensors", device="cuda:0", views=True)
    storages = {v.untyped_storage().data_ptr() for v in got.values() if v.numel()}
    assert len(storages) == 1
    dl = gst.load_file(tmp_path / "g.safetensors", device="cuda:0", framework="dlpack")
    assert torch.equal(torch.from_dlpack(dl["w"]).cpu(), t["w"])


TP_WORKER = r"""
import os, sys, torch, torch.distributed as dist
from gpufile import safetensors as gst
rank, world, path, port, backend = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
device = f"cuda:{rank}" if backend == "nccl" else "cpu"
if backend == "nccl":
    torch.cuda.set_device(rank)
dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
full = gst.load_file(path, device="cpu")
for mode in ("read", "broadcast"):
    part = gst.load_sharded(path, device, {"col": 1, "row": 0}, replicated=mode)
    assert part["col"].device == torch.device(device)
    assert torch.equal(part["col"].cpu(), torch.tensor_split(full["col"], world, dim=1)[rank])
    assert torch.equal(part["row"].cpu(), torch.tensor_split(full["row"], world, dim=0)[rank])
    assert torch.equal(part["norm"].cpu(), full["norm"])
dist.barrier()
dist.destroy_process_group()
print("ok", rank)
"""


def run_tensor_parallel(tmp_path, backend):
    g = torch.Generator().manual_seed(1)
    gst.save_file({"col": torch.randn(9, 10, generator=g), "row": torch.randn(13, 3, generator=g),
                   "norm": torch.randn(10, generator=g)}, tmp_path / "m.safetensors")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # NVLink multicast stays off on shared multi-GPU hosts.
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    procs = [subprocess.Popen([sys.executable, "-c", TP_WORKER, str(r), "2", str(tmp_path / "m.safetensors"),
                               str(port), backend], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
             for r in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.startswith("ok")


@needs_torch
def test_tensor_parallel_with_two_gloo_processes(tmp_path):
    run_tensor_parallel(tmp_path, "gloo")


@pytest.mark.skipif(torch is None or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensor_parallel_with_two_gpus_over_nccl(tmp_path):
    run_tensor_parallel(tmp_path, "nccl")
