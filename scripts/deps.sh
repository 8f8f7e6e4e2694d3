#!/usr/bin/env bash
# Installs what gpufile needs to build and test, from Debian's packages, when it is missing.
# Sourced by run-main.sh and test.sh; safe to run again.
set -euo pipefail

gpufile_packages=(cmake ninja-build g++ liburing-dev nlohmann-json3-dev libgtest-dev python3 python3-dev
  python3-venv)

gpufile_missing_packages() {
  local p missing=()
  for p in "${gpufile_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  echo "${missing[@]:-}"
}

gpufile_install_deps() {
  local missing
  missing=$(gpufile_missing_packages)
  [ -z "$missing" ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "gpufile: installing $missing" >&2
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then gpufile_install_deps; fi
