"""How File.read / File.write resolve memory given through __cuda_array_interface__: the forms
the fast path takes, the ones it hands to the general path (same answers and errors as before),
and the producer's stream being waited for."""
import ctypes
import os
import threading

import numpy as np
import pytest

import gpufile
from conftest import DLPackOnly, device_bytes, needs_gpu_driver

FAKE = os.environ.get("GPUFILE_CUDA_LIBRARY", "")
needs_fake = pytest.mark.skipif("fakecuda" not in FAKE or not gpufile.cuda_available(),
                                reason="drives the CUDA driver test double directly")


class Cai:
    """Exports (part of) a DeviceBuffer through __cuda_array_interface__ alone; `fields`
    replace or (as None values of `drop`) remove entries. Counts how often it is asked."""

    def __init__(self, owner, offset=0, drop=(), **fields):
        self.owner, self.offset, self.drop, self.fields = owner, offset, drop, fields
        self.asked = 0

    @property
    def __cuda_array_interface__(self):
        self.asked += 1
        d = {"shape": (self.owner.nbytes - self.offset,), "typestr": "|u1",
             "data": (self.owner.ptr + self.offset, False), "strides": None, "version": 3,
             "stream": None}
        d.update(self.fields)
        for k in self.drop:
            del d[k]
        return d


@needs_gpu_driver
@pytest.mark.parametrize("form", [
    {},
    {"drop": ("stream", "strides"), "version": 2},
    {"strides": (1,)},
    {"shape": (64, 64), "strides": (64, 1)},
    {"shape": (64, 64), "strides": None},
    {"shape": (1024,), "typestr": "<f4", "strides": (4,)},
    {"shape": (1, 4096), "strides": (7, 1)},     # a dimension of 1 may have any stride
    {"typestr": "<u01"},                         # zero-padded size: the general path parses it
])
def test_cai_forms_read_the_same_bytes(data_file, form):
    path, data = data_file(4096)
    buf = gpufile.DeviceBuffer(4096)
    with gpufile.open(path) as f:
        assert f.read(Cai(buf, **form)) == 4096
    assert np.array_equal(device_bytes(buf), data)


@needs_gpu_driver
def test_cai_refusals_keep_their_messages(data_file):
    path, _ = data_file(4096)
    buf = gpufile.DeviceBuffer(4096)
    with gpufile.open(path, "r+") as f:
        with pytest.raises(ValueError, match="C-contiguous"):
            f.read(Cai(buf, shape=(32, 64), strides=(128, 1)))
        with pytest.raises(ValueError, match="read-only"):
            f.read(Cai(buf, data=(buf.ptr, True)))
        assert f.write(Cai(buf, data=(buf.ptr, True))) == 4096  # a write may read it
        with pytest.raises(ValueError, match="bad typestr"):
            f.read(Cai(buf, typestr="|u"))
        with pytest.raises(ValueError, match="negative dimension"):
            f.read(Cai(buf, shape=(-1,)))
        with pytest.raises(ValueError, match="differ in length"):
            f.read(Cai(buf, shape=(64, 64), strides=(1,)))
        with pytest.raises(ValueError, match="does not fit"):
            f.read(Cai(buf, offset=100), size=4096)


def test_cai_is_read_once_and_a_failing_one_counts_as_absent(data_file):
    path, data = data_file(4096)

    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("not today")

    with gpufile.open(path) as f:
        with pytest.raises(TypeError, match="neither"):  # as hasattr() said before
            f.read(Broken())
        if gpufile.cuda_available():
            c = Cai(gpufile.DeviceBuffer(4096))
            assert f.read(c) == 4096
            assert c.asked == 1  # not once to test for it and once to use it


@needs_gpu_driver
def test_device_buffer_subclass_uses_its_own_interface(data_file):
    path, data = data_file(4096)

    class Shifted(gpufile.DeviceBuffer):
        @property
        def __cuda_array_interface__(self):
            return {"shape": (self.nbytes - 16,), "typestr": "|u1", "data": (self.ptr + 16, False),
                    "version": 3}

    buf = Shifted(4096)
    with gpufile.open(path) as f:
        assert f.read(buf) == 4096 - 16
        assert f.read(gpufile.DeviceBuffer(4096)) == 4096  # the exact type: its own memory
    assert np.array_equal(device_bytes(buf)[16:], data[:4096 - 16])


# ---- the producer's stream ----------------------------------------------------------------------

class FakeCuda:
    """The test double's driver entry points, with the device's primary context made current
    on this thread (what a framework does before it queues work)."""

    def __init__(self):
        self.lib = ctypes.CDLL(FAKE)
        # Opening the driver may make a context current on this thread, which later tests use:
        # open it first, so that close() puts back the context it set.
        if not gpufile.driver_is_open():
            gpufile.driver_open()
        self.ctx, self.was_current = ctypes.c_void_p(), ctypes.c_void_p()
        self.streams = []
        assert self.lib.cuCtxGetCurrent(ctypes.byref(self.was_current)) == 0
        assert self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), 0) == 0
        assert self.lib.cuCtxSetCurrent(self.ctx) == 0

    def close(self):  # leaves the thread and the driver as the other tests expect them
        self.lib.fakecuda_set_async_delay_us(0)
        for s in self.streams:
            self.synchronize(s)
            self.lib.cuStreamDestroy_v2(ctypes.c_void_p(s))
        self.lib.cuCtxSetCurrent(self.was_current)
        self.lib.cuDevicePrimaryCtxRelease_v2(0)

    def calls(self, name):
        self.lib.fakecuda_call_count.restype = ctypes.c_ulonglong
        return self.lib.fakecuda_call_count(name.encode())

    def new_stream(self):
        s = ctypes.c_void_p()
        assert self.lib.cuStreamCreate(ctypes.byref(s), 0) == 0
        self.streams.append(s.value)
        return s.value

    def memset_async(self, ptr, value, n, stream):
        self.lib.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t,
                                             ctypes.c_void_p]
        assert self.lib.cuMemsetD8Async(ptr, value, n, stream) == 0

    def synchronize(self, stream):
        assert self.lib.cuStreamSynchronize(ctypes.c_void_p(stream)) == 0

    def current(self):
        """The context current on the calling thread (None: none)."""
        ctx = ctypes.c_void_p()
        assert self.lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
        return ctx.value


@pytest.fixture
def fake():
    f = FakeCuda()
    yield f
    f.close()


@needs_fake
@pytest.mark.parametrize("which", ["legacy", "created"])
def test_cai_stream_work_is_waited_for(tmp_path, fake, which):
    """A pwrite (no ordering of its own) of memory whose producer still has a slow memset
    queued on the stream its interface names writes the memset's bytes."""
    n = 64 * 1024
    buf = gpufile.DeviceBuffer(n)
    stream = 1 if which == "legacy" else fake.new_stream()
    fake.lib.fakecuda_set_async_delay_us(200_000)
    fake.memset_async(buf.ptr, 0xAB, n, stream)
    with gpufile.open(tmp_path / "out.bin", "w") as f:
        assert f.pwrite(Cai(buf, stream=stream)).result() == n
    assert (tmp_path / "out.bin").read_bytes() == b"\xab" * n


@needs_fake
def test_an_idle_stream_is_only_queried(data_file, fake):
    """An idle stream other than the legacy one needs no cuStreamSynchronize; the legacy stream
    is still synchronized (it may also wait for blocking streams' work)."""
    path, data = data_file(4096)
    buf = gpufile.DeviceBuffer(4096)
    stream = fake.new_stream()
    fake.memset_async(buf.ptr, 1, 4096, stream)
    fake.synchronize(stream)

    def syncs_of_a_read(f, stream):  # the IO's own synchronizations included
        before = fake.calls("cuStreamSynchronize")
        assert f.read(Cai(buf, stream=stream)) == 4096
        return fake.calls("cuStreamSynchronize") - before

    with gpufile.open(path) as f:
        own = syncs_of_a_read(f, None)
        assert syncs_of_a_read(f, stream) == own
        assert syncs_of_a_read(f, 1) == own + 1
    assert np.array_equal(device_bytes(buf), data)


# ---- threads without a CUDA context -------------------------------------------------------------
# Python starts threads with no CUDA context current; CuPy and the CUDA runtime make theirs current
# only at their first call on the thread. The default streams belong to the current context, and
# the driver refuses them without one (CUDA_ERROR_INVALID_CONTEXT, which tests/soak/soak.py hit on
# an H100 with CuPy arrays: their interface names stream 1).

def on_a_new_thread(fake, fn):
    """fn()'s result, run on a new thread; checks the thread had no context current before the
    call, and has none after it (gpufile puts back what it found)."""
    out = {}

    def run():
        try:
            out["before"] = fake.current()
            out["result"] = fn()
            out["after"] = fake.current()
        except BaseException as e:  # re-raised on the test's thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    assert out["before"] is None and out["after"] is None
    return out["result"]


@needs_fake
def test_legacy_stream_work_is_waited_for_on_a_thread_without_context(tmp_path, fake):
    """The producer's slow memset on the legacy stream, then a pwrite of that memory from a
    thread without a context: waited for in the memory's context, the memset's bytes written."""
    n = 64 * 1024
    buf = gpufile.DeviceBuffer(n)
    fake.lib.fakecuda_set_async_delay_us(200_000)
    fake.memset_async(buf.ptr, 0xAB, n, 1)
    with gpufile.open(tmp_path / "out.bin", "w") as f:
        assert on_a_new_thread(fake, lambda: f.pwrite(Cai(buf, stream=1)).result()) == n
    assert (tmp_path / "out.bin").read_bytes() == b"\xab" * n


@needs_fake
@pytest.mark.parametrize("export", [
    lambda buf: Cai(buf, stream=1),
    lambda buf: Cai(buf, stream=2),                    # the per-thread default stream
    lambda buf: Cai(buf, stream=1, typestr="<u01"),    # the general path
    DLPackOnly,
], ids=["cai-legacy", "cai-per-thread", "cai-general-path", "dlpack"])
def test_read_on_a_thread_without_context(data_file, fake, export):
    path, data = data_file(4096)
    buf = gpufile.DeviceBuffer(4096)
    with gpufile.open(path) as f:
        assert on_a_new_thread(fake, lambda: f.read(export(buf))) == 4096
    assert np.array_equal(device_bytes(buf), data)


@needs_fake
@pytest.mark.parametrize("memory", ["device", "host"])
def test_stream_io_on_a_thread_without_context(tmp_path, data_file, fake, memory):
    """read_async / write_async on the legacy stream and on a created one, from a thread that
    has no context: queued in the memory's context (device 0's for host memory)."""
    path, data = data_file(8192)
    buf = gpufile.DeviceBuffer(4096) if memory == "device" else np.zeros(4096, np.uint8)
    stream = fake.new_stream()

    def stream_io():
        with gpufile.open(path) as f:
            assert f.read_async(buf, 0, file_offset=4096).result() == 4096
            assert f.read_async(buf, stream, size=1024).result() == 1024
        with gpufile.open(tmp_path / "out.bin", "w") as f:
            return f.write_async(buf, stream).result()

    assert on_a_new_thread(fake, stream_io) == 4096
    expected = np.concatenate([data[:1024], data[4096 + 1024:]])
    assert (tmp_path / "out.bin").read_bytes() == expected.tobytes()


@needs_fake
def test_a_stream_op_that_fails_when_the_stream_gets_there_raises_from_result(data_file, fake):
    """The op's own failure comes whole from result(): here its file was closed while the op
    waited behind the double's 200 ms copy into its staging (room for a slow close)."""
    path, _ = data_file(8192)
    buf = gpufile.DeviceBuffer(8192)
    stream = fake.new_stream()
    fake.lib.fakecuda_set_async_delay_us(200000)
    f = gpufile.open(path)
    sf = f.read_async(buf, stream)
    assert not sf.done(), "the stream passed the op at once: nothing would be tested"
    f.close()
    with pytest.raises(gpufile.Error, match="not registered"):
        sf.result()
    assert sf.done()


# ---- the session's staging ------------------------------------------------------------------------

@needs_fake
def test_an_open_whose_staging_cannot_be_pinned_fails_and_keeps_nothing():
    """The workers' staging is pinned in one registration at open (cuda::alloc_pinned_many): when
    the driver refuses it, the open fails with the driver's error, no pinned memory stays behind,
    and the next open works."""
    lib = ctypes.CDLL(FAKE)
    gpufile.driver_close()
    assert gpufile.stats()["pinned_staging_bytes"] == 0
    assert lib.fakecuda_fail_call(b"cuMemHostRegister_v2", 1, 2) == 0  # CUDA_ERROR_OUT_OF_MEMORY
    try:
        with pytest.raises(gpufile.Error):
            gpufile.driver_open()
        assert not gpufile.driver_is_open()
        assert gpufile.stats()["pinned_staging_bytes"] == 0
    finally:
        lib.fakecuda_reset_faults()
    gpufile.driver_open()
    assert gpufile.stats()["pinned_staging_bytes"] > 0
    gpufile.driver_close()
