#!/usr/bin/env bash
# Installs what gpufile needs to build and test, from Debian's packages, when it is missing.
# Sourced by run-main.sh and test.sh; safe to run again.
set -euo pipefail

# libcurl4-openssl-dev: curl's headers only; remote objects (src/io/remote) load libcurl.so.4 at run
# time, so no built library links it.
gpufile_packages=(cmake ninja-build g++ liburing-dev nlohmann-json3-dev libgtest-dev python3 python3-dev
  python3-venv libcurl4-openssl-dev)

# Only for scripts/test.sh: gdb, with which a test that hangs prints every thread's stack
# (tests/support/common/watchdog.hpp) before it fails; pkg-config, with which tests/install builds
# a program against the installed gpufile.pc.
# ca-certificates: for the Go module proxy, from which versitygw (the tests' S3 server) is built
gpufile_test_packages=(gdb pkg-config ca-certificates)

# The fuzz step of test.sh (tests/fuzz): clang, and the runtimes of libFuzzer and the sanitizers
# for its version (Debian 12: clang 14, libclang-rt-14-dev), installed only when that step runs.
gpufile_fuzz_packages=(clang)

gpufile_missing_packages() {  # package...
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  echo "${missing[@]:-}"
}

gpufile_install_packages() {  # package...: those not installed yet
  local missing
  missing=$(gpufile_missing_packages "$@")
  [ -z "$missing" ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "gpufile: installing $missing" >&2
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

gpufile_install_deps() { gpufile_install_packages "${gpufile_packages[@]}"; }

gpufile_install_test_deps() { gpufile_install_packages "${gpufile_test_packages[@]}"; }

gpufile_install_fuzz_deps() {
  gpufile_install_packages "${gpufile_fuzz_packages[@]}"
  local major
  major=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
  gpufile_install_packages "libclang-rt-$major-dev"
}

# versitygw, the S3 server the remote-object tests run (tests/python/test_remote_s3.py), built
# from the Go module proxy into build/tools/versitygw-$version/ once; later runs reuse it. Prints
# the binary's path. GPUFILE_VERSITYGW_VERSION picks another release.
gpufile_versitygw_version=${GPUFILE_VERSITYGW_VERSION:-v1.8.0}
gpufile_install_versitygw() {
  local root dir go
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  dir="$root/build/tools/versitygw-$gpufile_versitygw_version"
  if [ ! -x "$dir/bin/versitygw" ]; then
    go=/usr/local/go/bin/go
    if [ ! -x "$go" ]; then
      gpufile_install_packages golang-go
      go=$(command -v go)
    fi
    echo "gpufile: building versitygw $gpufile_versitygw_version (once; kept in $dir)" >&2
    mkdir -p "$dir"
    GOBIN="$dir/bin" GOPATH="$dir/gopath" GOCACHE="$dir/gocache" GOFLAGS=-modcacherw \
      "$go" install "github.com/versity/versitygw/cmd/versitygw@$gpufile_versitygw_version" >&2
    rm -rf "$dir/gocache" "$dir/gopath"  # hundreds of MB the binary no longer needs
  fi
  echo "$dir/bin/versitygw"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then gpufile_install_deps; fi
