"""gpufile.safetensors: tensor-parallel parts that are many short runs in the file (a tensor
split along a later dimension) are read through their span and scattered into place, or, for
GPU destinations whose span the page cache holds, gathered run by run out of the page cache
(python/gpufile/_scatter.py), instead of one read per run. Every path, host and device
destinations (the CUDA driver's test double in CI), load_sharded, load_into and safe_open."""
import ctypes
import gc
import os

import numpy as np
import pytest
from safetensors.numpy import save_file as st_save

import gpufile
from gpufile import _scatter
from gpufile import safetensors as gst
from gpufile.safetensors import _checkpoint, _reading
from conftest import needs_driver_double, needs_gpu_driver
from test_cache_policy import drop_pages
from test_safetensors import needs_cuda_torch, torch
from test_safetensors_into import CudaArray

# (shape, split dimension): rows, columns, the last and a middle dimension of a 3-D tensor;
# sizes that no world size below divides evenly.
SPLITS = [((37, 50), 0), ((37, 50), 1), ((5, 6, 33), 2), ((5, 6, 33), 1), ((4, 1, 9), 2)]
DTYPES = [np.uint8, np.float16, np.float32]  # 1, 2 and 4 bytes


@pytest.fixture(params=["span", "gather", "per-run"])
def path(request, monkeypatch):
    """One path for every part: "span" (tiny pieces and staging, so that a part is many pieces
    and slots are reused), "gather" (GPU parts gathered out of the page cache, in tiny pieces;
    host parts as "span") or "per-run" (the span path off)."""
    if request.param in ("span", "gather"):
        monkeypatch.setattr(_scatter, "SPAN_RUN_BYTES", 1 << 30)
        monkeypatch.setattr(_scatter, "PIECE_BYTES", 300)
        monkeypatch.setattr(_scatter, "STAGING_BYTES", 700)
        monkeypatch.setattr(_scatter, "GATHER", "always" if request.param == "gather" else "never")
    else:
        monkeypatch.setattr(_scatter, "SPAN_RUN_BYTES", 0)
    return request.param


def write(tmp_path, rng, dtype, shapes):
    t = {f"t{i}": (rng.standard_normal(shape) * 50).astype(dtype) for i, shape in enumerate(shapes)}
    st_save(t, tmp_path / "m.safetensors")
    return t


def assert_part(got, whole, dim, rank, world_size):
    want = np.ascontiguousarray(np.array_split(whole, world_size, axis=dim)[rank])
    if isinstance(got, np.ndarray):
        assert got.shape == want.shape and np.array_equal(got, want)
    else:  # a DeviceArray
        assert tuple(got.shape) == want.shape and got.to_bytes() == want.tobytes()


def sharded(tmp_path, device, world_size, rank, split):
    framework = "numpy" if device == "cpu" else "dlpack"
    return gst.load_sharded(tmp_path / "m.safetensors", device, split, rank=rank, world_size=world_size,
                            framework=framework)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=needs_gpu_driver)])
def test_load_sharded_parts(tmp_path, rng, path, dtype, device):
    t = write(tmp_path, rng, dtype, [shape for shape, _ in SPLITS])
    split = {f"t{i}": dim for i, (_, dim) in enumerate(SPLITS)}
    for world_size in (1, 2, 3, 4):
        for rank in range(world_size):
            got = sharded(tmp_path, device, world_size, rank, split)
            for name, dim in split.items():
                assert_part(got[name], t[name], dim, rank, world_size)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["numpy", pytest.param("device", marks=needs_gpu_driver),
                                  pytest.param("cuda-array", marks=needs_gpu_driver)])
def test_load_into_parts(tmp_path, rng, path, dtype, kind):
    t = write(tmp_path, rng, dtype, [shape for shape, _ in SPLITS])
    split = {f"t{i}": dim for i, (_, dim) in enumerate(SPLITS)}
    name = gst._dtypes.from_numpy(np.dtype(dtype)).name
    world_size = 3
    for rank in range(world_size):
        parts = {n: np.array_split(t[n], world_size, axis=dim)[rank] for n, dim in split.items()}
        if kind == "numpy":
            dests = {n: np.zeros(p.shape, dtype) for n, p in parts.items()}
            given = dests
        else:
            dests = {n: gpufile.DeviceArray.empty(p.shape, name) for n, p in parts.items()}
            given = dests if kind == "device" else {n: CudaArray(d) for n, d in dests.items()}
        gst.load_into(given, tmp_path / "m.safetensors", split=split, rank=rank, world_size=world_size)
        for n, dim in split.items():
            assert_part(dests[n], t[n], dim, rank, world_size)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=needs_gpu_driver)])
def test_safe_open_column_slices(tmp_path, rng, path, device):
    t = write(tmp_path, rng, np.float32, [(40, 30), (3, 8, 20)])
    framework = "numpy" if device == "cpu" else "dlpack"
    with gst.safe_open(tmp_path / "m.safetensors", framework=framework, device=device) as f:
        for got, want in [(f.get_slice("t0")[:, 7:19], t["t0"][:, 7:19]),
                          (f.get_slice("t0")[3:31, 2:3], t["t0"][3:31, 2:3]),
                          (f.get_slice("t1")[1:, 2:7, 5:6], t["t1"][1:, 2:7, 5:6])]:
            if isinstance(got, np.ndarray):
                assert np.array_equal(got, want)
            else:
                assert got.to_bytes() == np.ascontiguousarray(want).tobytes()


class CountingFile(gpufile.File):
    """gpufile.File counting the reads the loader asks of it: plain reads, and gathers."""
    reads = 0
    gathers = 0

    def pread_ptr(self, ptr, size, file_offset=0):
        CountingFile.reads += 1
        return super().pread_ptr(ptr, size, file_offset)

    def _pread_rows_ptr(self, ptr, run, counts, strides, file_offset):
        CountingFile.gathers += 1
        return super()._pread_rows_ptr(ptr, run, counts, strides, file_offset)


def read_calls(fn, gathers=None):
    """How many reads fn() asks of the files gpufile.safetensors' loaders open (in _reading);
    with a list for `gathers`, how many gathers it asks is appended to it."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_reading, "File", CountingFile)
        CountingFile.reads = CountingFile.gathers = 0
        fn()
    if gathers is not None:
        gathers.append(CountingFile.gathers)
    return CountingFile.reads


@needs_gpu_driver
def test_gpu_columns_are_gathered_where_the_page_cache_holds_them(tmp_path, rng):
    # By default a GPU part of a quarter of its span, the span cached, is one gather (no span
    # read); the same part of a file the page cache does not hold is one span read, and so is a
    # half (a gather wins only where the span is several times the part). All land the same
    # bytes. (4 MiB: the header's read and its readahead bring in only the file's first pages.)
    t = write(tmp_path, rng, np.float32, [(2048, 512)])
    path = tmp_path / "m.safetensors"
    probe = gpufile.File(str(path))
    if probe._cached(0, os.path.getsize(path)) is None:
        pytest.skip("the kernel cannot say what the page cache holds (no cachestat)")
    probe.close()
    gathers = []

    def load(world):
        return read_calls(lambda: assert_part(sharded(tmp_path, "cuda:0", world, 1, {"t0": 1})["t0"], t["t0"], 1, 1,
                                              world), gathers)
    assert load(4) == 0 and gathers == [1]
    assert load(2) == 1 and gathers == [1, 0]
    drop_pages(path)
    assert load(4) == 1 and gathers == [1, 0, 0]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=needs_gpu_driver)])
def test_columns_are_one_read_with_the_default_settings(tmp_path, rng, device, monkeypatch):
    # A 64-row tensor split in columns: by default one read of the rows' span, not 64 reads of a
    # row's half each; the span path off, 64. A regression to one read per row fails here.
    # (Spans the page cache holds are gathered on the GPU: the test above.)
    monkeypatch.setattr(_scatter, "GATHER", "never")
    t = write(tmp_path, rng, np.float32, [(64, 64)])
    split = {"t0": 1}
    calls = read_calls(lambda: sharded(tmp_path, device, 2, 1, split))
    assert calls == 1
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_scatter, "SPAN_RUN_BYTES", 0)
        assert read_calls(lambda: sharded(tmp_path, device, 2, 1, split)) == 64
    assert_part(sharded(tmp_path, device, 2, 1, split)["t0"], t["t0"], 1, 1, 2)


def test_rows_and_long_runs_keep_one_read_per_run(tmp_path, rng, monkeypatch):
    # A part along rows is one run: one read, no staging. Runs at least SPAN_RUN_BYTES long are
    # read straight into place, one read each.
    t = write(tmp_path, rng, np.float32, [(64, 64)])
    made = []
    monkeypatch.setattr(_scatter._Staging, "allocate", lambda self: made.append(self))
    assert read_calls(lambda: sharded(tmp_path, "cpu", 2, 0, {"t0": 0})) == 1
    monkeypatch.setattr(_scatter, "SPAN_RUN_BYTES", 32 * 4)
    assert read_calls(lambda: sharded(tmp_path, "cpu", 2, 0, {"t0": 1})) == 64
    assert made == []


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=needs_gpu_driver)])
def test_staging_is_bounded_reused_and_let_go(tmp_path, rng, monkeypatch, device):
    # 1000 rows of 16 bytes split in halves: pieces of at most 1 KiB (64 rows), staging of at most
    # 3 KiB, so the part takes 16 span reads through 3 slots, each slot read into again only after
    # the copy out of it landed; all staging is let go when the load returns.
    monkeypatch.setattr(_scatter, "PIECE_BYTES", 1024)
    monkeypatch.setattr(_scatter, "STAGING_BYTES", 3 * 1024)
    monkeypatch.setattr(_scatter, "GATHER", "never")
    t = write(tmp_path, rng, np.float32, [(1000, 4)])
    made = []
    real = _scatter._Staging.allocate

    def allocate(self):
        made.append(self)
        real(self)
    monkeypatch.setattr(_scatter._Staging, "allocate", allocate)
    calls = read_calls(lambda: assert_part(sharded(tmp_path, device, 2, 1, {"t0": 1})["t0"], t["t0"], 1, 1, 2))
    assert calls == 16
    assert len(made) == 1
    assert made[0].slots * made[0].slot_bytes <= 3 * 1024 and made[0].slots == 3
    assert made[0].memory is None and made[0].copier is None


@needs_driver_double
def test_slow_copies_and_a_failed_copy(tmp_path, rng, monkeypatch):
    # With every copy of the driver's test double delayed, the parts are whole: each of the 16
    # pieces goes through one of 2 slots (pieces large enough for gpufile's workers, whose
    # copies do not wait for the legacy stream). A copy that fails raises gpufile.Error, after
    # every read and copy ended; the row copiers (each a stream and its events) and the staging
    # are let go, failed or not; the next load is whole. (Streams and events are not counted:
    # gpufile's workers make theirs when first used, whichever worker that is.)
    monkeypatch.setattr(_scatter, "PIECE_BYTES", 512 << 10)
    monkeypatch.setattr(_scatter, "STAGING_BYTES", 1 << 20)
    monkeypatch.setattr(_scatter, "GATHER", "never")
    t = write(tmp_path, rng, np.float32, [(32768, 64)])
    fake = ctypes.CDLL(os.environ["GPUFILE_CUDA_LIBRARY"])
    fake.fakecuda_live_device_bytes.restype = ctypes.c_size_t
    copiers = {"made": 0, "gone": 0}

    class Copier(gpufile._gpufile._RowCopier):
        def __init__(self, dst):
            super().__init__(dst)
            copiers["made"] += 1

        def __del__(self):
            copiers["gone"] += 1
    monkeypatch.setattr(gpufile._gpufile, "_RowCopier", Copier)

    def device_bytes():
        gc.collect()
        return fake.fakecuda_live_device_bytes()
    before = device_bytes()
    fake.fakecuda_set_async_delay_us(3000)
    try:
        for rank in range(2):
            assert_part(sharded(tmp_path, "cuda:0", 2, rank, {"t0": 1})["t0"], t["t0"], 1, rank, 2)
        dest = gpufile.DeviceArray.empty((32768, 32), "F32")
        assert fake.fakecuda_fail_call(b"cuMemcpy2DAsync", 3, 1) == 0  # CUDA_ERROR_INVALID_VALUE
        with pytest.raises(gpufile.Error, match="cuMemcpy2DAsync"):
            gst.load_into({"t0": dest}, tmp_path / "m.safetensors", split={"t0": 1}, rank=0, world_size=2)
    finally:
        fake.fakecuda_reset_faults()
        fake.fakecuda_set_async_delay_us(0)
    assert device_bytes() == before + dest.nbytes  # the staging went
    gst.load_into({"t0": dest}, tmp_path / "m.safetensors", split={"t0": 1}, rank=0, world_size=2)
    assert_part(dest, t["t0"], 1, 0, 2)
    del dest
    assert device_bytes() == before
    assert copiers == {"made": 4, "gone": 4}


def test_a_slot_is_read_into_again_only_after_its_copy_landed(monkeypatch):
    # The order of reads into staging slots and copies out of them, recorded with a stand-in
    # file and row copier: every read into a slot that was copied out of before comes after a
    # wait for that copy (GPU copies are asynchronous; on the driver's test double a copy out of
    # a slot usually lands before the next read does anyway, so this is checked here).
    log = []

    class Done:
        def __init__(self, n):
            self.n = n

        def result(self):
            return self.n

    class File:
        def pread_ptr(self, ptr, size, file_offset=0):
            log.append(("read", ptr))
            return Done(size)

    class Copier:
        tickets = 0

        def __init__(self, dst):
            pass

        def copy(self, dst, src, row_bytes, counts, dst_strides, src_strides):
            Copier.tickets += 1
            log.append(("copy", src, Copier.tickets))
            return Copier.tickets

        def wait(self, ticket):
            log.append(("wait", ticket))

        def finish(self):
            log.append(("finish",))

    def allocate(self):
        self.memory, self.addr = object(), 1 << 20
    monkeypatch.setattr(gpufile._gpufile, "_RowCopier", Copier)
    monkeypatch.setattr(_scatter._Staging, "allocate", allocate)
    monkeypatch.setattr(_scatter, "STAGING_BYTES", 3 * 1016)
    p = _scatter.Placement(8, (64,), 0, (16,), 0, (8,))
    scatters = [_scatter.Scatter(1 << 30, 0, 1000 * i, p, f"t{i}") for i in range(10)]
    spans = _scatter.Spans(scatters, lambda what, got, n: AssertionError(what))
    f = File()
    for sc in scatters:
        spans.read(f, sc)
    spans.finish()
    last_copy, waited, slots = {}, 0, set()
    for entry in log:
        if entry[0] == "read":
            slots.add(entry[1])
            assert entry[1] not in last_copy or last_copy[entry[1]] <= waited, log
        elif entry[0] == "copy":
            last_copy[entry[1]] = entry[2]
        elif entry[0] == "wait":
            waited = max(waited, entry[1])
    assert len(slots) == 3 and sum(e[0] == "copy" for e in log) == 10 and log[-1] == ("finish",)


def test_gathers_in_flight_are_bounded(monkeypatch):
    # Parts whose spans are cached are gathered, at most GATHER_IN_FLIGHT at once (each holds a
    # thread of gpufile's own); every one has ended when finish() returns. A stand-in file.
    running, most = [], [0]

    class Gather:
        def __init__(self, n):
            self.n = n
            running.append(self)
            most[0] = max(most[0], len(running))

        def result(self):
            running.remove(self)
            return self.n

    class File:
        def _cached(self, offset, length):
            return True

        def _pread_rows_ptr(self, ptr, run, counts, strides, file_offset):
            return Gather(run * counts[0])

        def pread_ptr(self, ptr, size, file_offset=0):
            raise AssertionError("a cached part was read through its span")

    monkeypatch.setattr(_scatter, "GATHER", "auto")
    monkeypatch.setattr(_scatter, "GATHER_IN_FLIGHT", 3)
    p = _scatter.Placement(8, (64,), 0, (32,), 0, (8,))  # a quarter of its span
    scatters = [_scatter.Scatter(1 << 30, 0, 1000 * i, p, f"t{i}") for i in range(10)]
    spans = _scatter.Spans(scatters, lambda what, got, n: AssertionError(what))
    for sc in scatters:
        spans.read(File(), sc)
    spans.finish()
    assert most[0] == 3 and running == []


@pytest.mark.parametrize("where", ["host", pytest.param("gpu", marks=needs_gpu_driver)])
def test_a_file_truncated_while_loading_is_an_error(tmp_path, rng, monkeypatch, where):
    # The header is read whole, then the file shrinks before the data is: the span read (host)
    # or the gather (GPU) comes back short, and the load raises (after every read ended) instead
    # of returning a part.
    monkeypatch.setattr(_scatter, "GATHER", "always")
    write(tmp_path, rng, np.float32, [(64, 64)])
    path = tmp_path / "m.safetensors"
    real = gst.read_header

    def read_then_truncate(p):
        h = real(p)
        with open(p, "r+b") as f:
            f.truncate(h.data_start + h.tensors["t0"].begin + 1000)
        return h
    monkeypatch.setattr(_checkpoint, "read_header", read_then_truncate)  # where the loaders look it up
    dest = np.zeros((64, 32), np.float32) if where == "host" else gpufile.DeviceArray.empty((64, 32), "F32")
    with pytest.raises(gst.SafetensorError, match=r"m.safetensors: t0: the file ended after"):
        gst.load_into({"t0": dest}, path, split={"t0": 1}, rank=1, world_size=2)


@needs_cuda_torch
def test_torch_bf16_columns_on_the_gpu(tmp_path):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(257, 130, generator=g).to(torch.bfloat16)
    x = torch.randn(3, 5, 66, generator=g).to(torch.bfloat16)
    gst.save_file({"w": w, "x": x}, tmp_path / "m.safetensors")
    for rank in range(3):
        got = gst.load_sharded(tmp_path / "m.safetensors", "cuda:0", {"w": 1, "x": 2}, rank=rank, world_size=3)
        assert torch.equal(got["w"].cpu(), torch.tensor_split(w, 3, dim=1)[rank])
        assert torch.equal(got["x"].cpu(), torch.tensor_split(x, 3, dim=2)[rank])
        dests = {"w": torch.empty_like(got["w"]), "x": torch.empty_like(got["x"])}
        gst.load_into(dests, tmp_path / "m.safetensors", split={"w": 1, "x": 2}, rank=rank, world_size=3)
        assert torch.equal(dests["w"], got["w"]) and torch.equal(dests["x"], got["x"])
