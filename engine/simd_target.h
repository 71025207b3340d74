// Which SIMD instruction set the kernels run on. Highway compiles every kernel for several
// targets (AVX-512 "AVX3", AVX2, SSE4, …) and picks the best one this CPU supports at run
// time; the environment variable ATTNKIT_SIMD_TARGET (e.g. AVX2, case-insensitive) or
// force_simd_target() makes every kernel use a lower one instead, to compare targets on one
// machine or to rule a target out.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace attnkit {

// Targets compiled into this library, best first (e.g. {"AVX3", "AVX2", "SSE4", "SSSE3", "SCALAR"}).
std::vector<std::string> compiled_simd_targets();

// The compiled targets this CPU can run, best first.
std::vector<std::string> supported_simd_targets();

// Makes every kernel dispatch to `name` (case-insensitive) or, for "" or "best", to the best
// supported target again. Throws attnkit::Error naming the target and the choices when the
// name is unknown, not compiled in, or not supported by this CPU. Not thread-safe: call it
// before running kernels.
void force_simd_target(const std::string& name);

// Makes the bf16 products (ops/gemm_bf16.h) use the kernel `name` (case-insensitive: "amx",
// "avx512_bf16", "none" — none rounds the inputs and uses the float32 kernels, and makes
// Precision::kBf16 run float32 products) or, for "" or "best", the best one again. Throws
// attnkit::Error naming the kernel and the choices when the name is unknown or this CPU lacks
// it, or when the SIMD target in use is below AVX3 (the kernels are AVX-512 code). While the
// SIMD target is forced below AVX3 the bf16 products run none whatever was chosen
// (bf16_kernel() and avx512_allowed() in ops/gemm_bf16.h; an AVX2 CPU has no bf16 kernel);
// the choice holds again back on AVX3.
void force_bf16_kernel(const std::string& name);

// Makes the AVX-512 small products get A's values as `name` says (case-insensitive: "split",
// "broadcast"; "" or "best": this CPU's default) — set_gemm_small_values in ops/gemm.h, for
// measuring both on one machine. Throws attnkit::Error naming the value and the choices.
// (avx512_target_in_use() in ops/gemm.h says whether this choice and the next apply.)
void force_small_gemm_values(const std::string& name);

// Makes the AVX-512 products shaped for a core that issues 512-bit operations whole or in two
// 256-bit halves as `name` says (case-insensitive: "full", "halves"; "" or "best": this CPU's
// default) — set_gemm_avx512_width in ops/gemm.h. Throws attnkit::Error naming the value and
// the choices.
void force_avx512_width(const std::string& name);

// Makes the AVX-512 products of 9 or 10 columns take 16-lane rows or the quads paths as `name`
// says (case-insensitive: "wide", "quads"; "" or "best": this CPU's default) —
// set_gemm_ten_columns in ops/gemm.h. Throws attnkit::Error naming the value and the choices.
void force_ten_columns(const std::string& name);

// The three choices above as one table, in the order apply_simd_target_env() applies them:
// what `attnkit --version` prints, the benchmarks' context and the tests iterate, so a new
// choice is one more row.
struct KernelChoice {
  const char* variable;                     // its environment variable, "ATTNKIT_TEN_COLUMNS"
  const char* label;                        // as --version names it, "products of 9 or 10 columns (AVX-512)"
  const char* what;                         // as an error names it, "layout of the 9/10-column products"
  std::vector<const char*> names;           // the choices besides "best", as *_name() spells them
  const char* (*current)();                 // the choice in use (gemm_ten_columns_name)
  void (*set)(size_t index);                // 0: the CPU's default, i: names[i - 1] (set_gemm_ten_columns)
  // Sets the choice `name` (case-insensitive: one of names, or "" / "best"); throws Error
  // naming `what` and the choices otherwise.
  void force(const std::string& name) const;
  // current(), with " (VARIABLE)" when the variable is set: "quads (ATTNKIT_TEN_COLUMNS)".
  std::string in_use() const;
};
const std::vector<KernelChoice>& avx512_kernel_choices();

// Applies ATTNKIT_SIMD_TARGET, then ATTNKIT_BF16 (force_bf16_kernel's names), then
// ATTNKIT_SMALL_GEMM (force_small_gemm_values's), then ATTNKIT_AVX512_WIDTH
// (force_avx512_width's), then ATTNKIT_TEN_COLUMNS (force_ten_columns's), once per process
// (later calls do nothing, or throw the same error again). Executor's constructor calls it, so
// a program using the engine honours the variable; programs calling the kernels in ops/
// directly call it first. Throws attnkit::Error naming the variable, its value and the choices
// when the value is not usable.
void apply_simd_target_env();

}  // namespace attnkit
