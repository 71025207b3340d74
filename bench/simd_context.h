// What every benchmark program does first: applies ATTNKIT_SIMD_TARGET (a bad value is one
// line on stderr and exit 2) and names the SIMD target in the benchmark context, so every
// figure carries the target it was measured on — and the OpenBLAS kernels the comparisons ran
// on (OPENBLAS_CORETYPE in the environment overrides OpenBLAS's own pick for the CPU).
#pragma once
#include <benchmark/benchmark.h>

#include <cblas.h>  // openblas_get_corename

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "engine/simd_target.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"

namespace attnkit::bench {

// False (after printing why) when ATTNKIT_SIMD_TARGET is not usable.
inline bool apply_simd_target(const char* program) {
  try {
    apply_simd_target_env();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return false;
  }
  benchmark::AddCustomContext("attnkit_simd_target", simd_target_name());
  for (const KernelChoice& choice : avx512_kernel_choices()) {
    // ATTNKIT_TEN_COLUMNS's choice is the context attnkit_ten_columns.
    std::string key = choice.variable;
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    benchmark::AddCustomContext(key, choice.in_use() + (avx512_target_in_use() ? "" : " (unused below AVX3)"));
  }
  benchmark::AddCustomContext("attnkit_bf16_kernel", std::string(bf16_kernel_name(bf16_kernel())) +
                                                         " (this CPU has: " + bf16_kernels_available() + ")");
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext(
      "openblas_kernels", std::string(openblas_get_corename()) +
                              (forced && *forced ? std::string(" (forced: OPENBLAS_CORETYPE=") + forced + ")"
                                                 : std::string(" (OpenBLAS's own choice)")));
  return true;
}

}  // namespace attnkit::bench
