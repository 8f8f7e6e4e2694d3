#!/usr/bin/env python3
"""The release's version is set once, in CMakeLists.txt's project(gpufile VERSION X.Y.Z ...);
checks that everything a user reads it from says the same:

  - `gpufile --version` (the CLI)
  - gpufile.pc's Version (pkg-config --modversion gpufile)
  - gpufileConfigVersion.cmake's PACKAGE_VERSION (find_package(gpufile X.Y CONFIG))
  - the wheel's version: pyproject.toml's version provider, applied to CMakeLists.txt as
    scikit-build-core applies it (and no second version written in pyproject.toml)
  - CHANGELOG.md has a section for it

gpufile.__version__ and the installed wheel's metadata are checked by
tests/python/test_version.py, against the installed package.
"""
import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

PROJECT_VERSION = re.compile(r"^project\(gpufile\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)\b", re.M)


def project_version(source: Path) -> str:
    found = PROJECT_VERSION.findall((source / "CMakeLists.txt").read_text())
    if len(found) != 1:
        sys.exit(f"check_version: expected one project(gpufile VERSION X.Y.Z ...) in "
                 f"{source / 'CMakeLists.txt'}, found {found}")
    return found[0]


def cli_version(cli: str) -> str:
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.match(r"gpufile (\S+) ", out)
    return m.group(1) if m else f"<no version in {out!r}>"


def pc_version(pc: Path) -> str:
    m = re.search(r"^Version:\s*(\S+)\s*$", pc.read_text(), re.M)
    return m.group(1) if m else "<no Version line>"


def cmake_package_version(config_version: Path) -> str:
    m = re.search(r'^set\(PACKAGE_VERSION "([^"]*)"\)', config_version.read_text(), re.M)
    return m.group(1) if m else "<no PACKAGE_VERSION>"


def wheel_version(source: Path) -> str:
    pyproject = tomllib.loads((source / "pyproject.toml").read_text())
    if "version" in pyproject["project"] or "version" not in pyproject["project"].get("dynamic", []):
        return "<pyproject.toml sets a version of its own instead of reading CMakeLists.txt>"
    provider = pyproject["tool"]["scikit-build"]["metadata"]["version"]
    if provider.get("provider") != "scikit_build_core.metadata.regex":
        return f"<unexpected version provider {provider.get('provider')!r}>"
    m = re.search(provider["regex"], (source / provider["input"]).read_text(), re.M)
    return m.group("value") if m else f"<{provider['regex']!r} matches nothing in {provider['input']}>"


def changelog_has(source: Path, version: str) -> str:
    text = (source / "CHANGELOG.md").read_text()
    return version if re.search(rf"^## \[{re.escape(version)}\]", text, re.M) else "<no section>"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", type=Path, required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--pc", type=Path, required=True, help="the build's gpufile.pc")
    ap.add_argument("--config-version", type=Path, required=True,
                    help="the build's gpufileConfigVersion.cmake")
    args = ap.parse_args()

    want = project_version(args.source_dir)
    got = {
        "gpufile --version": cli_version(args.cli),
        "gpufile.pc": pc_version(args.pc),
        "gpufileConfigVersion.cmake": cmake_package_version(args.config_version),
        "the wheel (pyproject.toml)": wheel_version(args.source_dir),
        "CHANGELOG.md": changelog_has(args.source_dir, want),
    }
    wrong = {k: v for k, v in got.items() if v != want}
    for k, v in got.items():
        print(f"{k}: {v}")
    if wrong:
        print(f"check_version: CMakeLists.txt says {want}; these differ: {wrong}", file=sys.stderr)
        return 1
    print(f"check_version: all say {want}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
