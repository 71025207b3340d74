#!/usr/bin/env bash
# Configures CMake preset PRESET (release, debug or sanitize; see CMakePresets.json) into
# build/PRESET. The presets build with Ninja; a build folder made with another generator (Unix
# Makefiles, by checkouts before 6 Dec 2026) is reconfigured from scratch instead of failing.
# Usage: tools/configure.sh PRESET
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:?usage: tools/configure.sh PRESET}"
cache="build/$preset/CMakeCache.txt"
if [ -f "$cache" ] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$cache"; then
  echo "configure: build/$preset was made with another CMake generator; configuring it afresh for Ninja"
  rm -rf "build/$preset/CMakeCache.txt" "build/$preset/CMakeFiles"
fi
cmake --preset "$preset"
