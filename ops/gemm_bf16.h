// bfloat16 products with float32 accumulation: the mixed-precision path of the matrix
// products (ExecutorOptions::precision, `attnkit train --precision bf16`).
//
// The operands are rounded to bf16 (round to nearest even, as the CPU's vcvtneps2bf16 does:
// subnormal inputs become zero, NaN stays NaN) and multiplied on the best kernel this CPU has,
// chosen at run time:
//   - AMX-BF16 tiles (Intel Xeon Sapphire Rapids and later): 16 × 32 · 32 × 16 tile products;
//   - AVX512-BF16 (vdpbf16ps: Cooper Lake, AMD Zen 4 and later) on the same packed operands;
//   - none: the operands are rounded to bf16 and multiplied by the float32 kernels (same
//     semantics, no speed-up; what CPUs without either get).
// The products of pairs of bf16 values are exact in float32 and are summed in float32, so the
// only rounding beyond float32's is the rounding of the inputs. Each element of C is computed
// the same way whatever the thread split, so results do not depend on the thread count.
#pragma once
#include <cstdint>
#include <string>

#include "gemm.h"
#include "parallel.h"

namespace attnkit {

enum class Bf16Kernel { kNone = 0, kAvx512Bf16 = 1, kAmx = 2 };

// Whether AVX-512 code may run now: true unless a SIMD target below AVX3 was forced
// (engine/simd_target.h's force_simd_target and ATTNKIT_SIMD_TARGET call
// set_avx512_allowed). The bf16 kernels are AVX-512 intrinsics of their own, not dispatched by
// Highway: they run only while this holds, also in a build that compiles no AVX3 target (the
// sanitize preset's), where avx512_target_in_use() in gemm.h is false. Not thread-safe to set:
// set it before running products.
bool avx512_allowed();
void set_avx512_allowed(bool allowed);

// The kernel the bf16 products use now: the best the CPU (and the OS: AMX needs the kernel's
// tile-data permission, asked for once) supports, unless set_bf16_kernel chose a lower one;
// none while AVX-512 is not allowed (a SIMD target below AVX3 forced), whatever was chosen.
Bf16Kernel bf16_kernel();
// "AMX-BF16", "AVX512-BF16", "none".
const char* bf16_kernel_name(Bf16Kernel kernel);
// Whether this CPU and OS can run `kernel` (kNone always).
bool bf16_kernel_supported(Bf16Kernel kernel);
// The kernels this machine supports, best first, comma-separated ("AMX-BF16, AVX512-BF16, none").
std::string bf16_kernels_available();
// Why a CPU with AMX-BF16 does not use it, or "" (it does, or has none): the OS leaves the tile
// state off (XCR0), or Linux refused the tile-data permission (arch_prctl, e.g. ENOSPC when a
// thread's signal stack is too small for the tiles). The products then run on AVX512-BF16.
std::string bf16_kernel_note();
// Uses `kernel` from now on (while avx512_allowed()); false (nothing changed) when this CPU
// cannot run it. Not thread-safe: call it before running products (engine/simd_target.h's
// force_bf16_kernel and the ATTNKIT_BF16 variable use it).
bool set_bf16_kernel(Bf16Kernel kernel);
// Back to the best kernel this machine supports.
void use_best_bf16_kernel();

// x rounded to the nearest bf16 value (ties to even; subnormals to signed zero; NaN quiet),
// as a float: what the kernels multiply.
float round_to_bf16(float x);

// Whether the engine's products of this shape take the bf16 path when asked to (shapes too
// small for the packing to pay, or with a side under a tile, stay float32).
bool bf16_product_worth(int64_t m, int64_t n, int64_t k);

// C (m×n) = alpha·op(A)·op(B) + beta·C with sgemm's conventions (ops/gemm.h: row-major,
// beta == 0 never reads C, k == 0 scales C by beta), A and B rounded to bf16, sums in float32.
// Slice s computes its block of C (as sgemm_slice splits it); bf16_gemm runs on the OpenMP
// threads when the product is large enough.
void bf16_gemm_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc, Slice s);
void bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc);

// Rows [i0, i1) × columns [j0, j1) of that product (the building block of the above and of
// sgemm_epilogue_slice's bf16 path), with an optional epilogue (ops/gemm.h) applied as each
// block of C is stored, with GemmEpilogue's operations in its order. Its column sums, B not
// transposed, cover columns [j0, j1) (the caller passes them to the block holding row 0 only),
// each column summed in k order while B is packed.
void bf16_gemm_block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                     const GemmEpilogue* epilogue = nullptr, uint64_t b_stamp = 0);
// b_stamp != 0 promises that B (its values at b, and how it is laid out) is the same in every
// call with that stamp: the calling thread then packs B once, keeps the packed form (up to
// 64 MB a thread, in up to 64 operands, for the thread's lifetime) and reuses it for the other
// calls with the stamp.
// The engine gives each chunked run a fresh stamp for its parameters (RunContext::
// constant_stamp): a training step in 4 chunks packs each weight once instead of 4 times.
// Results are bitwise those of b_stamp = 0. Calls with a stamp must not change B.
// set_bf16_pack_cache(false) turns the reuse off (every call packs; for comparisons).
void set_bf16_pack_cache(bool on);
bool bf16_pack_cache();

}  // namespace attnkit
