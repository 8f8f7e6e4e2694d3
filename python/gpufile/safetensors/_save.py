"""The writer: save_file, the description of a tensor's memory (dtype, shape, pointer, size: of
a tensor to save, or with into=True of one load_into fills), and the layout of the header in the
safetensors package's order, so that both write the same bytes. Every tensor is written from its
memory, GPU memory included, with all writes in flight at once. Imported on first use."""
from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from .. import _dtypes
from .._gpufile import File
from ._header import _ALIGNMENT, PathLike, SafetensorError
from ._memory import _settle_sources
from ._reading import _InFlight


class _Outgoing(NamedTuple):
    dtype: str
    shape: Tuple[int, ...]
    ptr: int
    nbytes: int
    obj: Any


def _describe_tensor(name: str, x: Any, into: bool = False) -> _Outgoing:
    """The memory of a tensor to save, or with ``into=True`` of one to load into (which must be
    writable). Only C-contiguous memory: one tensor is one run of bytes in the file."""
    from .._arrays import DeviceArray
    what = "load into" if into else "save"
    mod = type(x).__module__
    try:
        if mod.startswith("torch"):
            if not x.is_contiguous():
                raise SafetensorError(f"tensor {name!r} is not contiguous: cannot {what} it in place "
                                      "(use a contiguous tensor, or .contiguous() and copy)")
            d = _dtypes.from_torch(x.dtype)
            return _Outgoing(d.name, tuple(x.shape), x.data_ptr(), x.numel() * d.itemsize, x)
        if mod.startswith("numpy"):
            if not x.flags["C_CONTIGUOUS"]:
                raise SafetensorError(f"array {name!r} is not C-contiguous: cannot {what} it in place "
                                      "(use numpy.ascontiguousarray)")
            if into and not x.flags["WRITEABLE"]:
                raise SafetensorError(f"array {name!r} is read-only")
            d = _dtypes.from_numpy(x.dtype)
            return _Outgoing(d.name, tuple(x.shape), x.ctypes.data, x.nbytes, x)
    except ValueError as e:  # a dtype safetensors has no name for
        if isinstance(e, SafetensorError):
            raise
        raise SafetensorError(f"tensor {name!r}: {e}") from None
    if isinstance(x, DeviceArray):
        return _Outgoing(x.dtype, x.shape, x.ptr, x.nbytes, x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if into and isinstance(cai, dict):  # CuPy, Numba, ...
        return _describe_cuda_array(name, x, cai)
    kinds = "torch tensors, NumPy or CuPy arrays" if into else "torch tensors, NumPy arrays"
    raise SafetensorError(f"tensor {name!r}: cannot {what} a {type(x).__name__}; pass {kinds} "
                          "or gpufile.DeviceArray")


def _describe_cuda_array(name: str, x: Any, cai: Mapping[str, Any]) -> _Outgoing:
    d = next((r for r in _dtypes.BY_NAME.values() if r.typestr == cai.get("typestr")), None)
    if d is None:
        raise SafetensorError(f"tensor {name!r}: element type {cai.get('typestr')!r} has no safetensors equivalent")
    shape = tuple(int(n) for n in cai["shape"])
    ptr, readonly = cai["data"]
    if readonly:
        raise SafetensorError(f"array {name!r} is read-only")
    strides = cai.get("strides")
    if strides is not None:
        expect, want = d.itemsize, []
        for n in reversed(shape):
            want.append(expect)
            expect *= n
        if any(n > 1 and s != w for n, s, w in zip(shape, strides, reversed(want))):
            raise SafetensorError(f"array {name!r} is not C-contiguous: cannot load into it in place")
    count = 1
    for n in shape:
        count *= n
    return _Outgoing(d.name, shape, int(ptr or 0), count * d.itemsize, x)


def _layout(entries: Mapping[str, _Outgoing], metadata: Optional[Mapping[str, str]]) -> Tuple[bytes, List[Tuple[str, int]]]:
    """The header bytes and each tensor's data offset, in the safetensors package's order
    (larger dtypes first, then by name), so that both write the same bytes."""
    rank = {name: i for i, name in enumerate(_dtypes.BY_NAME)}
    order = sorted(entries, key=lambda n: (-rank[entries[n].dtype], n))
    header: Dict[str, Any] = {}
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    at, offsets = 0, []
    for n in order:
        e = entries[n]
        header[n] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [at, at + e.nbytes]}
        offsets.append((n, at))
        at += e.nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % _ALIGNMENT)
    return struct.pack("<Q", len(raw)) + raw, offsets


def save_file(tensors: Mapping[str, Any], filename: PathLike,
              metadata: Optional[Mapping[str, str]] = None, *, fsync: bool = False) -> None:
    """Writes tensors (torch on any device, NumPy, gpufile.DeviceArray) as a safetensors file.

    GPU tensors are written from GPU memory through gpufile's pipelined write path, without a
    copy to a host tensor first. With ``fsync=True`` the data is on storage when this returns.
    """
    if not isinstance(tensors, Mapping):
        raise SafetensorError("tensors must be a mapping of name -> tensor")
    entries = {}
    for name, x in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise SafetensorError(f"invalid tensor name {name!r}")
        entries[name] = _describe_tensor(name, x)
    head, offsets = _layout(entries, metadata)
    _settle_sources(tensors.values())
    with File(os.fspath(filename), "w") as f:
        writes = _InFlight()
        try:
            writes.add(f.pwrite(head), len(head), "header")
            for name, at in offsets:
                e = entries[name]
                if e.nbytes:
                    writes.add(f.pwrite_ptr(e.ptr, e.nbytes, len(head) + at), e.nbytes, name)
        finally:
            writes.wait()
        if fsync:
            os.fsync(f.fileno())
