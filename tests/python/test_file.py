"""gpufile.File: reads and writes between files and host or device memory, futures, stream IO,
the buffer kinds it accepts, and the errors it raises."""
import io
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import gpufile
from conftest import DLPackOnly, device_bytes, needs_gpu_driver

MiB = 1 << 20


# ---- host memory --------------------------------------------------------------------------------

@pytest.mark.parametrize("nbytes", [1, 4095, 4096, 65 * 1024, 3 * MiB + 17, 16 * MiB])
def test_read_into_numpy(data_file, nbytes):
    path, data = data_file(nbytes)
    out = np.zeros(nbytes, dtype=np.uint8)
    with gpufile.open(path) as f:
        assert f.size() == nbytes
        assert f.read(out) == nbytes
    assert np.array_equal(out, data)


def test_read_with_offsets_and_size(data_file):
    path, data = data_file(1 * MiB)
    out = np.full(4096, 7, dtype=np.uint8)
    with gpufile.open(path) as f:
        assert f.read(out, size=1000, file_offset=12345, buf_offset=100) == 1000
    assert np.array_equal(out[100:1100], data[12345:13345])
    assert (out[:100] == 7).all() and (out[1100:] == 7).all()


def test_read_is_short_only_at_end_of_file(data_file):
    path, data = data_file(10_000)
    out = np.zeros(8192, dtype=np.uint8)
    with gpufile.open(path) as f:
        assert f.read(out, file_offset=6000) == 4000
        assert f.read(out, file_offset=10_000) == 0
        assert f.read(out, file_offset=50_000) == 0
    assert np.array_equal(out[:4000], data[6000:])


def test_write_then_read_back(tmp_path, rng):
    data = rng.integers(0, 256, size=5 * MiB + 3, dtype=np.uint8)
    path = tmp_path / "w.bin"
    with gpufile.open(path, "w") as f:
        assert f.write(data) == data.size
        assert f.write(b"tail", file_offset=data.size) == 4
    assert path.read_bytes() == data.tobytes() + b"tail"


@pytest.mark.parametrize("make", [bytearray, lambda n: memoryview(bytearray(n)),
                                  lambda n: np.zeros(n // 4, dtype=np.float32)])
def test_buffer_protocol_objects(data_file, make):
    path, data = data_file(64 * 1024)
    buf = make(64 * 1024)
    with gpufile.open(path) as f:
        assert f.read(buf) == 64 * 1024
    assert bytes(memoryview(buf).cast("B")) == data.tobytes()


def test_dlpack_host_memory(data_file):
    path, data = data_file(100_000)
    arr = np.zeros(25_000, dtype=np.int32)
    with gpufile.open(path) as f:
        assert f.read(DLPackOnly(arr)) == 100_000
    assert arr.tobytes() == data.tobytes()


def test_modes(tmp_path):
    p = tmp_path / "m.bin"
    with gpufile.open(p, "w+") as f:
        assert f.mode == "w+" and f.name == str(p)
        f.write(b"abcdef")
        out = bytearray(6)
        assert f.read(out) == 6 and out == b"abcdef"
    with gpufile.open(p, "a") as f:  # keeps the contents, writes at the offset given
        f.write(b"XY", file_offset=2)
    assert p.read_bytes() == b"abXYef"
    with pytest.raises(FileExistsError):
        gpufile.open(p, "x")
    with pytest.raises(ValueError, match="invalid mode"):
        gpufile.open(p, "rw")


# ---- futures ------------------------------------------------------------------------------------

def test_pread_pwrite_futures(tmp_path, rng):
    data = rng.integers(0, 256, size=8 * MiB, dtype=np.uint8)
    path = tmp_path / "f.bin"
    with gpufile.open(path, "w+") as f:
        futs = [f.pwrite(data[i:i + MiB], file_offset=i) for i in range(0, data.size, MiB)]
        assert sum(fu.result() for fu in futs) == data.size
        assert all(fu.done() for fu in futs)
        out = np.zeros_like(data)
        futs = [f.pread(out, size=MiB, file_offset=i, buf_offset=i) for i in range(0, data.size, MiB)]
        assert [fu.result(timeout=60) for fu in futs] == [MiB] * 8
        assert futs[0].result() == MiB  # asking again gives the same answer
    assert np.array_equal(out, data)


def test_future_keeps_its_buffer_alive(data_file):
    path, data = data_file(2 * MiB)
    with gpufile.open(path) as f:
        fut = f.pread(bytearray(2 * MiB))  # nobody else holds the bytearray
        assert fut.result() == 2 * MiB


def test_dropping_a_future_waits_for_it(data_file):
    path, _ = data_file(4 * MiB)
    def bytes_read():  # per-path counters count whatever the stats level
        return sum(p["bytes"] for p in gpufile.stats()["read"]["paths"].values())
    before = bytes_read()
    with gpufile.open(path) as f:
        for _ in range(20):
            f.pread(np.zeros(4 * MiB, dtype=np.uint8))  # dropped at once: waits, then frees
        # Every IO finished (and was counted) before its Future and its buffer went away.
        assert bytes_read() - before == 20 * 4 * MiB


def test_close_waits_for_futures_it_did_not_see(data_file):
    path, data = data_file(8 * MiB)
    out = np.zeros(8 * MiB, dtype=np.uint8)
    f = gpufile.open(path)
    fut = f.pread(out)
    f.close()
    assert fut.done() and fut.result() == 8 * MiB
    assert np.array_equal(out, data)


# ---- device memory (the test double without a GPU) ------------------------------------------------

@needs_gpu_driver
@pytest.mark.parametrize("nbytes", [100, 64 * 1024, 64 * 1024 + 1, 9 * MiB + 5])
def test_device_round_trip(tmp_path, rng, nbytes):
    data = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    src = tmp_path / "src.bin"
    data.tofile(src)
    buf = gpufile.DeviceBuffer(nbytes)
    with gpufile.open(src) as f:
        assert f.read(buf) == nbytes
    assert np.array_equal(device_bytes(buf), data)
    dst = tmp_path / "dst.bin"
    with gpufile.open(dst, "w") as f:
        assert f.pwrite(buf).result() == nbytes
    assert dst.read_bytes() == data.tobytes()


@needs_gpu_driver
def test_device_array_through_dlpack(data_file):
    path, data = data_file(1 * MiB)
    arr = gpufile.DeviceArray.empty((MiB // 2,), "BF16")
    assert arr.__dlpack_device__() == (2, 0)
    with gpufile.open(path) as f:
        assert f.read(DLPackOnly(arr)) == MiB  # the DLPack path, not the CUDA array interface
    assert arr.to_bytes() == data.tobytes()
    with pytest.raises(AttributeError):
        arr.__cuda_array_interface__  # bf16 has no typestr


@needs_gpu_driver
def test_stream_read_and_write(tmp_path, data_file):
    path, data = data_file(3 * MiB + 100)
    buf = gpufile.DeviceBuffer(data.size)
    with gpufile.open(path) as f:
        sf = f.read_async(buf, 0)  # the legacy default stream
        assert sf.result() == data.size and sf.done()
    assert np.array_equal(device_bytes(buf), data)
    out = tmp_path / "out.bin"
    with gpufile.open(out, "w") as f:
        assert f.write_async(buf, 0, size=1000, file_offset=10, buf_offset=5).result() == 1000
    assert out.read_bytes() == b"\0" * 10 + data[5:1005].tobytes()


@needs_gpu_driver
def test_device_buffer_bounds():
    buf = gpufile.DeviceBuffer(1000)
    with pytest.raises(ValueError, match="do not fit"):
        buf.copy_to_host(bytearray(10), 995)
    with pytest.raises(ValueError, match="does not fit"):
        gpufile.DeviceArray(buf, 900, (200,), "U8")
    with pytest.raises(ValueError, match="does not exist"):
        gpufile.DeviceBuffer(10, device=99)


# ---- bad input ----------------------------------------------------------------------------------

def test_bad_input_is_a_clear_error(data_file, tmp_path):
    path, _ = data_file(4096)
    with gpufile.open(path) as f:
        with pytest.raises(ValueError, match="read-only"):
            f.read(b"immutable")
        with pytest.raises(ValueError, match="C-contiguous"):
            f.read(np.zeros((64, 64), dtype=np.uint8)[:, ::2])
        with pytest.raises(TypeError, match="neither"):
            f.read(object())
        with pytest.raises(ValueError, match="does not fit"):
            f.read(bytearray(10), size=11)
        with pytest.raises(ValueError, match="past the end"):
            f.read(bytearray(10), buf_offset=11)
        with pytest.raises(ValueError):
            f.read(bytearray(10), file_offset=-1)
        with pytest.raises(io.UnsupportedOperation, match="not open for writing"):
            f.write(b"x")
    with pytest.raises(ValueError, match="closed"):
        f.read(bytearray(1))
    with pytest.raises(FileNotFoundError) as e:
        gpufile.open(tmp_path / "missing")
    assert e.value.errno == 2 and e.value.filename == str(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        gpufile.open(tmp_path, "w")
    with gpufile.open(tmp_path / "wo", "w") as f:
        with pytest.raises(io.UnsupportedOperation, match="not open for reading"):
            f.pread(bytearray(1))


# ---- settings, statistics, the GIL ----------------------------------------------------------------

def test_settings_and_stats(data_file):
    path, _ = data_file(9 << 20)
    gpufile.driver_close()
    assert not gpufile.driver_is_open()
    gpufile.set_setting("gpufile.workers", 3)
    gpufile.set_setting("gpufile.direct_io", "never")
    with pytest.raises(ValueError, match="unknown setting"):
        gpufile.set_setting("gpufile.no_such_thing", 1)
    with pytest.raises(ValueError, match="0..256"):
        gpufile.set_setting("gpufile.workers", 1000)
    assert gpufile.settings()["gpufile.workers"] == 3
    gpufile.stats_reset()
    with gpufile.open(path) as f:
        # More than a slab (4 MiB): cut into pieces however many workers are idle at that
        # moment (right after the open, on a loaded machine, perhaps none yet), so it counts
        # under the page-cache path; a 2 MiB read with no idle worker is one piece on this
        # thread and counted under small_io, which made this test depend on the scheduler.
        f.read(bytearray(8 << 20))
        f.read(bytearray(200 * 1024))  # one piece: read on this thread
        s = gpufile.settings()
        assert s["gpufile.workers"] == 3 and s["gpufile.direct_io"] == "never"
        with pytest.raises(gpufile.Error, match="driver opens"):
            gpufile.set_setting("gpufile.workers", 4)
    st = gpufile.stats()
    assert st["read"]["paths"]["page_cache"]["bytes"] == 8 << 20
    assert st["read"]["paths"]["small_io"]["bytes"] == 200 * 1024
    assert gpufile.engine() in ("io_uring", "posix")
    gpufile.driver_close()  # the next test opens with defaults again
    assert gpufile.settings()["gpufile.workers"] == 0


def test_stats_time_calls_and_count_devices(data_file):
    # Level 3: every call timed under the path that carried it, and counted under the device
    # its memory is on; reads into host memory have their own row.
    path, _ = data_file(2 * MiB)
    gpufile.driver_close()
    gpufile.set_setting("profile.cufile_stats", 3)
    try:
        with gpufile.open(path) as f:
            gpufile.stats_reset()
            empty = gpufile.stats()
            dev = gpufile.DeviceBuffer(2 * MiB)
            assert f.read(dev) == 2 * MiB
            assert f.pread(dev, 4096, 0).result() == 4096  # a Future: timed to its completion
            assert f.read(bytearray(8192)) == 8192
            st = gpufile.stats()
    finally:
        gpufile.driver_close()  # the next test opens with defaults (stats off) again
    assert empty["level"] == 3 and empty["devices"] == {}
    for op in ("read", "write"):
        assert sum(empty[op]["latency"]["buckets"]) == 0
        assert empty[op]["latency"]["p50_us"] is None  # no call: no percentile
        assert "remote" in empty[op]["paths"]
    read = st["read"]
    assert read["calls_ok"] == 3
    assert sum(read["latency"]["buckets"]) == 3
    assert sum(sum(p["latency"]["buckets"]) for p in read["paths"].values()) == 3
    lat = read["latency"]
    assert 1 <= lat["p50_us"] <= lat["p90_us"] <= lat["p99_us"] <= lat["p99.9_us"] <= lat["max_us"]
    assert st["devices"]["0"]["read"] == {"calls_ok": 2, "calls_failed": 0, "bytes": 2 * MiB + 4096}
    assert st["devices"]["host"]["read"] == {"calls_ok": 1, "calls_failed": 0, "bytes": 8192}
    assert sum(st["write"]["latency"]["buckets"]) == 0


def test_stats_are_off_by_default(data_file):
    path, _ = data_file(MiB)
    gpufile.driver_close()
    with gpufile.open(path) as f:
        gpufile.stats_reset()
        f.read(bytearray(MiB))
        st = gpufile.stats()
    assert st["level"] == 0
    assert st["read"]["paths"]["page_cache"]["bytes"] + st["read"]["paths"]["small_io"]["bytes"] \
        + st["read"]["paths"]["staged_direct"]["bytes"] + st["read"]["paths"]["host_direct"]["bytes"] \
        == MiB  # bytes per path: always
    assert st["read"]["calls_ok"] == 0 and sum(st["read"]["latency"]["buckets"]) == 0
    assert st["devices"] == {}
    assert st["batch"] == {key: 0 for key in (
        "setup_ok", "setup_failed", "submit_ok", "submit_failed", "entries_submitted",
        "entries_ok", "entries_failed", "cancel_ok", "cancel_failed", "destroy_ok",
        "destroy_failed", "read_bytes", "write_bytes", "submit_latency_avg_us",
        "completion_latency_avg_us")}


TWO_GPUS = r"""
import json, gpufile
gpufile.set_setting("profile.cufile_stats", 3)
with gpufile.open(PATH) as f:
    for device in (0, 1, 1):
        f.read(gpufile.DeviceBuffer(1 << 20, device=device))
print(json.dumps(gpufile.stats()["devices"]))
"""


@pytest.mark.skipif("fakecuda" not in os.environ.get("GPUFILE_CUDA_LIBRARY", ""),
                    reason="two GPUs of the CUDA test double")
def test_stats_count_each_gpu_on_its_own(data_file):
    path, _ = data_file(MiB)
    env = dict(os.environ, FAKECUDA_DEVICES="2")
    out = subprocess.run([sys.executable, "-c", TWO_GPUS.replace("PATH", repr(str(path)))],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    devices = json.loads(out.stdout)
    assert set(devices) == {"0", "1"}, devices
    assert devices["0"]["read"] == {"calls_ok": 1, "calls_failed": 0, "bytes": MiB}
    assert devices["1"]["read"] == {"calls_ok": 2, "calls_failed": 0, "bytes": 2 * MiB}


# A process of a tensor-parallel rank on GPU 1: its framework made GPU 1's primary context (or,
# before that, LOCAL_RANK says which GPU is its own). gpufile's session opens on a thread with no
# context current (Python's threads start without one) and must not create GPU 0's context there:
# that cost rank 1's first load 0.14-0.19 s on two H200 and takes GPU 0's memory.
ONE_RANK = r"""
import ctypes, json, os, gpufile
cuda = ctypes.CDLL(os.environ["GPUFILE_CUDA_LIBRARY"])
def device(ordinal):
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), ordinal) == 0
    return dev
def active(ordinal):
    flags, on = ctypes.c_uint(), ctypes.c_int()
    assert cuda.cuDevicePrimaryCtxGetState(device(ordinal), ctypes.byref(flags), ctypes.byref(on)) == 0
    return bool(on.value)
assert cuda.cuInit(0) == 0
if FRAMEWORK:
    ctx = ctypes.c_void_p()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device(1)) == 0
before = [active(0), active(1)]
with gpufile.open(PATH) as f:
    into = gpufile.DeviceBuffer(1 << 20, device=1) if FRAMEWORK else bytearray(1 << 20)
    assert f.read(into) == 1 << 20
print(json.dumps({"before": before, "after": [active(0), active(1)],
                  "gpu0_retains": cuda.fakecuda_primary_ctx_retains(0)}))
"""


@pytest.mark.skipif("fakecuda" not in os.environ.get("GPUFILE_CUDA_LIBRARY", ""),
                    reason="two GPUs of the CUDA test double, and its context states")
@pytest.mark.parametrize("framework", [True, False], ids=["framework-context", "local-rank"])
def test_a_rank_on_gpu_1_leaves_gpu_0_alone(data_file, framework):
    path, _ = data_file(MiB)
    env = dict(os.environ, FAKECUDA_DEVICES="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    script = ONE_RANK.replace("PATH", repr(str(path))).replace("FRAMEWORK", repr(framework))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    states = json.loads(out.stdout)
    assert states["before"] == [False, framework], states
    assert states["after"] == [False, True], f"GPU 0's primary context was made: {states}"
    # Not even for a moment: a context borrowed and given back still cost its creation.
    assert states["gpu0_retains"] == 0, states


# A program that reads into GPU 1 through a buffer it then drops, and later through another: the
# buffer held GPU 1's only reference to its primary context, so dropping it destroyed the context
# with the streams gpufile keeps there (on a GPU the next read through them may crash; the test
# double stops the process at that use). gpufile now holds the context while its streams live, until the
# driver closes; then nothing of it is left retained.
BUFFER_DROPPED = r"""
import ctypes, json, os, gpufile
cuda = ctypes.CDLL(os.environ["GPUFILE_CUDA_LIBRARY"])
want = open(PATH, "rb").read()
with gpufile.open(PATH) as f:
    for size in (4096, len(want)) * 2:  # the second round uses the streams the first made
        buf = gpufile.DeviceBuffer(size, device=1)
        assert f.read(buf) == size
        got = bytearray(size)
        buf.copy_to_host(got)
        assert got == want[:size], "wrong bytes"
        del buf
gpufile.driver_close()
print(json.dumps({"gpu1_refcount": cuda.fakecuda_primary_ctx_refcount(1)}))
"""


@pytest.mark.skipif("fakecuda" not in os.environ.get("GPUFILE_CUDA_LIBRARY", ""),
                    reason="two GPUs of the CUDA test double, and its context counts")
def test_a_gpu_buffer_dropped_between_reads_leaves_gpufiles_streams_alive(data_file):
    path, _ = data_file(16 * MiB)
    env = dict(os.environ, FAKECUDA_DEVICES="2")
    script = BUFFER_DROPPED.replace("PATH", repr(str(path)))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["gpu1_refcount"] == 0, "a retain of GPU 1 outlived the driver"


def test_latency_percentiles_from_added_histograms():
    # What gpufile.stats() does when the HDF5 plugin's runtime is added in: buckets add up,
    # percentiles are derived again from the sum.
    from gpufile import _add, _derive_latency
    from gpufile._gpufile import _latency_summary
    assert _latency_summary([0] * 32)["p50_us"] is None
    one = {"latency": _latency_summary([0, 0, 9] + [0] * 29)}
    other = {"latency": _latency_summary([0] * 31 + [1])}
    assert one["latency"]["max_us"] == 4 and other["latency"]["p50_us"] == 1 << 30
    _add(one, other)
    _derive_latency(one)
    assert one["latency"]["buckets"] == [0, 0, 9] + [0] * 28 + [1]
    assert one["latency"]["p50_us"] == 4 and one["latency"]["p90_us"] == 4
    assert one["latency"]["p99_us"] == one["latency"]["max_us"] == 1 << 30
    with pytest.raises(ValueError, match="32 buckets"):
        _latency_summary([1, 2])


GIL_PROBE = r"""
import threading, time, numpy as np, gpufile
ticks = 0
stop = False
def count():
    global ticks
    while not stop:
        ticks += 1
        time.sleep(0.0005)
t = threading.Thread(target=count); t.start()
buf = gpufile.DeviceBuffer(64 << 20)
with gpufile.open(PATH) as f:
    time.sleep(0.05)
    before = ticks
    f.read(buf)
    during = ticks - before
stop = True; t.join()
print(during)
"""


@pytest.mark.skipif("fakecuda" not in os.environ.get("GPUFILE_CUDA_LIBRARY", ""),
                    reason="slows the copies down through the test double's delay knob")
def test_io_releases_the_gil(data_file):
    path, _ = data_file(64 * MiB)
    env = dict(os.environ, FAKECUDA_ASYNC_DELAY_US="20000")  # ~16 slow copies: >= 0.3 s of IO
    out = subprocess.run([sys.executable, "-c", GIL_PROBE.replace("PATH", repr(str(path)))],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 10, "another Python thread did not run while a read was in progress"


# ---- frameworks on the GPU machine --------------------------------------------------------------

def _framework_arrays():
    """(name, make(nbytes) -> GPU array, to_numpy) for the GPU frameworks installed here."""
    out = []
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            out.append(("cupy", lambda n: cupy.zeros(n, dtype=cupy.uint8), lambda a: cupy.asnumpy(a)))
    except Exception:  # noqa: BLE001 - absent or without a GPU
        pass
    try:
        import torch
        if torch.cuda.is_available():
            out.append(("torch", lambda n: torch.zeros(n, dtype=torch.uint8, device="cuda"),
                        lambda a: a.cpu().numpy()))
            out.append(("torch-dlpack", lambda n: DLPackOnly(torch.zeros(n, dtype=torch.uint8, device="cuda")),
                        lambda a: a.owner.cpu().numpy()))
    except Exception:  # noqa: BLE001
        pass
    return out


@pytest.mark.parametrize("name,make,to_numpy", _framework_arrays() or
                         [pytest.param(None, None, None, marks=pytest.mark.skip(reason="no GPU framework"))])
def test_framework_arrays(data_file, tmp_path, name, make, to_numpy):
    path, data = data_file(5 * MiB + 7)
    arr = make(data.size)
    with gpufile.open(path) as f:
        assert f.read(arr) == data.size
    assert np.array_equal(to_numpy(arr), data), name
    with gpufile.open(tmp_path / "out.bin", "w") as f:
        assert f.pwrite(arr).result() == data.size
    assert (tmp_path / "out.bin").read_bytes() == data.tobytes()
