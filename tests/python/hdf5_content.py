"""The HDF5 file the driver tests write and check, shared by the test process and its children
(which import this module by name: tests/python is on their PYTHONPATH).

Every kind of object h5py users rely on: groups (nested), attributes of several types,
contiguous, chunked, gzip-compressed and resizable datasets, strings, an empty dataset.
"""
import numpy as np

CONTIGUOUS = np.arange(200_000, dtype="<f8") * 0.5
CHUNKED = np.arange(300 * 400, dtype="<i4").reshape(300, 400)
COMPRESSIBLE = np.tile(np.arange(1000, dtype="<u2"), 300)
RESIZED = np.arange(5000, dtype="<i8")


def write_content(f):
    f.attrs["title"] = "gpufile HDF5 driver test"
    f.attrs["version"] = np.int32(3)
    g = f.create_group("group/inner")
    g.attrs["weights"] = np.array([0.25, 0.5, 0.25])
    f.create_dataset("contiguous", data=CONTIGUOUS)
    f.create_dataset("group/chunked", data=CHUNKED, chunks=(64, 64))
    f.create_dataset("group/inner/gzip", data=COMPRESSIBLE, chunks=(4096,), compression="gzip",
                     compression_opts=6, shuffle=True)
    r = f.create_dataset("resizable", shape=(1000,), maxshape=(None,), dtype="<i8",
                         chunks=(1000,))
    r[:] = RESIZED[:1000]
    r.resize((RESIZED.size,))
    r[1000:] = RESIZED[1000:]
    f["strings"] = np.array([b"alpha", b"beta", b"gamma"])
    f.create_dataset("empty", shape=(0,), dtype="<f4")


def check_content(f):
    assert f.attrs["title"] == "gpufile HDF5 driver test"
    assert f.attrs["version"] == 3
    assert np.array_equal(f["group/inner"].attrs["weights"], [0.25, 0.5, 0.25])
    assert np.array_equal(f["contiguous"][...], CONTIGUOUS)
    assert f["contiguous"].chunks is None
    assert np.array_equal(f["group/chunked"][...], CHUNKED)
    assert np.array_equal(f["group/chunked"][17:250:3, 399], CHUNKED[17:250:3, 399])
    gz = f["group/inner/gzip"]
    assert gz.compression == "gzip" and np.array_equal(gz[...], COMPRESSIBLE)
    assert f["resizable"].maxshape == (None,)
    assert np.array_equal(f["resizable"][...], RESIZED)
    assert list(f["strings"][...]) == [b"alpha", b"beta", b"gamma"]
    assert f["empty"].shape == (0,)
    assert sorted(f) == ["contiguous", "empty", "group", "resizable", "strings"]
