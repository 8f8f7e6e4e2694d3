"""Shared fixtures of the Python tests.

Without a GPU these run against the CUDA driver test double (GPUFILE_CUDA_LIBRARY points at it;
scripts/test.sh sets it), whose "device memory" the CPU cannot touch: a stray host access to device
memory crashes the test. On the GPU machine the same tests run against the real driver.
"""
import os

import numpy as np
import pytest

import gpufile

# scripts/test.sh runs these tests against the installed wheel and names the folder the package
# must come from: a gpufile imported from the source tree would test something users never get.
_package_dir = os.environ.get("GPUFILE_TEST_PACKAGE_DIR")
if _package_dir and (os.path.dirname(os.path.realpath(gpufile.__file__))
                     != os.path.realpath(_package_dir)):
    raise pytest.UsageError(f"gpufile was imported from {gpufile.__file__}, "
                            f"not from GPUFILE_TEST_PACKAGE_DIR={_package_dir}")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def data_file(tmp_path, rng):
    """A factory: data_file(nbytes) -> (path, the file's bytes as a uint8 array)."""
    def make(nbytes: int, name: str = "data.bin"):
        data = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
        path = tmp_path / name
        data.tofile(path)
        return path, data
    return make


def device_bytes(buf, nbytes=None, offset=0) -> np.ndarray:
    """The bytes of a gpufile.DeviceBuffer, copied to the host."""
    out = np.empty(buf.nbytes - offset if nbytes is None else nbytes, dtype=np.uint8)
    buf.copy_to_host(out, offset)
    return out


needs_gpu_driver = pytest.mark.skipif(not gpufile.cuda_available(),
                                      reason="no CUDA driver (nor its test double)")
# Tests that delay or fail the driver's copies through the test double's controls.
needs_driver_double = pytest.mark.skipif(
    "fakecuda" not in os.environ.get("GPUFILE_CUDA_LIBRARY", ""),
    reason="needs the CUDA driver's test double (its copy delays and failures)")


class DLPackOnly:
    """Offers `owner`'s memory through DLPack alone (no buffer protocol, no CUDA array
    interface), as PyTorch CPU tensors and JAX arrays do."""

    def __init__(self, owner):
        self.owner = owner

    def __dlpack__(self, **kwargs):
        return self.owner.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.owner.__dlpack_device__()
