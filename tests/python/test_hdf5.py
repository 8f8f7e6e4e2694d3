"""gpufile's HDF5 virtual file driver (hdf5/, docs/hdf5.md) under h5py from PyPI, whose wheel
brings its own libhdf5 (1.14 or 2.0): round trips of every kind of object, files read the same
through the driver and through HDF5's default driver (SEC2) both ways, bad files and bad
configurations give clean errors, and H5Dread/H5Dwrite on GPU memory (the CUDA test double in
CI) move the right bytes through gpufile.

HDF5 reads HDF5_PLUGIN_PATH and HDF5_DRIVER once, when the library starts, so everything that
uses the driver runs in a child process; this process reads and writes with SEC2."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import gpufile.hdf5
from conftest import needs_gpu_driver
from hdf5_content import check_content, write_content

HERE = os.path.dirname(os.path.abspath(__file__))

# Prelude of every child: the counters come back as the last line of its output.
CHILD_PRELUDE = """
import json, sys
import h5py, numpy as np
import gpufile.hdf5
from hdf5_content import check_content, write_content
def report(**extra):
    print(json.dumps(dict(counters=gpufile.hdf5.counters(), **extra)))
"""


def run_with_driver(script, *args, config=None):
    """Runs `script` in a Python child whose HDF5 uses the gpufile driver; returns its report."""
    return run_child(script, *args, env=gpufile.hdf5.environment(config))


def run_child(script, *args, env=None):
    """Runs `script` in a Python child with `env` added to this environment; returns its
    report. HDF5's own variables are dropped first: a child sees only what `env` gives it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HDF5_")} | (env or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + script, *map(str, args)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"child failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_plugin_path_holds_the_plugin_alone():
    d = gpufile.hdf5.plugin_path()
    assert os.listdir(d) == [gpufile.hdf5.LIBRARY_NAME]
    assert gpufile.hdf5.environment("workers=2") == {
        "HDF5_PLUGIN_PATH": d, "HDF5_DRIVER": "gpufile", "HDF5_DRIVER_CONFIG": "workers=2"}


def test_written_through_the_driver_reads_back_and_through_sec2(tmp_path):
    path = tmp_path / "through_driver.h5"
    r = run_with_driver("""
with h5py.File(sys.argv[1], "w") as f:
    write_content(f)
    driver = f.driver
with h5py.File(sys.argv[1], "r") as f:
    check_content(f)
report(driver=driver)
""", path)
    # h5py names only the drivers it knows; HDF5's default would say "sec2".
    assert r["driver"] == "unknown"
    c = r["counters"]
    assert c["files_opened"] == 2
    assert c["bytes_written"] >= os.path.getsize(path) - 4096  # data, less free space
    assert c["bytes_read"] >= 200_000 * 8  # the contiguous dataset alone
    assert c["device_bytes_read"] == c["device_bytes_written"] == 0
    with h5py.File(path, "r") as f:
        assert f.driver == "sec2"
        check_content(f)


def test_written_through_sec2_reads_through_the_driver_and_files_match(tmp_path):
    sec2_path, driver_path = tmp_path / "sec2.h5", tmp_path / "driver.h5"
    with h5py.File(sec2_path, "w") as f:
        write_content(f)
    r = run_with_driver("""
with h5py.File(sys.argv[1], "r") as f:
    check_content(f)
with h5py.File(sys.argv[2], "w") as f:
    write_content(f)
report()
""", sec2_path, driver_path)
    assert r["counters"]["bytes_read"] >= 200_000 * 8
    # The same calls make the same file, byte for byte, whichever driver wrote it.
    assert driver_path.read_bytes() == sec2_path.read_bytes()


def test_append_through_the_driver_to_a_sec2_file(tmp_path):
    path = tmp_path / "append.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("grow", data=np.arange(10), maxshape=(None,), chunks=(10,))
    run_with_driver("""
with h5py.File(sys.argv[1], "r+") as f:
    d = f["grow"]
    d.resize((100_000,))
    d[10:] = np.arange(10, 100_000)
    f.attrs["appended"] = True
report()
""", path)
    with h5py.File(path, "r") as f:
        assert f.attrs["appended"]
        assert np.array_equal(f["grow"][...], np.arange(100_000))


def test_h5py_picks_the_driver_by_name_without_environment(tmp_path):
    # H5Pset_fapl_gpufile through h5py's driver registry: the plugin is loaded by ctypes, not by
    # HDF5, so it finds h5py's libhdf5 (loaded RTLD_LOCAL) among the loaded objects, and
    # registers the driver with it.
    path = tmp_path / "by_name.h5"
    r = run_child("""
gpufile.hdf5.register_h5py()
with h5py.File(sys.argv[1], "w", driver="gpufile", config="workers=2;block_size=256K") as f:
    write_content(f)
with h5py.File(sys.argv[1], "a", driver="gpufile") as f:
    check_content(f)
    f.attrs["again"] = 1
try:
    h5py.File(sys.argv[1], "r", driver="gpufile", config="alignment=512")
    error = ""
except OSError as e:
    error = str(e)
report(error=error)
""", path)
    assert r["counters"]["files_opened"] == 2
    assert r["counters"]["bytes_written"] > 200_000 * 8
    assert "H5Pset_alignment" in r["error"]
    with h5py.File(path, "r") as f:
        check_content(f)
        assert f.attrs["again"] == 1


BAD_FILES = """
results = {}
for name in sys.argv[1:]:
    try:
        with h5py.File(name, "r") as f:
            f["contiguous"][...]
        results[name] = ["opened", ""]
    except Exception as e:
        results[name] = [type(e).__name__, str(e)]
report(results=results)
"""


def test_bad_files_give_clean_errors(tmp_path):
    good = tmp_path / "good.h5"
    with h5py.File(good, "w") as f:
        write_content(f)
    data = good.read_bytes()
    files = {
        "truncated": data[: len(data) // 2],
        "superblock_only": data[:96],
        "garbage": np.random.default_rng(7).integers(0, 256, 65536, dtype=np.uint8).tobytes(),
        "empty": b"",
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    names = [tmp_path / n for n in files] + [tmp_path / "missing.h5"]
    results = run_with_driver(BAD_FILES, *names)["results"]
    for name in files:
        kind, message = results[str(tmp_path / name)]
        assert kind == "OSError", (name, kind, message)
    assert "truncated file" in results[str(tmp_path / "truncated")][1]
    kind, message = results[str(tmp_path / "missing.h5")]
    assert kind == "FileNotFoundError" and "errno = 2" in message


@pytest.mark.parametrize("config,expected", [
    ("alignment=4096", "H5Pset_alignment"),
    ("bogus=1", 'unknown key "bogus"'),
    ("workers=many", "workers: want a whole number"),
    ("block_size=3", "block_size: want a size in whole KiB"),
    ("gpufile.workers=100000", "gpufile.workers"),
])
def test_bad_configuration_refuses_to_open(tmp_path, config, expected):
    path = tmp_path / "c.h5"
    r = run_with_driver("""
try:
    h5py.File(sys.argv[1], "w").close()
    report(error="")
except OSError as e:
    report(error=str(e))
""", path, config=config)
    assert expected in r["error"]
    assert r["counters"]["files_opened"] == 0


def test_configuration_string_is_accepted(tmp_path):
    path = tmp_path / "c.h5"
    r = run_with_driver("""
with h5py.File(sys.argv[1], "w") as f:
    write_content(f)
with h5py.File(sys.argv[1], "r") as f:
    check_content(f)
report()
""", path, config=" workers=2; block_size=1M , direct_io=never;engine=posix;gpufile.ring_depth=8")
    assert r["counters"]["files_opened"] == 2


# H5Dwrite and H5Dread with GPU memory as the buffer, through the C API of h5py's own libhdf5
# (ctypes; h5py never hands HDF5 a device pointer). The dataset is contiguous and the memory
# type is the file type, so HDF5 passes the pointer down to the driver untouched.
DEVICE_IO = """
import ctypes, gpufile

def loaded_libhdf5():
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            base = path.rsplit("/", 1)[-1]
            if base.startswith(("libhdf5-", "libhdf5.so")):
                return path
    raise RuntimeError("h5py's libhdf5 is not loaded")

lib = ctypes.CDLL(loaded_libhdf5())
for fn in (lib.H5Dwrite, lib.H5Dread):
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int64] * 5 + [ctypes.c_void_p]
ALL = DEFAULT = 0

def dataset_io(fn, dset, buf):
    t = dset.id.get_type()
    assert fn(dset.id.id, t.id, ALL, ALL, DEFAULT, buf.ptr) >= 0

n = (1 << 20) + 3                     # 4 MiB and 12 bytes of float32: several slabs and a tail
data = np.random.default_rng(5).random(n, dtype=np.float32)
host_written = np.arange(70_000, dtype="<f8")
src = gpufile.DeviceBuffer(data.nbytes)
src.copy_from_host(data)
with h5py.File(sys.argv[1], "w") as f:
    f["host_written"] = host_written                  # written from host memory, by h5py
    dataset_io(lib.H5Dwrite, f.create_dataset("from_gpu", shape=(n,), dtype="<f4"), src)
    f.flush()
    back = gpufile.DeviceBuffer(data.nbytes)
    dataset_io(lib.H5Dread, f["from_gpu"], back)
    other = gpufile.DeviceBuffer(host_written.nbytes)
    dataset_io(lib.H5Dread, f["host_written"], other)
    host_view = f["from_gpu"][...]                    # the same bytes into host memory
out = np.empty(n, dtype=np.float32)
back.copy_to_host(out)
out2 = np.empty_like(host_written)
other.copy_to_host(out2)
report(gpu_round_trip=bool(np.array_equal(out, data)),
       host_view=bool(np.array_equal(host_view, data)),
       host_written_into_gpu=bool(np.array_equal(out2, host_written)), nbytes=int(data.nbytes))
"""


@needs_gpu_driver
def test_device_pointer_reads_and_writes_through_the_c_api(tmp_path):
    path = tmp_path / "gpu.h5"
    r = run_with_driver(DEVICE_IO, path)
    assert r["gpu_round_trip"] and r["host_view"] and r["host_written_into_gpu"]
    c = r["counters"]
    assert c["device_bytes_written"] == r["nbytes"]
    assert c["device_bytes_read"] == r["nbytes"] + 70_000 * 8
    with h5py.File(path, "r") as f:                   # and SEC2 reads what the GPU wrote
        expected = np.random.default_rng(5).random((1 << 20) + 3, dtype=np.float32)
        assert np.array_equal(f["from_gpu"][...], expected)
