"""A stand-in for the few CuPy calls the benchmarks make, over gpufile.DeviceBuffer, so a
benchmark harness runs end to end on a machine without a GPU (against the CUDA driver test
double: GPUFILE_CUDA_LIBRARY=<build>/tests/support/fakecuda/libcuda.so.1) before it goes to the
GPU machine:

    PYTHONPATH=bench/standin python3 bench/hdf5_gpu.py ... --no-cold

Its timings mean nothing: the double keeps "device memory" in host memory and copies with
memcpy. Arrays are C-contiguous; comparisons copy both sides to the host.
"""
import types

import numpy as np

import gpufile

uint8 = np.uint8
uint32 = np.uint32


class _Memory:
    def __init__(self, ptr):
        self.ptr = ptr


class ndarray:  # noqa: N801 (CuPy's name)
    def __init__(self, shape, dtype, buffer=None):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.buffer = buffer if buffer is not None else gpufile.DeviceBuffer(self.nbytes)
        self.data = _Memory(self.buffer.ptr)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.buffer.ptr, False),
                "strides": None, "version": 3, "stream": None}

    def fill(self, value):
        if self.nbytes:
            host = np.full(self.shape, value, self.dtype)
            self.buffer.copy_from_host(host.reshape(-1).view(np.uint8))

    def set(self, host):
        """Copies a host array of the same size in (CuPy's ndarray.set)."""
        host = np.ascontiguousarray(host, dtype=self.dtype)
        if host.nbytes != self.nbytes:
            raise ValueError(f"set: {host.nbytes} bytes into an array of {self.nbytes}")
        if self.nbytes:
            self.buffer.copy_from_host(host.reshape(-1).view(np.uint8))

    def reshape(self, *shape):
        """A view of the same memory with another shape (-1 allowed once)."""
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return ndarray(_resolved(shape, self.nbytes // self.dtype.itemsize), self.dtype,
                       self.buffer)


def _resolved(shape, count):
    shape = list(shape)
    if -1 in shape:
        known = int(np.prod([n for n in shape if n != -1]))
        shape[shape.index(-1)] = count // known
    return tuple(shape)


def empty(shape, dtype=np.float64):
    return ndarray(shape, dtype)


def asarray(host):
    host = np.ascontiguousarray(host)
    out = ndarray(host.shape, host.dtype)
    if host.nbytes:
        out.buffer.copy_from_host(host.reshape(-1).view(np.uint8))
    return out


def arange(n, dtype=np.int64):
    return asarray(np.arange(n, dtype=dtype))


def asnumpy(a):
    host = np.empty(a.shape, dtype=a.dtype)
    if a.nbytes:
        a.buffer.copy_to_host(host.reshape(-1).view(np.uint8))
    return host


def array_equal(a, b):
    return bool(np.array_equal(asnumpy(a), asnumpy(b)))


cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None))
