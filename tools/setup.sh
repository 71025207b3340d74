#!/usr/bin/env bash
# Installs, idempotently, every Debian package attnkit's build, tests and benchmarks need.
# Only missing packages are installed; fails loudly if one cannot be had.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  ninja-build           # the presets' generator: object files of every target compile in parallel
  libhwy-dev            # Highway: portable SIMD with runtime dispatch (ops/)
  libopenblas-dev       # OpenBLAS: reference GEMM in tests, optional backend, benchmark baseline
  libomp-dev            # OpenMP runtime headers (g++ uses libgomp; clang for fuzzing uses libomp)
  clang libclang-rt-14-dev  # libFuzzer targets (tools/fuzz.sh)
  libbenchmark-dev      # Google Benchmark: bench/
  catch2                # Catch2 2.x: tests/
  libcli11-dev          # CLI11: the attnkit command line
  libfmt-dev            # fmt: formatting (g++ 12 has no <format>)
  nlohmann-json3-dev    # JSON for safetensors headers, meta.json, metrics.json
  libpng-dev zlib1g-dev # PNG output; zlib for .npz (deflate) reading
  python3-numpy         # tests read our .npy/.npz back with numpy
  libopenmpi-dev openmpi-bin  # Open MPI: `mpirun -np N attnkit train` (data-parallel), its tests
  libfreetype-dev fonts-dejavu-core  # text in the PNG pictures (DejaVu Sans is built into attnkit)
)
if [ "${ATTNKIT_SETUP_TORCH:-0}" = 1 ]; then
  packages+=(python3-torch)  # only for bench/compare_pytorch.py
fi

# Optional, best effort: Debian's chromium, for the headless-browser test of report.html
# (tests/test_render.cc skips that test with a warning where chromium is absent).
if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  echo "setup: installing chromium (optional: the browser test of report.html)"
  maybe_sudo=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then maybe_sudo="sudo"; fi
  if ! { [ "$(id -u)" -eq 0 ] || [ -n "$maybe_sudo" ]; } ||
     ! DEBIAN_FRONTEND=noninteractive $maybe_sudo apt-get update -qq ||
     ! DEBIAN_FRONTEND=noninteractive $maybe_sudo apt-get install -y -qq --no-install-recommends chromium; then
    echo "setup: warning: chromium could not be installed; the browser test of report.html will be skipped" >&2
  fi
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || { echo "setup: error: apt-get update failed" >&2; exit 1; }
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "setup: error: could not install: ${missing[*]}" >&2
  exit 1
fi
echo "setup: done"
