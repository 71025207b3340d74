#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time:
# the .npy, .npz and safetensors readers, seeded with the files in tests/data/malformed, and the
# command-line parser (fuzz_cli: input = argv split on NUL bytes), seeded with
# tests/data/fuzz_cli/*.args and the option names in tests/fuzz/cli.dict. A crash leaves its
# input in build/fuzz/crashes/: add it to tests/data/ with a test, then fix the code.
# Usage: tools/fuzz.sh [seconds per target, default 30]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
tools/setup.sh
build=build/fuzz
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DATTNKIT_BUILD_FUZZERS=ON -DATTNKIT_BUILD_TESTS=OFF -DATTNKIT_BUILD_BENCH=OFF \
  -DATTNKIT_BUILD_TOOLS=OFF > /dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target fuzz_npy fuzz_npz fuzz_safetensors fuzz_cli
mkdir -p "$build/crashes"
status=0
for target in fuzz_npy fuzz_npz fuzz_safetensors fuzz_cli; do
  corpus="$build/corpus/$target"
  mkdir -p "$corpus"
  case "$target" in
    fuzz_npy) cp tests/data/malformed/*.npy "$corpus"/ ;;
    fuzz_npz) cp tests/data/malformed/*.npz "$corpus"/ ;;
    fuzz_safetensors) cp tests/data/malformed/*.safetensors "$corpus"/ ;;
    fuzz_cli) cp tests/data/fuzz_cli/*.args "$corpus"/ ;;
  esac
  extra=()
  if [ "$target" = fuzz_cli ]; then extra=(-dict=tests/fuzz/cli.dict); fi
  echo "fuzz: $target for ${seconds}s"
  if ! "$build/tests/fuzz/$target" "${extra[@]}" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -timeout=10 -artifact_prefix="$build/crashes/$target-" -print_final_stats=1 2> "$build/$target.log"; then
    echo "fuzz: $target FAILED; see $build/$target.log and $build/crashes/" >&2
    tail -40 "$build/$target.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$build/$target.log" | tail -2 || true
  fi
done
exit $status
