#!/usr/bin/env bash
# Fills .carry/ (git-ignored) with what the GPU machine lacks and the build needs: the header-only
# toml++ and the PCRE2 header. The device tool copies it there when the call names `.carry` in carry.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.carry/include"
cp -r /usr/include/toml++ "$root/.carry/include/"
cp /usr/include/pcre2.h "$root/.carry/include/"
du -sh "$root/.carry"
