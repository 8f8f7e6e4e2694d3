"""What `import gpufile` and `from gpufile.safetensors import load_file` import: only what a load
needs (docs/python.md, "Import cost"). A structural check, in a fresh interpreter each: which
modules the statement adds to sys.modules. How long the imports take is measured by
bench/import_cost.py, not here."""
import subprocess
import sys

import pytest

import gpufile

# Brought in by no load: gpufile's other parts, and the standard library's heavier packages.
NEVER = ["gpufile.hdf5", "gpufile._hdf5_read", "gpufile.zarr", "gpufile._s3", "gpufile.plot",
         "numpy", "concurrent.futures", "asyncio", "xml.etree.ElementTree", "urllib.parse",
         "ctypes", "argparse", "csv", "dataclasses"]

# What the statements may add beyond NEVER's absence: `import gpufile` is the extension module
# alone; the loader adds the header parsing (json, struct), the thread that opens the session and
# the dtype table, but not the scatter of split tensors, DeviceArray (framework="dlpack"), the
# other loaders, the writer, safe_open nor the split rules.
CASES = {
    "import gpufile": NEVER + ["json", "threading", "typing", "gpufile.safetensors", "gpufile._dtypes",
                               "gpufile._arrays", "gpufile._scatter", "gpufile._boxes"],
    "from gpufile.safetensors import load_file": NEVER + ["gpufile._arrays", "gpufile._scatter", "gpufile._boxes"] + [
        "gpufile.safetensors." + m for m in ("_load_sharded", "_load_into", "_save", "_safe_open", "_split", "_plan")],
}

# The child prints the package's file, then one module a line (no json: it is on the lists).
_CHILD = """
import sys
before = set(sys.modules)
exec(sys.argv[1])
new = set(sys.modules) - before
import gpufile
print(gpufile.__file__)
print("\\n".join(sorted(new)))
"""


def imported_by(statement: str) -> set:
    """The modules a fresh interpreter of this Python adds to sys.modules running `statement`."""
    lines = subprocess.run([sys.executable, "-c", _CHILD, statement], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    assert lines[0] == gpufile.__file__  # the package under test, not another copy
    return set(lines[1:])


@pytest.mark.parametrize("statement", sorted(CASES))
def test_imports_only_what_a_load_needs(statement):
    new = imported_by(statement)
    assert "gpufile._gpufile" in new  # the check sees the statement's imports at all
    assert sorted(new & set(CASES[statement])) == []


def test_lazy_names_still_there():
    # DeviceArray is imported on first use, and listed by dir() as before.
    assert "DeviceArray" in dir(gpufile)
    new = imported_by("import gpufile; gpufile.DeviceArray; from gpufile import DeviceArray")
    assert "gpufile._arrays" in new
    for name in gpufile.__all__:
        assert getattr(gpufile, name) is not None
    with pytest.raises(AttributeError):
        gpufile.no_such_name  # noqa: B018 - the lookup is the test


def test_lazy_safetensors_names_still_there():
    # The names only some calls need are imported on first use, and listed by dir() as before.
    import gpufile.safetensors as gst
    lazy = ["load_sharded", "load_into", "LoadResult", "save_file", "safe_open", "shard_slice", "SplitRule"]
    assert set(lazy) <= set(dir(gst))
    new = imported_by(f"from gpufile.safetensors import {', '.join(lazy)}")
    assert {"gpufile.safetensors._save", "gpufile.safetensors._safe_open", "gpufile.safetensors._load_into"} <= new
    for name in gst.__all__:
        assert getattr(gst, name) is not None
    assert gst.save_file.__module__ == "gpufile.safetensors._save"
    with pytest.raises(AttributeError):
        gst.no_such_name  # noqa: B018 - the lookup is the test
