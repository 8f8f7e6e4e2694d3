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
    return dict(json.loads(out.stdout.strip().splitlines()[-1]), stderr=out.stderr)


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


def test_session_is_kept_between_files_and_restarted_for_a_new_configuration(tmp_path):
    # Files share one gpufile session; a configuration that differs applies when no file is
    # open (the session restarts), and is checked but not applied while one is (a warning).
    r = run_child("""
gpufile.hdf5.register_h5py()
a = h5py.File(sys.argv[1], "w", driver="gpufile", config="workers=2")
b = h5py.File(sys.argv[2], "w", driver="gpufile", config="workers=3")   # shares a's session
try:
    h5py.File(sys.argv[3], "w", driver="gpufile", config="workers=lots")
    refused = False
except OSError:
    refused = True
a.close(); b.close()
c = h5py.File(sys.argv[1], "r", driver="gpufile", config="workers=4")    # restarts it
c.close()
report(refused=refused)
""", tmp_path / "a.h5", tmp_path / "b.h5", tmp_path / "c.h5", env={"GPUFILE_LOG_LEVEL": "WARN"})
    assert r["refused"]
    assert r["counters"]["files_opened"] == 3
    warnings = [line for line in r["stderr"].splitlines() if "not applied" in line]
    assert len(warnings) == 1 and '"workers=3" not applied' in warnings[0], r["stderr"]


@pytest.mark.skipif("HDF5_USE_FILE_LOCKING" in os.environ, reason="HDF5's file locks are off")
def test_file_locks_interoperate_with_sec2(tmp_path):
    # HDF5 locks a file for its whole open: the driver's flock and SEC2's see each other.
    path = tmp_path / "locked.h5"
    script = """
try:
    with h5py.File(sys.argv[1], "r") as f:
        report(error="", value=int(f["x"][0]))
except OSError as e:
    report(error=str(e))
"""
    with h5py.File(path, "w") as f:  # SEC2, holding the write lock
        f["x"] = [42]
        f.flush()
        locked = run_with_driver(script, path)
    assert "unable to lock file" in locked["error"] and "errno = 11" in locked["error"]
    unlocked = run_with_driver(script, path)  # SEC2 closed the file
    assert unlocked["error"] == "" and unlocked["value"] == 42


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


# The driver's callbacks called directly, with no HDF5 in the process: SEC2's semantics
# (end of file tracked, zeros past it in host and GPU memory, truncate to the end of address,
# comparison by inode, locks, delete) and the class table's layout seen from outside (a second,
# independent declaration of H5FD_class_t here, in ctypes).
CALLBACKS = """
import ctypes, os, gpufile
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_int, c_int64, c_uint,
                    c_uint64, c_ulong, c_size_t, c_void_p)
F = c_void_p
class Class(Structure):
    _fields_ = [("version", c_uint), ("value", c_int), ("name", c_char_p), ("maxaddr", c_uint64),
                ("fc_degree", c_int), ("terminate", c_void_p), ("sb_size", c_void_p),
                ("sb_encode", c_void_p), ("sb_decode", c_void_p), ("fapl_size", c_size_t),
                ("fapl_get", c_void_p), ("fapl_copy", c_void_p), ("fapl_free", c_void_p),
                ("dxpl_size", c_size_t), ("dxpl_copy", c_void_p), ("dxpl_free", c_void_p),
                ("open", CFUNCTYPE(F, c_char_p, c_uint, c_int64, c_uint64)),
                ("close", CFUNCTYPE(c_int, F)), ("cmp", CFUNCTYPE(c_int, F, F)),
                ("query", CFUNCTYPE(c_int, F, POINTER(c_ulong))), ("get_type_map", c_void_p),
                ("alloc", c_void_p), ("free", c_void_p),
                ("get_eoa", CFUNCTYPE(c_uint64, F, c_int)),
                ("set_eoa", CFUNCTYPE(c_int, F, c_int, c_uint64)),
                ("get_eof", CFUNCTYPE(c_uint64, F, c_int)),
                ("get_handle", CFUNCTYPE(c_int, F, c_int64, POINTER(c_void_p))),
                ("read", CFUNCTYPE(c_int, F, c_int, c_int64, c_uint64, c_size_t, c_void_p)),
                ("write", CFUNCTYPE(c_int, F, c_int, c_int64, c_uint64, c_size_t, c_void_p)),
                ("read_vector", c_void_p), ("write_vector", c_void_p),
                ("read_selection", c_void_p), ("write_selection", c_void_p),
                ("flush", c_void_p), ("truncate", CFUNCTYPE(c_int, F, c_int64, c_bool)),
                ("lock", CFUNCTYPE(c_int, F, c_bool)), ("unlock", CFUNCTYPE(c_int, F)),
                ("delete", CFUNCTYPE(c_int, c_char_p, c_int64)), ("ctl", c_void_p),
                ("fl_map", c_int * 7)]

lib = ctypes.CDLL(gpufile.hdf5.plugin_file())
lib.H5PLget_plugin_info.restype = POINTER(Class)
cls = lib.H5PLget_plugin_info().contents
RAW, RDONLY, RDWR, CREATE_NEW = 3, 0x0, 0x1, 0x1 | 0x10 | 0x4
path, other = sys.argv[1].encode(), sys.argv[2].encode()
data = np.random.default_rng(3).integers(0, 256, 10_000, dtype=np.uint8)
data.tofile(sys.argv[1]); data[:10].tofile(sys.argv[2])
r = dict(plugin_type=lib.H5PLget_plugin_type(), version=cls.version, value=cls.value,
         name=cls.name.decode(), ctl_is_null=not cls.ctl, fl_map=list(cls.fl_map))
flags = c_ulong()
f = cls.open(path, RDWR, 0, 1 << 40)
cls.query(f, ctypes.byref(flags))
r.update(flags=flags.value, eof=cls.get_eof(f, RAW), eoa=cls.get_eoa(f, RAW))
cls.set_eoa(f, RAW, 20_000)
host = np.full(8192, 0xFF, dtype=np.uint8)
r["host_read"] = cls.read(f, RAW, 0, 6000, host.size, host.ctypes.data)
r["host_tail_ok"] = bool(np.array_equal(host[:4000], data[6000:]) and not host[4000:].any())
dev = gpufile.DeviceBuffer(8192)
dev.copy_from_host(np.full(8192, 0xFF, dtype=np.uint8))
r["device_read"] = cls.read(f, RAW, 0, 6000, 8192, dev.ptr)
back = np.empty(8192, dtype=np.uint8); dev.copy_to_host(back)
r["device_tail_ok"] = bool(np.array_equal(back[:4000], data[6000:]) and not back[4000:].any())
r["device_write"] = cls.write(f, RAW, 0, 15_000, 1000, dev.ptr)
r["eof_after_write"] = cls.get_eof(f, RAW)
r["size_after_write"] = os.path.getsize(sys.argv[1])
r["overflow_read"] = cls.read(f, RAW, 0, 1 << 63, 16, host.ctypes.data)
r["truncate_up"] = cls.truncate(f, 0, False)
r["size_after_truncate_up"] = os.path.getsize(sys.argv[1])
cls.set_eoa(f, RAW, 5000)
cls.truncate(f, 0, True)
r["size_after_truncate_down"] = os.path.getsize(sys.argv[1])
r["eof_after_truncate_down"] = cls.get_eof(f, RAW)
same, diff = cls.open(path, RDONLY, 0, 1 << 40), cls.open(other, RDONLY, 0, 1 << 40)
r["cmp"] = [cls.cmp(f, same), cls.cmp(f, diff), cls.cmp(diff, f)]
handle = c_void_p()
cls.get_handle(f, 0, ctypes.byref(handle))
fd = ctypes.cast(handle, POINTER(c_int)).contents.value
r["handle_is_file"] = os.fstat(fd).st_ino == os.stat(sys.argv[1]).st_ino
r["locks"] = [cls.lock(f, True), cls.lock(same, False), cls.unlock(f), cls.lock(same, False),
              cls.unlock(same)]
r["open_missing"] = bool(cls.open(sys.argv[1].encode() + b".missing", RDONLY, 0, 1 << 40))
r["create_existing"] = bool(cls.open(path, CREATE_NEW, 0, 1 << 40))
r["closes"] = [cls.close(f), cls.close(same), cls.close(diff)]
r["delete"] = cls.delete(other, 0)
r["other_exists"] = os.path.exists(sys.argv[2])
r["head"] = data[:5000].tobytes() == open(sys.argv[1], "rb").read()
report(**r)
"""


@needs_gpu_driver
def test_driver_callbacks_keep_sec2_semantics(tmp_path):
    r = run_child(CALLBACKS, tmp_path / "a.bin", tmp_path / "b.bin")
    assert r["plugin_type"] == 2  # H5PL_TYPE_VFD
    assert (r["version"], r["value"], r["name"]) == (1, 501, "gpufile")
    assert r["ctl_is_null"] and r["fl_map"] == [1, 1, 1, 3, 3, 1, 1]  # metadata | raw pools
    assert r["flags"] & 0x80 and not r["flags"] & 0x8  # POSIX handle, no data sieve
    assert (r["eof"], r["eoa"]) == (10_000, 0)
    assert r["host_read"] == 0 and r["host_tail_ok"]  # zeros past the end of the file
    assert r["device_read"] == 0 and r["device_tail_ok"]  # in GPU memory too
    assert r["device_write"] == 0
    assert r["eof_after_write"] == r["size_after_write"] == 16_000
    assert r["overflow_read"] < 0
    assert r["truncate_up"] == 0 and r["size_after_truncate_up"] == 20_000
    assert r["size_after_truncate_down"] == r["eof_after_truncate_down"] == 5000
    assert r["head"]
    assert r["cmp"][0] == 0 and r["cmp"][1] == -r["cmp"][2] != 0
    assert r["handle_is_file"]
    assert r["locks"] == [0, -1, 0, 0, 0]  # shared against exclusive fails at once (LOCK_NB)
    assert not r["open_missing"] and not r["create_existing"]
    assert r["closes"] == [0, 0, 0]
    assert r["delete"] == 0 and not r["other_exists"]
    c = r["counters"]
    assert c["device_bytes_read"] == 8192 and c["device_bytes_written"] == 1000
    assert c["files_opened"] == 3


@pytest.mark.parametrize("userblock", [None, 4096])
def test_read_contiguous_dataset_straight_into_memory(tmp_path, userblock):
    # gpufile.hdf5.read: the dataset's bytes from the file through gpufile, HDF5 not involved
    # (chunked datasets and selections: test_hdf5_read.py).
    path = tmp_path / "direct.h5"
    values = np.random.default_rng(9).standard_normal(300_001).astype(">f4")  # byte order kept
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f["x"] = values
        f.create_dataset("unwritten", shape=(10,), dtype="<i4", fillvalue=-4)
    host = np.empty_like(values)
    with h5py.File(path, "r") as f:
        assert gpufile.hdf5.read(f["x"], host) == values.nbytes
        assert np.array_equal(host, values)
        unwritten = np.zeros(10, dtype="<i4")
        assert gpufile.hdf5.read(f["unwritten"], unwritten) == 40  # the fill value, as HDF5 reads
        assert unwritten.tolist() == [-4] * 10
        if gpufile.cuda_available():
            dev = gpufile.DeviceBuffer(values.nbytes)
            gpufile.hdf5.read(f["x"], dev)
            back = np.empty_like(values)
            dev.copy_to_host(back)
            assert np.array_equal(back, values)


def test_stats_add_up_the_plugin_runtime_and_the_extension(tmp_path):
    # The plugin carries its own copy of gpufile's runtime; gpufile.stats() adds its statistics
    # to the extension's once HDF5 has loaded it, and stats_reset() zeroes both.
    # Calls and bytes are counted from stats level 1 (bytes per path always): both runtimes at 1.
    path = tmp_path / "stats.h5"
    r = run_with_driver("""
import gpufile
gpufile.set_setting("profile.cufile_stats", 1)
before = gpufile.stats()
with h5py.File(sys.argv[1], "w") as f:
    f["x"] = np.arange(1 << 18, dtype="<f8")
with h5py.File(sys.argv[1], "r") as f:
    f["x"][...]
plugin = gpufile.hdf5.runtime_stats()
through_hdf5 = gpufile.stats()
with gpufile.open(sys.argv[1]) as g:                 # the extension's own runtime
    g.read(bytearray(4096))
both = gpufile.stats()
gpufile.stats_reset()
report(before=before, plugin=plugin, through_hdf5=through_hdf5, both=both,
       after_reset=gpufile.stats())
""", path, config="profile.cufile_stats=1")
    # HDF5 loaded the plugin when it started (HDF5_DRIVER names it): nothing moved yet.
    assert r["before"]["read"]["bytes"] == r["before"]["hdf5_driver"]["bytes_read"] == 0
    plugin, through_hdf5, both = r["plugin"], r["through_hdf5"], r["both"]
    assert plugin["read"]["bytes"] >= (1 << 18) * 8 and plugin["write"]["bytes"] >= (1 << 18) * 8
    assert plugin["read"]["bytes"] == r["counters"]["bytes_read"]
    for op in ("read", "write"):
        assert through_hdf5[op]["bytes"] == plugin[op]["bytes"]
        assert through_hdf5[op]["calls_ok"] == plugin[op]["calls_ok"]
    assert through_hdf5["hdf5_driver"]["bytes_read"] == plugin["read"]["bytes"]
    assert both["read"]["bytes"] == plugin["read"]["bytes"] + 4096
    assert both["read"]["calls_ok"] == plugin["read"]["calls_ok"] + 1
    # Histograms add bucket by bucket (32 still); level 1 times nothing and counts no device.
    assert len(both["read"]["latency"]["buckets"]) == 32 and both["read"]["latency"]["p50_us"] is None
    assert both["devices"] == {}
    for stats in (plugin, both):
        assert sum(p["bytes"] for p in stats["read"]["paths"].values()) == stats["read"]["bytes"]
    for op in ("read", "write"):
        assert r["after_reset"][op]["bytes"] == 0 and r["after_reset"][op]["calls_ok"] == 0
    assert r["after_reset"]["hdf5_driver"]["bytes_read"] == plugin["read"]["bytes"]
