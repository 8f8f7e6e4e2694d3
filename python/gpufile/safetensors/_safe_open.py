"""safe_open, the safetensors package's lazy access: one file kept open, its header read once,
each tensor read when asked for, and get_slice reading only the part indexed. Imported on first
use of safe_open: a process that only loads never pays for it."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple, Union

from .._gpufile import File, RemoteFile
from ._checkpoint import _remote_source
from ._header import PathLike, SafetensorError, TensorInfo, _is_url, read_header
from ._memory import _allocate, _device_number, _settle_allocations, _target
from ._plan import _box_plan, _normalize_index
from ._reading import _read_from


class _Slice:
    """A tensor of an open file, read only in the part that is indexed."""

    def __init__(self, owner: "safe_open", info: TensorInfo):
        self._owner, self._info = owner, info

    def get_shape(self) -> List[int]:
        return list(self._info.shape)

    def get_dtype(self) -> str:
        return self._info.dtype

    def __getitem__(self, key: Any) -> Any:
        box, shape = _normalize_index(key, self._info.shape)
        return self._owner._read_box(self._info, box, shape)


class safe_open:
    """Lazy access to one safetensors file, as the safetensors package's safe_open:

        with safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
            for name in f.keys():
                t = f.get_tensor(name)
            rows = f.get_slice("embed.weight")[1000:2000]   # reads just those rows
    """

    def __init__(self, filename: PathLike, framework: str = "pt", device: Any = "cpu"):
        self._path = os.fspath(filename)
        self._target = _target(framework, device)
        self._file: Optional[Union[File, RemoteFile]] = None
        if _is_url(self._path):  # the header and every slice read of the version opened here
            src = _remote_source(self._path, RemoteFile(self._path), None)
            self._header, self._file = src.header, src.remote
        else:
            self._header = read_header(self._path)
            self._file = File(self._path, "r")

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def keys(self) -> List[str]:
        return list(self._header.tensors)

    def offset_keys(self) -> List[str]:
        return self.keys()

    def metadata(self) -> Optional[Dict[str, str]]:
        return None if self._header.metadata is None else dict(self._header.metadata)

    def _info(self, name: str) -> TensorInfo:
        info = self._header.tensors.get(name)
        if info is None:
            raise SafetensorError(f"no tensor named {name!r} in {self._path}")
        return info

    def get_tensor(self, name: str) -> Any:
        info = self._info(name)
        return self._read_box(info, [(0, n) for n in info.shape], info.shape)

    def get_slice(self, name: str) -> _Slice:
        return _Slice(self, self._info(name))

    def _read_box(self, info: TensorInfo, box: List[Tuple[int, int]], shape: Tuple[int, ...]) -> Any:
        if self._file is None:
            raise SafetensorError("the file is closed")
        dest = _allocate(self._target, info.dtype, shape)
        _settle_allocations(self._target)
        ios, scatters = _box_plan(dest.ptr, _device_number(self._target), info, box,
                                  self._header.data_start, info.name)
        _read_from([(self._file, ios, scatters)])
        return dest.obj
