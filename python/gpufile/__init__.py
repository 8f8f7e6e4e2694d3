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
)
from ._gpufile import stats as _runtime_stats
from ._gpufile import stats_reset as _runtime_stats_reset
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


def stats() -> dict:
    """Per-operation calls, bytes and bytes per data path, the stats level and the pinned
    staging held now, for this process: gpufile's runtime, plus, when the HDF5 plugin is loaded
    here, its own copy of the runtime (added in; its driver's counters under "hdf5_driver",
    see gpufile.hdf5.counters)."""
    out = _runtime_stats()
    from . import hdf5
    plugin = hdf5.runtime_stats()
    if plugin is not None:
        for op in ("read", "write"):
            _add(out[op], plugin[op])
        out["pinned_staging_bytes"] += plugin["pinned_staging_bytes"]
        out["hdf5_driver"] = hdf5.counters()
    return out


def stats_reset() -> None:
    """Zeroes the counters of stats() (the HDF5 driver's own counters excepted)."""
    _runtime_stats_reset()
    from . import hdf5
    hdf5.reset_runtime_stats()


def _add(into: dict, more: dict) -> None:
    for key, value in more.items():
        if isinstance(value, dict):
            _add(into[key], value)
        else:
            into[key] += value
