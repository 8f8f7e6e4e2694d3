"""gpufile.safetensors.load_into: filling existing tensors in place. NumPy host arrays, device
arrays of the CUDA driver (its test double in CI), arrays seen only through
__cuda_array_interface__ (as CuPy's are), torch where it is installed."""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file as st_save

import gpufile
from gpufile import safetensors as gst
from gpufile.safetensors import _checkpoint
from conftest import needs_gpu_driver
from test_safetensors import TP_SPLIT, needs_torch, sample, torch, tp_sample, write_sharded

SENTINEL = 7


def empty_like_all(t):
    """Destinations for every tensor of `t`, filled with a value no sample holds everywhere."""
    return {k: np.full(v.shape, SENTINEL, dtype=v.dtype) for k, v in t.items()}


def assert_untouched(dests):
    for k, v in dests.items():
        assert (v == SENTINEL).all(), k


def test_fills_existing_arrays_in_place(tmp_path, rng):
    t = sample(rng)
    st_save(t, tmp_path / "m.safetensors")
    dests = empty_like_all(t)
    before = {k: v.ctypes.data for k, v in dests.items()}
    got = gst.load_into(dests, tmp_path / "m.safetensors")
    assert got == gst.LoadResult([], [])
    for k, v in t.items():
        assert np.array_equal(dests[k], v), k
        assert dests[k].ctypes.data == before[k], k  # the same memory, no new allocation


def test_sharded_checkpoint(tmp_path, rng):
    t = sample(rng, 20)
    index = write_sharded(tmp_path, t)
    for where in (index, tmp_path):
        dests = empty_like_all(t)
        gst.load_into(dests, where)
        for k, v in t.items():
            assert np.array_equal(dests[k], v), k


def test_strict_names_missing_and_unexpected_before_reading(tmp_path, rng):
    t = sample(rng, 6)
    index = write_sharded(tmp_path, t, nshards=2)
    dests = empty_like_all(t)
    dests["extra.w"] = np.full(3, SENTINEL, dtype=np.float32)
    del dests["layers.1.w"]
    with pytest.raises(gst.SafetensorError, match=r"missing 1 \('extra.w'\), unexpected 1 \('layers.1.w'\)"):
        gst.load_into(dests, index)
    assert_untouched(dests)
    got = gst.load_into(dests, index, strict=False)
    assert got.missing_keys == ["extra.w"] and got.unexpected_keys == ["layers.1.w"]
    assert (dests["extra.w"] == SENTINEL).all()
    for k in dests:
        if k != "extra.w":
            assert np.array_equal(dests[k], t[k]), k


@pytest.mark.parametrize("bad, message", [
    (lambda d: d.__setitem__("layers.0.w", np.zeros((64, 48), np.float64)),
     r"tensor 'layers.0.w': the checkpoint holds F32, the destination is F64"),
    (lambda d: d.__setitem__("layers.0.w", np.zeros((48, 64), np.float32)),
     r"tensor 'layers.0.w' has shape \[64, 48\] in the checkpoint, the destination has \[48, 64\]"),
    (lambda d: d.__setitem__("layers.0.w", np.zeros((64, 96), np.float32)[:, ::2]),
     r"'layers.0.w' is not C-contiguous"),
    (lambda d: d["layers.0.w"].setflags(write=False), r"'layers.0.w' is read-only"),
    (lambda d: d.__setitem__("layers.0.w", [0.0] * 10), r"cannot load into a list"),
])
def test_a_mismatch_leaves_every_tensor_as_it_was(tmp_path, rng, bad, message):
    t = sample(rng)
    st_save(t, tmp_path / "m.safetensors")
    dests = empty_like_all(t)
    bad(dests)
    with pytest.raises(gst.SafetensorError, match=message):
        gst.load_into(dests, tmp_path / "m.safetensors")
    assert_untouched({k: v for k, v in dests.items() if k != "layers.0.w"})


def test_truncated_file(tmp_path, rng):
    t = sample(rng)
    path = tmp_path / "m.safetensors"
    st_save(t, path)
    whole = path.read_bytes()
    path.write_bytes(whole[:-100])
    dests = empty_like_all(t)
    with pytest.raises(gst.SafetensorError, match="data section"):
        gst.load_into(dests, path)
    assert_untouched(dests)


def test_file_truncated_while_loading(tmp_path, rng, monkeypatch):
    # The header is read whole, then the file shrinks before the data is: the short read is an
    # error naming the tensor, raised only after every other read has ended.
    t = {"a": rng.standard_normal(4096).astype(np.float32), "b": rng.standard_normal(4096).astype(np.float32)}
    path = tmp_path / "m.safetensors"
    st_save(t, path)
    real = gst.read_header

    def read_then_truncate(p):
        h = real(p)
        with open(p, "r+b") as f:
            f.truncate(h.data_start + h.tensors["b"].begin + 100)
        return h
    monkeypatch.setattr(_checkpoint, "read_header", read_then_truncate)  # where the loaders look it up
    dests = empty_like_all(t)
    with pytest.raises(gst.SafetensorError, match=r"m.safetensors: b: the file ended after 100 of 16384 bytes"):
        gst.load_into(dests, path)
    assert np.array_equal(dests["a"], t["a"])


def test_tied_weights_are_read_once_and_overlaps_refused(tmp_path, rng):
    w = rng.standard_normal((8, 8)).astype(np.float32)
    st_save({"emb": w, "head": w.copy()}, tmp_path / "m.safetensors")
    shared = np.zeros((8, 8), np.float32)
    gst.load_into({"emb": shared, "head": shared}, tmp_path / "m.safetensors")
    assert np.array_equal(shared, w)
    st_save({"a": w[:4], "b": w[4:]}, tmp_path / "halves.safetensors")
    mem = np.zeros(48, np.float32)
    with pytest.raises(gst.SafetensorError, match="overlap in memory"):
        gst.load_into({"a": mem[:32].reshape(4, 8), "b": mem[16:].reshape(4, 8)}, tmp_path / "halves.safetensors")
    assert not mem.any()


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_tensor_parallel_parts(tmp_path, rng, world_size):
    t = tp_sample(rng, tmp_path / "m.safetensors")
    split = TP_SPLIT
    for rank in range(world_size):
        want = {"col": np.array_split(t["col"], world_size, axis=1)[rank],
                "row": np.array_split(t["row"], world_size, axis=0)[rank], "norm": t["norm"]}
        dests = {k: np.full(v.shape, SENTINEL, v.dtype) for k, v in want.items()}
        gst.load_into(dests, tmp_path / "m.safetensors", split=split, rank=rank, world_size=world_size)
        for k in want:
            assert np.array_equal(dests[k], want[k]), (rank, k)
    if world_size > 1:
        with pytest.raises(gst.SafetensorError, match=r"rank 0's part \(dimension 1 split 2 ways\) of tensor 'col'"):
            gst.load_into({"col": np.zeros((10, 7), np.float32)}, tmp_path / "m.safetensors", strict=False,
                          split=split, rank=0, world_size=2)
    with pytest.raises(gst.SafetensorError, match="bad rank"):
        gst.load_into({}, tmp_path / "m.safetensors", split=split, rank=3, world_size=2)


class CudaArray:
    """Device memory seen only through __cuda_array_interface__, as a CuPy array is."""

    def __init__(self, array, strides=None, readonly=False):
        self.array, self.strides, self.readonly = array, strides, readonly

    @property
    def __cuda_array_interface__(self):
        cai = dict(self.array.__cuda_array_interface__)
        cai["strides"] = self.strides
        cai["data"] = (cai["data"][0], self.readonly)
        return cai


@needs_gpu_driver
def test_device_arrays_sharded(tmp_path, rng):
    t = sample(rng, 20)
    index = write_sharded(tmp_path, t)
    dests = {k: gpufile.DeviceArray.empty(v.shape, gst._dtypes.from_numpy(v.dtype).name) for k, v in t.items()}
    cai = {k: CudaArray(dests[k]) for k in list(dests)[:5]}
    gst.load_into({**dests, **cai}, index)
    for k, v in t.items():
        assert dests[k].to_bytes() == v.tobytes(), k


@needs_gpu_driver
def test_device_arrays_tensor_parallel_and_refusals(tmp_path, rng):
    w = rng.standard_normal((6, 10)).astype(np.float32)
    st_save({"w": w}, tmp_path / "m.safetensors")
    for rank in range(2):
        dest = gpufile.DeviceArray.empty((6, 5), "F32")
        gst.load_into({"w": CudaArray(dest)}, tmp_path / "m.safetensors", split={"w": 1}, rank=rank, world_size=2)
        assert dest.to_bytes() == np.ascontiguousarray(w[:, rank * 5:(rank + 1) * 5]).tobytes()
    dest = gpufile.DeviceArray.empty((6, 10), "F32")
    with pytest.raises(gst.SafetensorError, match="'w' is not C-contiguous"):
        gst.load_into({"w": CudaArray(dest, strides=(4, 24))}, tmp_path / "m.safetensors")
    with pytest.raises(gst.SafetensorError, match="'w' is read-only"):
        gst.load_into({"w": CudaArray(dest, readonly=True)}, tmp_path / "m.safetensors")
    with pytest.raises(gst.SafetensorError, match="holds F32, the destination is F64"):
        gst.load_into({"w": gpufile.DeviceArray.empty((6, 10), "F64")}, tmp_path / "m.safetensors")


@needs_torch
def test_torch_module_state_dict(tmp_path):
    devices = ["cpu"] + (["cuda:0"] if torch.cuda.is_available() else [])
    for device in devices:
        torch.manual_seed(0)
        src = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32)).to(torch.bfloat16)
        gst.save_file(src.state_dict(), tmp_path / "m.safetensors")
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32)).to(torch.bfloat16).to(device)
        ptrs = {k: v.data_ptr() for k, v in model.state_dict().items()}
        assert gst.load_into(model.state_dict(), tmp_path / "m.safetensors") == gst.LoadResult([], [])
        for k, v in model.state_dict().items():
            assert v.data_ptr() == ptrs[k] and torch.equal(v.cpu(), src.state_dict()[k]), (device, k)
        with pytest.raises(gst.SafetensorError, match="not contiguous"):
            gst.load_into({"0.weight": model[0].weight.t()}, tmp_path / "m.safetensors", strict=False)


EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tp_load.py")


def test_tensor_parallel_example_compiles():
    with open(EXAMPLE) as f:
        compile(f.read(), EXAMPLE, "exec")  # a syntax error raises; nothing is written


@needs_torch
@pytest.mark.parametrize("mode", [[], ["--into"]])
def test_tensor_parallel_example_over_gloo(tmp_path, mode):
    # What the lead runs on two GPUs over NCCL (docs/python.md), here on the CPU: a small
    # synthetic checkpoint, each rank's part checked against its slice of the whole.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
         EXAMPLE, str(tmp_path / "ckpt"), "--make-gb", "0.001", "--hidden", "64", "--intermediate", "128",
         "--vocab", "100", "--backend", "gloo", "--compare", "--check", *mode],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("every part equals its slice") == 2, run.stdout
    assert "slowest rank" in run.stdout
