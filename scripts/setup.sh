#!/usr/bin/env bash
# Installs every Debian package fp4train's build and tests need. Idempotent: a second run changes nothing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates xz-utils
  libopenblas-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format
  python3 python3-torch python3-numpy python3-matplotlib
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all ${#packages[@]} packages present"
