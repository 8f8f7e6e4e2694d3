"""File.pread_rows / File.read_rows: rows of a file packed into host or GPU memory in one call
(a rank's part of a tensor split along its last dimension, a window of an array on disk)."""
import io

import numpy as np
import pytest

import gpufile
from conftest import device_bytes, needs_gpu_driver


def array_file(tmp_path, rng, shape, dtype=np.float32, name="a.bin"):
    a = rng.standard_normal(shape).astype(dtype)
    path = tmp_path / name
    a.tofile(path)
    return path, a


def test_columns_of_a_matrix_into_host_memory(tmp_path, rng):
    path, a = array_file(tmp_path, rng, (300, 256))
    item = a.itemsize
    out = np.zeros((300, 64), dtype=a.dtype)
    with gpufile.open(path) as f:
        n = f.read_rows(out, run=64 * item, counts=[300], strides=[256 * item], file_offset=96 * item)
    assert n == out.nbytes
    assert np.array_equal(out, a[:, 96:160])


def test_a_window_of_a_three_dimensional_array_as_a_future(tmp_path, rng):
    path, a = array_file(tmp_path, rng, (6, 40, 128), dtype=np.float16)
    item = a.itemsize
    want = a[2:5, 10:30, 32:100]
    out = np.zeros(want.shape, dtype=a.dtype)
    first = (2 * 40 * 128 + 10 * 128 + 32) * item
    with gpufile.open(path) as f:
        fut = f.pread_rows(out, 68 * item, [3, 20], [40 * 128 * item, 128 * item], first)
        assert fut.result(timeout=60) == out.nbytes
        assert fut.done()
    assert np.array_equal(out, want)


def test_no_outer_dimension_is_one_row_and_buf_offset_is_kept(data_file):
    path, data = data_file(64 << 10)
    out = np.full(10_000, 7, dtype=np.uint8)
    with gpufile.open(path) as f:
        assert f.read_rows(out, 5000, [], [], file_offset=1234, buf_offset=3000) == 5000
    assert np.array_equal(out[3000:8000], data[1234:6234])
    assert (out[:3000] == 7).all() and (out[8000:] == 7).all()  # nothing outside the rows


def test_rows_past_the_end_of_the_file_are_short(tmp_path, rng):
    # 10 rows of 100 bytes, 1000 apart, from 50: the file's 9100 bytes end inside the 10th row,
    # so the bytes that landed are nine rows and the first 50 bytes of the tenth.
    data = rng.integers(0, 256, size=9100, dtype=np.uint8)
    path = tmp_path / "short.bin"
    data.tofile(path)
    out = np.zeros(1000, dtype=np.uint8)
    with gpufile.open(path) as f:
        n = f.read_rows(out, 100, [10], [1000], file_offset=50)
    assert n == 9 * 100 + 50
    rows = np.concatenate([data[50 + 1000 * i:150 + 1000 * i] for i in range(10)])
    assert np.array_equal(out[:n], rows[:n])


def test_the_future_keeps_its_buffer_alive(data_file):
    path, data = data_file(1 << 20)
    with gpufile.open(path) as f:
        fut = f.pread_rows(bytearray(64 * 1024), 4096, [16], [65536])  # nobody else holds it
        assert fut.result() == 64 * 1024


def test_bad_rows_are_a_clear_error(data_file, tmp_path):
    path, _ = data_file(1 << 16)
    with gpufile.open(path) as f:
        with pytest.raises(ValueError, match="run must be"):
            f.read_rows(bytearray(16), 0, [4], [16])
        with pytest.raises(ValueError, match="one stride per count"):
            f.read_rows(bytearray(16), 4, [4], [16, 1])
        with pytest.raises(ValueError, match="every count"):
            f.read_rows(bytearray(16), 4, [4, 0], [16, 4])
        with pytest.raises(ValueError, match="largest file offset"):
            f.read_rows(bytearray(16), 4, [2], [1 << 63])
        with pytest.raises(ValueError, match="does not fit"):
            f.read_rows(bytearray(15), 4, [4], [16])  # 16 bytes of rows
        with pytest.raises(ValueError, match="does not fit"):
            f.pread_rows(bytearray(16), 4, [4], [16], buf_offset=1)
        with pytest.raises(ValueError, match="read-only"):
            f.read_rows(b"x" * 16, 4, [4], [16])
    with pytest.raises(ValueError, match="closed"):
        f.read_rows(bytearray(16), 4, [4], [16])
    with gpufile.open(tmp_path / "wo", "w") as f:
        with pytest.raises(io.UnsupportedOperation, match="not open for reading"):
            f.pread_rows(bytearray(16), 4, [4], [16])


@needs_gpu_driver
def test_columns_of_a_matrix_into_gpu_memory(tmp_path, rng):
    # Large enough that the rows go through more than one pinned staging buffer on their way.
    path, a = array_file(tmp_path, rng, (2048, 1024))
    item = a.itemsize
    want = np.ascontiguousarray(a[:, 256:768])
    buf = gpufile.DeviceBuffer(want.nbytes + 4096)
    with gpufile.open(path) as f:
        n = f.pread_rows(buf, 512 * item, [2048], [1024 * item], 256 * item, buf_offset=4096).result()
    assert n == want.nbytes
    assert np.array_equal(device_bytes(buf, want.nbytes, 4096), want.view(np.uint8).ravel())
