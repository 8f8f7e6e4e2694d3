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
    __version__,
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
from ._gpufile import _redact_url
from ._gpufile import _latency_summary

__all__ = [
    "DeviceArray", "DeviceBuffer", "Error", "File", "Future", "RemoteFile", "RemoteWriter", "StreamFuture", "cuda_available",
    "cuda_unavailable_reason", "device_count", "driver_close", "driver_is_open", "driver_open",
    "engine", "open", "set_setting", "settings", "stats", "stats_reset",
]


_REMOTE_SCHEMES = ("http://", "https://", "s3://")

# What `import gpufile` does is what every process that loads a checkpoint pays (docs/python.md,
# "Import cost"): the extension module, nothing else. The names that need more Python code are
# imported on first use.
_LAZY = {"DeviceArray": "._arrays"}


def _import_lazy(namespace: dict, lazy: dict, name: str):
    """A package's __getattr__ (PEP 562) for names imported on first lookup: `lazy` maps each
    to its module, relative to the package whose globals() are `namespace`. Shared with
    gpufile.safetensors."""
    package = namespace["__name__"]
    if name in lazy:
        import importlib
        value = getattr(importlib.import_module(lazy[name], package), name)
        namespace[name] = value  # the next lookup finds it without coming here
        return value
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


def __getattr__(name: str):
    return _import_lazy(globals(), _LAZY, name)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


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
        raise ValueError(f"mode {mode!r} for {_redact_url(path)}: remote objects open with "
                         "'r', and s3:// objects also with 'w' (http(s):// objects are read-only)")
    return File(os.fspath(path), mode)


def stats() -> dict:
    """This process's IO counters, for gpufile's runtime, plus, when the HDF5 plugin is loaded
    here, its own copy of the runtime (added in; its driver's counters under "hdf5_driver",
    see gpufile.hdf5.counters). Per operation ("read", "write"): calls, bytes, a latency
    histogram with percentiles ("latency") and per data path ("paths") bytes, pieces and
    latency; "batch": the cuFile batch API's counters; "devices": calls and bytes per GPU
    ordinal ("0", "1", ...), "host" memory and "other_gpus" (ordinals past 31); then the stats
    level and the pinned staging held now.
    Bytes per path are always counted; calls from stats level 1, latency histograms from 2,
    devices from 3 (docs/python.md, "Statistics")."""
    out = _runtime_stats()
    from . import hdf5
    plugin = hdf5.runtime_stats()
    if plugin is not None:
        for key in ("read", "write", "devices"):
            _add(out[key], plugin[key])
        out["pinned_staging_bytes"] += plugin["pinned_staging_bytes"]
        _derive_latency(out)
        out["hdf5_driver"] = hdf5.counters()
    return out


def stats_reset() -> None:
    """Zeroes the counters of stats() (the HDF5 driver's own counters excepted)."""
    _runtime_stats_reset()
    from . import hdf5
    hdf5.reset_runtime_stats()


def _add(into: dict, more: dict) -> None:
    """Adds counters of `more` into `into`: nested dicts key by key (a key only `more` has is
    copied), histograms bucket by bucket. Percentiles ("..._us") cannot be added: they are
    derived again afterwards (_derive_latency)."""
    for key, value in more.items():
        if key not in into:
            into[key] = value
        elif isinstance(value, dict):
            _add(into[key], value)
        elif isinstance(value, list):
            into[key] = [a + b for a, b in zip(into[key], value)]
        elif not key.endswith("_us"):
            into[key] += value


def _derive_latency(d: dict) -> None:
    """Every "latency" histogram in `d` gets its percentiles again from its buckets."""
    for key, value in d.items():
        if key == "latency":
            d[key] = _latency_summary(value["buckets"])
        elif isinstance(value, dict):
            _derive_latency(value)
