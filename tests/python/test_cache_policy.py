"""gpufile.cache_policy from Python: the setting, and what a read that misses the page cache
leaves there. The file's pages are dropped first (posix_fadvise DONTNEED: clean pages go without
root); the read goes into GPU memory (the CUDA driver's test double without a GPU), every byte is
checked, and cachestat(2) says how much of the file the page cache holds afterwards."""
import ctypes
import os

import numpy as np
import pytest

import gpufile
from conftest import device_bytes, needs_gpu_driver

MiB = 1 << 20
_NR_CACHESTAT = 451  # the same on every architecture


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


def cached_pages(path):
    """(pages of the file in the page cache, its pages), or None without cachestat."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        out = _Stat()
        if libc.syscall(_NR_CACHESTAT, fd, ctypes.byref(_Range(0, size)), ctypes.byref(out), 0):
            return None
        return out.cache, (size + 4095) // 4096
    finally:
        os.close(fd)


def drop_pages(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    assert cached_pages(path)[0] == 0, "DONTNEED left pages of the file cached"


def direct_io_works(folder):
    try:
        os.close(os.open(folder / "probe", os.O_RDWR | os.O_CREAT | os.O_DIRECT))
        return True
    except OSError:
        return False


def test_the_setting(data_file):
    path, _ = data_file(4096)
    gpufile.driver_close()
    assert gpufile.settings()["gpufile.cache_policy"] == "auto"
    with pytest.raises(ValueError, match=r"auto\|keep\|bypass"):
        gpufile.set_setting("gpufile.cache_policy", "sometimes")
    gpufile.set_setting("gpufile.cache_policy", "bypass")
    with gpufile.open(path):  # opens the driver with it
        assert gpufile.settings()["gpufile.cache_policy"] == "bypass"
    gpufile.driver_close()  # the next open starts from the defaults again
    assert gpufile.settings()["gpufile.cache_policy"] == "auto"


@needs_gpu_driver
@pytest.mark.parametrize("policy, path_taken", [("keep", "page_cache"), ("bypass", "staged_direct"),
                                                (None, "page_cache")])
def test_a_cold_read_under_the_policy(data_file, tmp_path, policy, path_taken):
    nbytes = 16 * MiB
    path, data = data_file(nbytes)
    if not direct_io_works(tmp_path):
        pytest.skip(f"no O_DIRECT in {tmp_path}: every read is a page-cache read")
    if cached_pages(path) is None:
        pytest.skip("no cachestat (Linux before 6.5)")
    gpufile.driver_close()
    if policy:
        gpufile.set_setting("gpufile.cache_policy", policy)  # None: the default, auto
    try:
        buf = gpufile.DeviceBuffer(nbytes)
        with gpufile.open(path) as f:
            drop_pages(path)
            gpufile.stats_reset()
            assert f.read(buf) == nbytes
            paths = gpufile.stats()["read"]["paths"]
        assert np.array_equal(device_bytes(buf), data)
        cached, total = cached_pages(path)
        assert paths[path_taken]["bytes"] == nbytes
        if path_taken == "page_cache":
            assert cached == total, f"{cached} of {total} pages cached after the read"
        else:
            assert cached * 100 <= total, f"{cached} of {total} pages cached after O_DIRECT reads"
    finally:
        gpufile.driver_close()  # the next test opens with defaults again
