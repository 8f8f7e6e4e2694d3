"""The installed package's version: gpufile.__version__ (compiled into the extension) and the
wheel's metadata both come from CMakeLists.txt's project(gpufile VERSION X.Y.Z ...), the one
place a release sets it (tests/install/check_version.py checks the CLI, gpufile.pc and the
CMake package against the same line)."""
import importlib.metadata
import re
from pathlib import Path

import gpufile

CMAKELISTS = Path(__file__).resolve().parents[2] / "CMakeLists.txt"


def project_version() -> str:
    m = re.search(r"^project\(gpufile\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)\b",
                  CMAKELISTS.read_text(), re.M)
    assert m, f"no project(gpufile VERSION ...) in {CMAKELISTS}"
    return m.group(1)


def test_module_version_is_the_projects():
    assert gpufile.__version__ == project_version()


def test_installed_metadata_is_the_projects():
    assert importlib.metadata.version("gpufile") == project_version()
