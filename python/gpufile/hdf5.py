"""gpufile's HDF5 virtual file driver, "gpufile", from Python (docs/hdf5.md).

The driver is an HDF5 plugin shipped inside this package. HDF5 (h5py's own copy included) picks
it up from the environment when the library starts, so set the variables before h5py is
imported, or in a child process::

    import os, subprocess, sys, gpufile.hdf5
    env = dict(os.environ, **gpufile.hdf5.environment("workers=8;block_size=4M"))
    subprocess.run([sys.executable, "my_h5py_script.py"], env=env)

Or, in this process, through h5py's driver registry (no environment needed)::

    import h5py, gpufile.hdf5
    gpufile.hdf5.register_h5py()
    with h5py.File("data.h5", "w", driver="gpufile", config="workers=8") as f:
        ...

A C program links the same library and calls ``H5Pset_fapl_gpufile`` (include/gpufile/hdf5.h).
"""
from __future__ import annotations

import ctypes
import os
from typing import Dict, Optional

__all__ = ["DRIVER_NAME", "LIBRARY_NAME", "counters", "environment", "plugin_file", "plugin_path",
           "read", "register_h5py", "set_fapl"]

DRIVER_NAME = "gpufile"
LIBRARY_NAME = "libgpufile_hdf5.so"

_HERE = os.path.dirname(os.path.abspath(__file__))
# Where the plugin is: installed by `pip install .`, or a CMake build tree whose python/ folder
# is on PYTHONPATH (<build>/python/gpufile next to <build>/hdf5/plugins).
_CANDIDATES = (os.path.join(_HERE, "hdf5_plugins"),
               os.path.join(_HERE, os.pardir, os.pardir, "hdf5", "plugins"))


def plugin_path() -> str:
    """The directory that holds the plugin: the value for HDF5_PLUGIN_PATH.

    It holds the plugin alone (HDF5 tries to load every library in a plugin directory).
    """
    for d in _CANDIDATES:
        if os.path.isfile(os.path.join(d, LIBRARY_NAME)):
            return os.path.normpath(d)
    raise FileNotFoundError(f"the gpufile HDF5 plugin ({LIBRARY_NAME}) is not installed next to "
                            f"{_HERE}: reinstall gpufile with `pip install .`")


def plugin_file() -> str:
    """The plugin library itself (for linking, or ctypes)."""
    return os.path.join(plugin_path(), LIBRARY_NAME)


def environment(config: Optional[str] = None) -> Dict[str, str]:
    """The variables that make HDF5 use the driver for every file it opens by default.

    ``config`` is the driver's configuration string ("workers=8;block_size=4M", see
    docs/hdf5.md); HDF5 hands it over through HDF5_DRIVER_CONFIG.
    """
    env = {"HDF5_PLUGIN_PATH": plugin_path(), "HDF5_DRIVER": DRIVER_NAME}
    if config:
        env["HDF5_DRIVER_CONFIG"] = config
    return env


def _plugin() -> ctypes.CDLL:
    lib = ctypes.CDLL(plugin_file())
    lib.H5Pset_fapl_gpufile.restype = ctypes.c_int
    lib.H5Pset_fapl_gpufile.argtypes = [ctypes.c_int64, ctypes.c_char_p]
    return lib


def set_fapl(plist, config: Optional[str] = None) -> None:
    """Makes an h5py file access property list (h5py.h5p.PropFAID) use the gpufile driver.

    This is the hook ``register_h5py`` gives h5py; ``config`` is the configuration string. The
    plugin finds h5py's libhdf5 among the loaded libraries and registers the driver with it.
    """
    if _plugin().H5Pset_fapl_gpufile(plist.id, config.encode() if config else None) < 0:
        raise OSError("H5Pset_fapl_gpufile failed: the gpufile driver needs HDF5 1.14 or later "
                      "(gpufile's log says more; GPUFILE_LOG_LEVEL=INFO)")


def register_h5py() -> None:
    """Lets h5py open files through the driver: ``h5py.File(path, mode, driver="gpufile",
    config="workers=8")``. Safe to call again."""
    import h5py  # type: ignore[import-untyped]  # h5py ships no type information
    h5py.register_driver(DRIVER_NAME, set_fapl)


_COUNTERS = ("files_opened", "reads", "writes", "bytes_read", "bytes_written",
             "device_bytes_read", "device_bytes_written")


class _Counters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in _COUNTERS]


def _loaded_plugin() -> Optional[ctypes.CDLL]:
    """The plugin if this process has loaded it already (HDF5 through HDF5_PLUGIN_PATH, or
    register_h5py/counters), else None; never loads it."""
    try:
        path = plugin_file()
    except FileNotFoundError:
        return None
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return None


def runtime_stats() -> Optional[Dict]:
    """The statistics of the plugin's own copy of gpufile's runtime, shaped as gpufile.stats()'s
    (gpufile_hdf5_get_stats_json); None when the plugin is not loaded in this process.
    gpufile.stats() adds them to the extension's."""
    lib = _loaded_plugin()
    if lib is None:
        return None
    lib.gpufile_hdf5_get_stats_json.restype = ctypes.c_size_t
    lib.gpufile_hdf5_get_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    size = lib.gpufile_hdf5_get_stats_json(None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    lib.gpufile_hdf5_get_stats_json(buf, size + 1)
    import json
    return json.loads(buf.value.decode())


def reset_runtime_stats() -> None:
    """Zeroes the plugin runtime's statistics (not its counters()), if it is loaded."""
    lib = _loaded_plugin()
    if lib is not None:
        lib.gpufile_hdf5_reset_stats()


def counters() -> Dict[str, int]:
    """What the driver moved in this process so far (gpufile_hdf5_get_counters).

    The plugin keeps its own copy of gpufile's runtime, so these are apart from
    gpufile.stats(). Loading the plugin here gives the copy HDF5 loaded, if it did: the dynamic
    loader hands out one copy per file.
    """
    lib = _plugin()
    out = _Counters()
    if lib.gpufile_hdf5_get_counters(ctypes.byref(out)) != 0:
        raise RuntimeError("gpufile_hdf5_get_counters failed")
    return {name: int(getattr(out, name)) for name in _COUNTERS}


def read(dset, out, selection=None) -> int:
    """Reads an h5py dataset (or a selection of it) from its file straight into ``out`` through
    gpufile, HDF5 not in the data path; returns the bytes placed. Works whichever driver opened
    the file.

    ``out`` is GPU memory (CuPy, PyTorch, anything with ``__cuda_array_interface__``,
    ``gpufile.DeviceBuffer``) or host memory (NumPy, anything with the buffer protocol),
    C-contiguous, either of the selection's shape and of ``dset.dtype`` exactly (byte order
    included: no conversion is made), or a 1-D byte buffer of at least the selection's bytes.
    ``selection`` is what ``dset[...]`` takes made of slices with step 1, integers and one
    Ellipsis (None: the whole dataset).

    Contiguous and chunked datasets, unfiltered: each chunk's bytes are read by gpufile, many at
    once, into their place in ``out`` or, when a chunk lands as many short rows, into staging in
    the same memory as ``out`` and placed from there (for a GPU array by device-to-device copies:
    no host memory on the way). Storage never written gets the fill value, as HDF5 gives it
    (nothing, as HDF5, when the fill time is "never"). Filtered (compressed), compact, external,
    virtual and variable-length datasets are refused with ValueError naming the reason.

    What this process wrote through h5py must be flushed first (``dset.file.flush()``). A file
    shorter than its index says raises OSError; bytes already placed in ``out`` stay there.
    """
    from ._hdf5_read import read as read_pieces
    return read_pieces(dset, out, selection)
