"""gpufile.hdf5.read: contiguous and chunked datasets, whole or a selection, from the file into
host memory (NumPy) and into "device" memory (gpufile.DeviceBuffer: the CUDA test double in CI),
byte for byte what h5py itself reads. HDF5 is not in the data path; files are written here with
HDF5's default driver."""
import ctypes
import gc
import os

import h5py
import numpy as np
import pytest

import gpufile
import gpufile._hdf5_read as hdf5_read
import gpufile.hdf5
from conftest import DLPackOnly, device_bytes, needs_gpu_driver

# (shape, chunks, dtype): ranks 1 to 4, chunks that divide the shape and ones that leave edge
# chunks, chunks spanning whole trailing dimensions (one run each) and ones that do not (rows).
CASES = [
    ((1000,), (100,), "<i2"),
    ((1001,), (64,), ">f8"),
    ((40, 30), (8, 30), "<f4"),
    ((37, 29), (8, 7), "<u8"),
    ((9, 17, 13), (4, 5, 13), ">i4"),
    ((9, 17, 13), (2, 6, 4), "u1"),
    ((5, 6, 7, 8), (2, 3, 7, 3), "<c8"),
    ((3, 4), (5, 6), "<f8"),  # one chunk larger than the (resizable) dataset
]


def write_sparse(f, name, shape, chunks, dtype, seed):
    """A dataset with some chunks never written (fill value 7) and the rest random; returns it."""
    # Chunks larger than the shape need a resizable dataset.
    maxshape = (None,) * len(shape) if any(c > n for c, n in zip(chunks, shape)) else None
    d = f.create_dataset(name, shape=shape, chunks=chunks, dtype=dtype, maxshape=maxshape,
                         fillvalue=np.array(7, dtype))
    data = (np.random.default_rng(seed).random(shape) * 250).astype(dtype)
    head = tuple(slice(0, max(1, n // 2)) for n in shape)   # the first half of every dimension
    tail = tuple(slice(n - 1, n) for n in shape)              # the last element: an edge chunk
    d[head] = data[head]
    d[tail] = data[tail]
    return d


def read_into_host(d, selection=None):
    want = np.asarray(d[() if selection is None else selection])
    out = np.full(want.shape, 0x55, dtype=d.dtype)
    assert gpufile.hdf5.read(d, out, selection) == want.nbytes
    return out, want


def read_into_device(d, selection=None, slack=0):
    want = np.asarray(d[() if selection is None else selection])
    dev = gpufile.DeviceBuffer(want.nbytes + slack)
    dev.copy_from_host(np.full(dev.nbytes, 0x55, dtype=np.uint8))
    assert gpufile.hdf5.read(d, dev, selection) == want.nbytes
    return device_bytes(dev), want


@pytest.fixture(scope="module")
def sparse_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("hdf5_read") / "sparse.h5"
    with h5py.File(path, "w") as f:
        for i, (shape, chunks, dtype) in enumerate(CASES):
            write_sparse(f, f"d{i}", shape, chunks, dtype, seed=i)
        f["contiguous"] = np.random.default_rng(99).standard_normal((123, 45)).astype(">f4")
        f.create_dataset("unwritten", shape=(50, 3), dtype="<i4", fillvalue=-3)
        f.create_dataset("unwritten_chunked", shape=(50, 3), chunks=(7, 2), dtype="<f8",
                         fillvalue=1.5)
    return path


@pytest.mark.parametrize("case", range(len(CASES)))
def test_chunked_whole_dataset_into_host_memory(sparse_file, case):
    with h5py.File(sparse_file, "r") as f:
        d = f[f"d{case}"]
        assert d.id.get_num_chunks() < np.prod([-(-n // c) for n, c in zip(d.shape, d.chunks)]) \
            or d.id.get_num_chunks() == 1, "the case should have chunks never written"
        out, want = read_into_host(d)
    assert out.tobytes() == want.tobytes()


@needs_gpu_driver
@pytest.mark.parametrize("case", range(len(CASES)))
def test_chunked_whole_dataset_into_device_memory(sparse_file, case):
    with h5py.File(sparse_file, "r") as f:
        got, want = read_into_device(f[f"d{case}"], slack=64)
    assert got[:want.nbytes].tobytes() == want.tobytes()
    assert not (got[want.nbytes:] != 0x55).any(), "nothing written past the selection"


SELECTIONS = [
    (slice(1, -1),),
    (Ellipsis, slice(2, 5)),
    (-1,),
    (0, Ellipsis),
    (slice(3, 3),),          # empty
    (slice(None, None, 1), slice(1, None)),
]


@pytest.mark.parametrize("case", [2, 3, 4, 6])
def test_selections_into_host_and_device_memory(sparse_file, case):
    with h5py.File(sparse_file, "r") as f:
        d = f[f"d{case}"]
        for sel in SELECTIONS:
            out, want = read_into_host(d, sel)
            assert out.shape == want.shape and out.tobytes() == want.tobytes(), sel
            if gpufile.cuda_available():
                got, want = read_into_device(d, sel)
                assert got.tobytes() == want.tobytes(), sel


def test_contiguous_and_unwritten_datasets(sparse_file):
    with h5py.File(sparse_file, "r") as f:
        for name in ("contiguous", "unwritten", "unwritten_chunked"):
            for sel in (None, (slice(10, 20),), (Ellipsis, 1)):
                out, want = read_into_host(f[name], sel)
                assert out.tobytes() == want.tobytes(), (name, sel)
                if gpufile.cuda_available():
                    got, want = read_into_device(f[name], sel)
                    assert got.tobytes() == want.tobytes(), (name, sel)
        assert (read_into_host(f["unwritten"])[0] == -3).all()


@pytest.mark.parametrize("direct_run", [16, hdf5_read.DIRECT_RUN_BYTES])
@pytest.mark.parametrize("device", [False, True])
def test_many_chunks_in_flight_with_little_staging(tmp_path, monkeypatch, direct_run, device):
    # 600 chunks landing as rows: more than the reads in flight and than the staging buffers,
    # which are reused; with a small direct_run the rows are read straight into place instead.
    if device and not gpufile.cuda_available():
        pytest.skip("no CUDA driver (nor its test double)")
    monkeypatch.setattr(hdf5_read, "DIRECT_RUN_BYTES", direct_run)
    monkeypatch.setattr(hdf5_read, "STAGING_BYTES", 3 * 16 * 24 * 4)
    path = tmp_path / "many.h5"
    data = np.random.default_rng(4).integers(0, 1 << 30, (480, 450), dtype="<i4")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(16, 12))
    with h5py.File(path, "r") as f:
        got, _ = read_into_device(f["x"]) if device else read_into_host(f["x"])
    assert got.tobytes() == data.tobytes()


@pytest.mark.parametrize("userblock", [None, 4096])
def test_chunk_offsets_count_the_user_block(tmp_path, userblock):
    path = tmp_path / "ub.h5"
    with h5py.File(path, "w", userblock_size=userblock) as f:
        d = write_sparse(f, "x", (30, 20), (7, 6), "<f8", seed=3)
    with h5py.File(path, "r") as f:
        out, want = read_into_host(f["x"])
    assert out.tobytes() == want.tobytes()


def test_fill_time_never_leaves_out_as_it_was(tmp_path):
    # HDF5 writes nothing into a read of storage never written when the fill time is "never".
    path = tmp_path / "never.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(20,), chunks=(5,), dtype="<i4", fillvalue=9,
                             fill_time="never")
        d[0:5] = np.arange(5)
    with h5py.File(path, "r") as f:
        want = np.full(20, 99, dtype="<i4")
        f["x"].read_direct(want)
        out = np.full(20, 99, dtype="<i4")
        gpufile.hdf5.read(f["x"], out)
    assert out.tolist() == want.tolist() == list(range(5)) + [99] * 15


def test_filtered_and_other_layouts_are_refused_by_name(tmp_path):
    path = tmp_path / "refused.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip", data=np.arange(100), chunks=(10,), compression="gzip",
                         shuffle=True)
        f.create_dataset("fletcher", data=np.arange(100), chunks=(10,), fletcher32=True)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4,))
        h5py.h5d.create(f.id, b"compact", h5py.h5t.NATIVE_INT32, space, dcpl=dcpl)
        f.create_dataset("strings", data=["a", "bc"], dtype=h5py.string_dtype())
    out = np.zeros(100, dtype=np.int64)
    with h5py.File(path, "r") as f:
        with pytest.raises(ValueError, match=r"filtered \(shuffle \(filter 2\), deflate \(filter 1\)\)"):
            gpufile.hdf5.read(f["gzip"], out)
        with pytest.raises(ValueError, match="fletcher32"):
            gpufile.hdf5.read(f["fletcher"], out)
        with pytest.raises(ValueError, match="compact"):
            gpufile.hdf5.read(f["compact"], np.zeros(4, dtype=np.int32))
        with pytest.raises(ValueError, match="variable-length"):
            gpufile.hdf5.read(f["strings"], out)
    assert not out.any()


def test_bad_out_and_selection_are_refused_before_any_write(sparse_file):
    with h5py.File(sparse_file, "r") as f:
        d = f["d3"]  # (37, 29) <u8
        for out, message in [
            (np.zeros((37, 28), dtype="<u8"), r"out is <u8 \(37, 28\); the selection is <u8 \(37, 29\)"),
            (np.zeros((37, 29), dtype="<i8"), "out is <i8"),
            (np.zeros((37, 29), dtype=">u8"), "out is >u8"),
            (bytearray(37 * 29 * 8 - 1), "out holds 8583 bytes; the selection needs 8584"),
        ]:
            before = bytes(memoryview(out).cast("B"))
            with pytest.raises(ValueError, match=message):
                gpufile.hdf5.read(d, out)
            assert bytes(memoryview(out).cast("B")) == before
        with pytest.raises(ValueError, match="contiguous"):
            gpufile.hdf5.read(d, np.zeros((37, 58), dtype="<u8")[:, ::2])
        with pytest.raises(IndexError, match="step"):
            gpufile.hdf5.read(d, np.zeros((19, 29), dtype="<u8"), (slice(0, 37, 2),))
        with pytest.raises(IndexError, match="out of range"):
            gpufile.hdf5.read(d, np.zeros(29, dtype="<u8"), (37,))
        with pytest.raises(IndexError, match="3 indices"):
            gpufile.hdf5.read(d, np.zeros(1, dtype="<u8"), (0, 0, 0))
        # A byte buffer larger than the selection: the bytes past it are left alone.
        big = bytearray(b"\xaa" * (37 * 29 * 8 + 100))
        assert gpufile.hdf5.read(d, big) == 37 * 29 * 8
        assert bytes(big[:37 * 29 * 8]) == d[...].tobytes() and big[37 * 29 * 8:] == b"\xaa" * 100


@pytest.mark.parametrize("device", [False, True])
def test_truncated_file_raises_and_writes_only_inside_out(tmp_path, device):
    if device and not gpufile.cuda_available():
        pytest.skip("no CUDA driver (nor its test double)")
    path = tmp_path / "cut.h5"
    data = np.arange(64 * 64, dtype="<f8").reshape(64, 64)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(8, 8))
    slack = 256
    with h5py.File(path, "r") as f:
        # HDF5 refuses to open a truncated file: cut it once open, its chunk index read (and
        # cached) first, so the index names bytes the file no longer has.
        infos = [f["x"].id.get_chunk_info(i) for i in range(64)]
        os.truncate(path, max(i.byte_offset for i in infos) + 100)
        if device:
            out = gpufile.DeviceBuffer(data.nbytes + slack)
            out.copy_from_host(np.full(out.nbytes, 0x55, dtype=np.uint8))
        else:
            backing = np.full(data.nbytes + slack, 0x55, dtype=np.uint8)
            out = backing[:data.nbytes].view("<f8").reshape(64, 64)
        with pytest.raises(OSError, match="shorter than HDF5 says"):
            gpufile.hdf5.read(f["x"], out)
    tail = device_bytes(out)[data.nbytes:] if device else backing[data.nbytes:]
    assert (tail == 0x55).all()


@needs_gpu_driver
def test_row_copier_places_rows_and_refuses_bad_copies():
    from gpufile._gpufile import _RowCopier, _memory_of
    src = gpufile.DeviceBuffer(4096)
    pattern = np.arange(4096, dtype=np.uint32).astype(np.uint8)
    src.copy_from_host(pattern)
    assert _memory_of(src)[1:] == (4096, 0)
    assert _memory_of(np.zeros(3))[2] == -1
    # A destination pitch beyond the device's largest (2 GiB - 1 on current GPUs, and in the
    # test double) goes row by row: the double keeps untouched "device memory" unbacked.
    far = (1 << 31) + 64
    dst = gpufile.DeviceBuffer(far * 2 + 256)
    copier = _RowCopier(dst.ptr)
    tickets = [copier.copy(dst.ptr, src.ptr + 8, 100, [3], [far], [1000]),
               copier.copy(dst.ptr + 200, src.ptr, 16, [2, 2], [far, 20], [64, 32])]
    copier.wait(tickets[0])
    copier.finish()
    for row in range(3):
        assert device_bytes(dst, 100, row * far).tobytes() == pattern[8 + 1000 * row:][:100].tobytes()
    for i in range(2):
        for j in range(2):
            at = 200 + i * far + j * 20
            assert device_bytes(dst, 16, at).tobytes() == pattern[64 * i + 32 * j:][:16].tobytes()
    with pytest.raises(ValueError, match="one entry per dimension"):
        copier.copy(dst.ptr, src.ptr, 16, [2], [16, 16], [16])
    with pytest.raises(ValueError, match="negative"):
        copier.copy(dst.ptr, src.ptr, 16, [2], [-16], [16])
    if "fakecuda" in os.environ.get("GPUFILE_CUDA_LIBRARY", ""):
        # The double refuses a copy past the end of an allocation (the driver may let it read
        # the allocator's slack).
        with pytest.raises(gpufile.Error, match="cuMemcpy2DAsync"):
            copier.copy(dst.ptr, src.ptr, 64, [100], [64], [64])


def test_dlpack_out_is_checked_by_its_dtype_and_shape(sparse_file):
    # Host memory offered through DLPack alone, as a PyTorch CPU tensor offers it.
    with h5py.File(sparse_file, "r") as f:
        d = f["d2"]  # (40, 30) <f4
        wrong = np.zeros((40, 30), dtype="<i4")
        with pytest.raises(ValueError, match="out is <i4"):
            gpufile.hdf5.read(d, DLPackOnly(wrong))
        right = np.zeros((40, 30), dtype="<f4")
        assert gpufile.hdf5.read(d, DLPackOnly(right)) == right.nbytes
        assert right.tobytes() == d[...].tobytes()
    assert not wrong.any()


@pytest.mark.parametrize("staging", [64, 4096, hdf5_read.STAGING_BYTES])
def test_narrow_selections_are_staged_in_pieces(sparse_file, monkeypatch, staging):
    # A narrow selection of a contiguous dataset, or of a chunk, reads the rows around it in
    # pieces of at most a quarter of the staging (down to one run a piece).
    monkeypatch.setattr(hdf5_read, "STAGING_BYTES", staging)
    with h5py.File(sparse_file, "r") as f:
        for name, sel in [("contiguous", (slice(5, 120), slice(3, 7))),
                          ("d4", (slice(1, 9), slice(2, 15), slice(1, 3))),
                          ("d6", (1, Ellipsis, slice(0, 2)))]:
            out, want = read_into_host(f[name], sel)
            assert out.tobytes() == want.tobytes(), (name, sel)
            if gpufile.cuda_available():
                got, want = read_into_device(f[name], sel)
                assert got.tobytes() == want.tobytes(), (name, sel)


@pytest.mark.skipif("fakecuda" not in os.environ.get("GPUFILE_CUDA_LIBRARY", "")
                    or not gpufile.cuda_available(), reason="needs the CUDA test double")
def test_a_failed_copy_raises_and_leaves_nothing_behind(sparse_file):
    # The third pitched copy of a read fails while the double delays every queued copy: the
    # read raises gpufile.Error once what was queued landed, and its staging, fill block,
    # stream and events are all gone; the next read is whole.
    fake = ctypes.CDLL(os.environ["GPUFILE_CUDA_LIBRARY"])
    fake.fakecuda_live_device_bytes.restype = ctypes.c_size_t

    def live():
        gc.collect()
        return (fake.fakecuda_live_streams(), fake.fakecuda_live_events(),
                fake.fakecuda_live_device_bytes())

    with h5py.File(sparse_file, "r") as f:
        d = f["d3"]  # (37, 29) in (8, 7) chunks, some never written: rows staged, fill copied
        out = gpufile.DeviceBuffer(d.nbytes)
        gpufile.hdf5.read(d, out)  # whatever gpufile keeps between reads exists from here on
        before = live()
        fake.fakecuda_set_async_delay_us(2000)
        assert fake.fakecuda_fail_call(b"cuMemcpy2DAsync", 3, 1) == 0  # CUDA_ERROR_INVALID_VALUE
        try:
            with pytest.raises(gpufile.Error, match="cuMemcpy2DAsync"):
                gpufile.hdf5.read(d, out)
        finally:
            fake.fakecuda_reset_faults()
            fake.fakecuda_set_async_delay_us(0)
        assert live() == before
        gpufile.hdf5.read(d, out)
        assert device_bytes(out).tobytes() == d[...].tobytes()
