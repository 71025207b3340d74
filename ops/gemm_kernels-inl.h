// Per-target GEMM kernels, included once per Highway target by ops/gemm.cc.
//
// Every element of C is one FMA chain over k in increasing order, split only at fixed KC
// boundaries (packed path), then C = alpha·acc + beta·C; on the dot path (at most 4 columns),
// lane-wise chains over k reduced in a fixed order; on AVX-512's pairs path (B transposed, 5 to
// 8 columns: UsePairsNT) an even-k and an odd-k chain, added; on its pairs path for A·B of 9 or
// 10 columns (UsePairsNN) the same even + odd chains for columns 0..7, and for columns 8 and 9
// eight chains (one per k % 8) added in a fixed tree; on its quads path for the same products
// where that is chosen (UseQuadsNN: set_gemm_ten_columns), and on the same for A·Bᵀ of 9 or 10
// columns (UseQuadsNT), one chain for each of columns 0..7 and for columns 8 and 9 four (one
// per k % 4) added in a fixed tree. The tile an element falls in and the
// slice that computes it never change that chain, which is what makes results bitwise
// independent of the thread count.

// The kernels are split by concept: ops/gemm_tile-inl.h (arguments, blocking, micro-tile,
// stores, epilogue), ops/gemm_direct-inl.h (direct, swapped and dot paths) and
// ops/gemm_packed-inl.h (packed, short-k and dynamic packed paths) and ops/gemm_small-inl.h
// (small products, C tile in registers, AVX-512). This file holds the
// choice of path by shape and GemmBlock, which dispatches a block of C to that path.

// Target-independent declarations (normal include guard).
#ifndef ATTNKIT_OPS_GEMM_KERNELS_SHARED_H_
#define ATTNKIT_OPS_GEMM_KERNELS_SHARED_H_
#include <cstdint>

namespace attnkit::gemm_detail {

// Attention-shaped products (T × T × dh and T × dh × T at T = 128, dh = 64, operands strided
// by the interleaved heads): op(B) packed into NR-column micro-panels of the whole k, A
// broadcast in place (see GemmShortK). Taken before the packed path, which packs A for only
// n / NR column panels, and the direct path, whose 1 KB-strided B rows thrash the L1 sets.
inline bool use_short_k_path(int64_t m, int64_t n, int64_t k) {
  return k >= 48 && k <= 160 && m >= 48 && n >= 48 && n <= 512;
}

// The direct (no packing of A) path wins for the thin shapes of small attention models;
// deep or wide products go through the packed, cache-blocked path, and so do the medium
// attention products with a row-major B (P·V, dS·K, Pᵀ·dY, dSᵀ·Q at T = 128, dh = 64), whose
// B rows the packing makes contiguous; Q·Kᵀ, whose Bᵀ the direct path copies anyway, stays
// direct.
inline bool use_packed_path(int64_t m, int64_t n, int64_t k, bool trans_b) {
  if (use_short_k_path(m, n, k)) return false;
  return (k > 256 && m >= 96 && n >= 96) || (n > 512 && m > 64) ||
         (k > 128 && n >= 256 && m > 256) || (!trans_b && k >= 64 && m >= 96 && n >= 64);
}

// Thin C with a transposed A (dW = xᵀ·dy of a narrow layer): the direct path computes Cᵀ so
// its vectors run along m (see GemmSwapped). Only for shapes the packed path does not take.
inline bool use_swapped_path(bool trans_a, int64_t m, int64_t n) {
  return trans_a && n <= 12 && m >= 2 * n;
}

// At most 4 columns and a row-major A: dot products along k (see GemmDot).
inline bool use_dot_path(bool trans_a, int64_t n) { return !trans_a && n <= 4; }

}  // namespace attnkit::gemm_detail
#endif  // ATTNKIT_OPS_GEMM_KERNELS_SHARED_H_

// Per-target part: toggled include guard, as Highway's foreach_target.h requires.
#if defined(ATTNKIT_OPS_GEMM_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_OPS_GEMM_KERNELS_INL_H_
#undef ATTNKIT_OPS_GEMM_KERNELS_INL_H_
#else
#define ATTNKIT_OPS_GEMM_KERNELS_INL_H_
#endif

#include <algorithm>
#include <atomic>

#include "hwy/highway.h"
#include "ops/gemm_direct-inl.h"
#include "ops/gemm_packed-inl.h"
#include "ops/gemm_small-inl.h"
#include "ops/gemm_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {

// Row blocks of `rows` rows taken from a shared counter, each on the path the product's
// shape selects (which block a row falls in changes none of its values).
inline void GemmRowsDynamic(const GemmArgs& g, std::atomic<int64_t>* next, int64_t rows);

// C[i0..i1, j0..j1] of one product g on the path its shape selects, except the small path.
inline void GemmBlockNotSmall(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (gemm_detail::use_packed_path(g.m, g.n, g.k, g.trans_b)) {
    GemmPacked(g, i0, i1, j0, j1);  // its epilogue runs per tile
    return;
  }
  bool fused = false;  // the epilogue applied in the path's own stores
  if (gemm_detail::use_short_k_path(g.m, g.n, g.k)) {
    GemmShortK(g, i0, i1, j0, j1);
  } else if (gemm_detail::use_swapped_path(g.trans_a, g.m, g.n)) {
    GemmSwapped(g, i0, i1, j0, j1);
  } else if (gemm_detail::use_dot_path(g.trans_a, g.n)) {
    GemmDot(g, i0, i1, j0, j1);
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  } else if (UseKQuadsNNAvx2(g)) {  // (never split by columns: at most 10)
    HWY_DASSERT(j0 == 0 && j1 == g.n);
    KQuadRowsNNAvx2(g, i0, i1);
#endif
  } else {
    fused = GemmDirect(g, i0, i1, j0, j1);
  }
  if (g.has_epilogue() && !fused) Epilogue(g, i0, i1, j0, j1);  // the block is this call's, done
}

#if ATTNKIT_HAVE_SMALL_GEMM
// Block rows [i0, i1) of every product of span on the AVX-512 path that g's whole shape selects
// before the small path — the pairs path (B transposed, or A·B of 9 or 10 columns) or the quads
// path (A·B or A·Bᵀ of 9 or 10 columns where set_gemm_ten_columns chose it) — and true; false,
// doing nothing, for any other shape. (GemmBlock's and the per-call path's one chain.)
HWY_INLINE bool ShapePathRows(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                              const ProductSpan& span) {
  if (UsePairsNT(g)) {  // any block of such a product (see UsePairsNT)
    PairRowsNT(g, i0, i1, j0, j1, span);
    return true;
  }
  if (UsePairsNN(g)) {  // any row block; never a column block (block_of_slice splits columns
    // in steps of 16, so a product of at most 10 is never split)
    HWY_DASSERT(j0 == 0 && j1 == g.n);
    PairRowsNN(g, i0, i1, j0, j1, span);
    return true;
  }
  if (UseQuadsNN(g)) {  // as UsePairsNN's, where the quads paths are chosen
    HWY_DASSERT(j0 == 0 && j1 == g.n);
    if (UseKQuadsNN(g)) {
      KQuadRowsNN(g, i0, i1, j0, j1, span);
    } else {
      QuadRowsNN(g, i0, i1, j0, j1, span);
    }
    return true;
  }
  if (UseQuadsNT(g)) {  // the same with B transposed
    HWY_DASSERT(j0 == 0 && j1 == g.n);
    QuadRowsNT(g, i0, i1, j0, j1, span);
    return true;
  }
  return false;
}

// Whether GemmBlock sends block [i0, i1) × [j0, j1) of g to the small path (AVX-512 only).
inline bool TakesSmallPath(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  return !gemm_detail::use_packed_path(g.m, g.n, g.k, g.trans_b) && !gemm_detail::use_short_k_path(g.m, g.n, g.k) &&
         UseSmallPath(g, i0, i1, j0, j1);
}
#endif

// C[i0..i1, j0..j1] of every product of span (one product by default), on the path the whole
// product's shape selects. The small path takes the whole span in one call (the path and its
// tiles chosen once: per product, that choice was a quarter of a 10 × 16 × 10 product).
inline void GemmBlock(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                      const ProductSpan& span = ProductSpan{}) {
  if (i0 >= i1 || j0 >= j1) return;
#if ATTNKIT_HAVE_SMALL_GEMM
  if (ShapePathRows(g, i0, i1, j0, j1, span)) return;
  if (TakesSmallPath(g, i0, i1, j0, j1)) {
    GemmSmall(g, i0, i1, j0, j1, span);  // (takes an epilogue only where it fuses it)
    return;
  }
#endif
  span.for_each(g, [&](const GemmArgs& gp) { GemmBlockNotSmall(gp, i0, i1, j0, j1); });
}

inline void GemmRowsDynamic(const GemmArgs& g, std::atomic<int64_t>* next, int64_t rows) {
  const int64_t tasks = (g.m + rows - 1) / rows;
  for (;;) {
    const int64_t t = next->fetch_add(1, std::memory_order_relaxed);
    if (t >= tasks) break;
    GemmBlock(g, t * rows, std::min(g.m, (t + 1) * rows), 0, g.n);
  }
}

}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_OPS_GEMM_KERNELS_INL_H_
