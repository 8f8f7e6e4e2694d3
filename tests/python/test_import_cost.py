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
# the dtype table, but not the scatter of split tensors nor DeviceArray (framework="dlpack").
CASES = {
    "import gpufile": NEVER + ["json", "threading", "typing", "gpufile.safetensors", "gpufile._dtypes",
                               "gpufile._arrays", "gpufile._scatter", "gpufile._boxes"],
    "from gpufile.safetensors import load_file": NEVER + ["gpufile._arrays", "gpufile._scatter",
                                                          "gpufile._boxes"],
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
