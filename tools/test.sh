#!/usr/bin/env bash
# Builds attnkit and runs the whole test suite through CTest. Exits non-zero on any failure.
# Usage: tools/test.sh [release|debug|sanitize]   (default: release)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
tools/setup.sh
jobs="$(nproc 2>/dev/null || echo 2)"
tools/configure.sh "$preset"
cmake --build --preset "$preset" -j "$jobs"
ctest --preset "$preset"
# On an AVX-512 CPU, the release suite once more with the dispatch forced down to AVX2: the
# engine, the program and the tools as an AVX2 machine runs them. The tests labelled "kernels"
# (tests/CMakeLists.txt) are left out: they already ran every target the CPU has; the others
# otherwise see only the best.
if [ "$preset" = release ] && grep -q -m1 -w avx512f /proc/cpuinfo 2>/dev/null; then
  echo "test: the suite again with ATTNKIT_SIMD_TARGET=AVX2 (all but the tests labelled kernels)"
  ATTNKIT_SIMD_TARGET=AVX2 ctest --preset "$preset" --label-exclude '^kernels$'
fi
