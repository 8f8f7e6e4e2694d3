"""gpufile: files to GPU memory and back by the shortest path the machine offers.

    import gpufile
    with gpufile.open("/data/x.bin") as f:
        n = f.read(tensor)                 # any GPU or host buffer: CuPy, PyTorch, NumPy, ...
        fut = f.pread(other, file_offset=1 << 20)
        fut.result()

Checkpoints: ``gpufile.safetensors.load_file(path, device="cuda:0")``.
"""
from __future__ import annotations

import os

from ._gpufile import (
    DeviceBuffer,
    Error,
    File,
    Future,
    RemoteFile,
    RemoteWriter,
    StreamFuture,
    cuda_available,
    cuda_unavailable_reason,
    device_count,
    driver_close,
    driver_is_open,
    driver_open,
    engine,
    set_setting,
    settings,
    stats,
    stats_reset,
)
from ._arrays import DeviceArray

__version__ = "0.1.0"

__all__ = [
    "DeviceArray", "DeviceBuffer", "Error", "File", "Future", "RemoteFile", "RemoteWriter", "StreamFuture", "cuda_available",
    "cuda_unavailable_reason", "device_count", "driver_close", "driver_is_open", "driver_open",
    "engine", "open", "set_setting", "settings", "stats", "stats_reset",
]


_REMOTE_SCHEMES = ("http://", "https://", "s3://")


def open(path: "str | os.PathLike[str]", mode: str = "r") -> "File | RemoteFile | RemoteWriter":  # noqa: A001 (mirrors builtins.open)
    """Opens and registers a file for IO to and from GPU or host memory.

    Modes as Python's: "r", "r+", "w", "w+", "x", "x+"; "a"/"a+" create the file if missing and
    keep its contents (writes go to the offsets given: cuFile has no appending mode).

    An ``http://``, ``https://`` or ``s3://`` URL opens a remote object instead: mode "r" gives
    a RemoteFile with the same read, pread and size; mode "w" on ``s3://`` a RemoteWriter that
    writes a new object front to back, made when it is closed (docs/remote.md).
    """
    if isinstance(path, str) and path[:8].lower().startswith(_REMOTE_SCHEMES):
        if mode in ("r", "rb"):
            return RemoteFile(path)
        if mode in ("w", "wb") and path[:5].lower() == "s3://":
            return RemoteWriter(path)
        raise ValueError(f"mode {mode!r} for {path}: remote objects open with 'r', and s3:// "
                         "objects also with 'w' (http(s):// objects are read-only)")
    return File(os.fspath(path), mode)
