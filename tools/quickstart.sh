#!/usr/bin/env bash
# Builds attnkit (Release) and runs the main job. Until the trainer lands, the main job is the
# GEMM comparison: attnkit vs OpenBLAS on our workload shapes, one thread.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --preset release
cmake --build --preset release -j "$(nproc 2>/dev/null || echo 2)" --target bench_gemm
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/release/bench/bench_gemm \
  --benchmark_filter='workload|batched' --benchmark_min_time=0.1
