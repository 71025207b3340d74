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
