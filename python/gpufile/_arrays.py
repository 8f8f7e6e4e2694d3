"""gpufile.DeviceArray: a typed view of GPU memory owned by a gpufile.DeviceBuffer."""
from __future__ import annotations

from typing import Tuple

from . import _dtypes
from ._gpufile import DeviceBuffer

_DLPACK_CUDA = 2


class DeviceArray:
    """A C-contiguous array in GPU memory that any framework can take without a copy.

    ``torch.from_dlpack(a)``, ``cupy.from_dlpack(a)`` and ``jax.dlpack.from_dlpack(a)`` share its
    memory; the buffer stays allocated while any of them holds it. ``dtype`` is a safetensors dtype
    name ("BF16", "F32", ...).
    """

    __slots__ = ("buffer", "offset", "shape", "dtype")

    def __init__(self, buffer: DeviceBuffer, offset: int, shape: Tuple[int, ...], dtype: str):
        if dtype not in _dtypes.BY_NAME:
            raise ValueError(f"unknown dtype {dtype!r}")
        self.buffer = buffer
        self.offset = int(offset)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype
        if self.offset < 0 or self.offset + self.nbytes > buffer.nbytes:
            raise ValueError("the array does not fit its buffer")

    @classmethod
    def empty(cls, shape, dtype: str, device: int = 0) -> "DeviceArray":
        """A new array with its own buffer (contents undefined)."""
        itemsize = _dtypes.BY_NAME[dtype].itemsize
        count = 1
        for n in shape:
            count *= int(n)
        return cls(DeviceBuffer(count * itemsize, device), 0, tuple(shape), dtype)

    @property
    def nbytes(self) -> int:
        count = 1
        for n in self.shape:
            count *= n
        return count * _dtypes.BY_NAME[self.dtype].itemsize

    @property
    def ptr(self) -> int:
        return self.buffer.ptr + self.offset

    @property
    def device(self) -> int:
        return self.buffer.device

    def __dlpack_device__(self):
        return (_DLPACK_CUDA, self.buffer.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        # gpufile's reads finished before they returned: no stream has pending work on this memory.
        if copy:
            raise BufferError("gpufile.DeviceArray exports its memory without copying")
        d = _dtypes.BY_NAME[self.dtype]
        return self.buffer._dlpack_view(self.offset, self.shape, d.dlpack_code, d.itemsize * 8)

    @property
    def __cuda_array_interface__(self):
        d = _dtypes.BY_NAME[self.dtype]
        if d.typestr is None:
            raise AttributeError(f"{self.dtype} has no CUDA array interface type; use DLPack")
        return {"shape": self.shape, "typestr": d.typestr, "data": (self.ptr, False),
                "strides": None, "version": 3, "stream": None}

    def to_bytes(self) -> bytes:
        """The array's bytes, copied to host memory."""
        out = bytearray(self.nbytes)
        self.buffer.copy_to_host(out, self.offset)
        return bytes(out)

    def __repr__(self) -> str:
        return f"gpufile.DeviceArray(shape={self.shape}, dtype={self.dtype}, device=cuda:{self.device})"
