// Per-target GEMM kernels, included once per Highway target by ops/gemm.cc.
//
// Every element of C is one FMA chain over k in increasing order, split only at fixed KC
// boundaries (packed path), then C = alpha·acc + beta·C; on the dot path (at most 4 columns),
// lane-wise chains over k reduced in a fixed order. The tile an element falls in and the
// slice that computes it never change that chain, which is what makes results bitwise
// independent of the thread count.

// Target-independent declarations (normal include guard).
#ifndef ATTNKIT_OPS_GEMM_KERNELS_SHARED_H_
#define ATTNKIT_OPS_GEMM_KERNELS_SHARED_H_
#include <cstddef>
#include <cstdint>

namespace attnkit::gemm_detail {

// One product C = alpha·op(A)·op(B) + beta·C (+ bias[j] in every row when bias is set); the
// kernels compute a sub-block of it.
struct GemmArgs {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
  // n values added to every row of C in the final store of each tile (after alpha·acc and
  // beta·C are combined), or nullptr.
  const float* bias = nullptr;
  // After that final store (see GemmEpilogue in ops/gemm.h): relu: C = max(C, 0); mask:
  // C = C where mask > 0, else 0, mask laid out like C with row stride ldm; addend:
  // C = C + addend (row stride ld_addend).
  bool relu = false;
  const float* mask = nullptr;
  int64_t ldm = 0;
  const float* addend = nullptr;
  int64_t ld_addend = 0;
  bool has_epilogue() const { return relu || mask != nullptr || addend != nullptr; }
  // colsum[j] += Σ_kk B[kk, j] (B row-major, not transposed), each column summed in k order
  // while the packed path packs B (the bias gradient of a Linear from its dW = xᵀ·dy
  // product); colsum is zeroed first unless colsum_accumulate. Only the packed path does
  // it (see sgemm_fuses_colsum in ops/gemm.h), in the block that holds row 0.
  float* colsum = nullptr;
  bool colsum_accumulate = false;
};

// Per-thread grow-only 64-byte-aligned scratch; slot 0 holds packed A, slot 1 packed B.
float* thread_scratch(int slot, size_t floats);

// Blocking of the packed path. KC is fixed for every target and thread count: it decides
// where the k-sum is split, so it must not depend on anything but the shape.
inline constexpr int64_t kMR = 6;     // rows of the micro-tile
inline constexpr int64_t kKC = 384;   // k-depth of packed panels: B micro-panel 24 KB in L1
inline constexpr int64_t kMC = 120;   // rows of an A block: 180 KB in L2
inline constexpr int64_t kNC = 2048;  // columns of a B block: 2 MB in L3
// Rows of A kept hot in the direct path while all column tiles pass over them.
inline constexpr int64_t kDirectRows = 96;

// Attention-shaped products (T × T × dh and T × dh × T at T = 128, dh = 64, operands strided
// by the interleaved heads): op(B) packed into NR-column micro-panels of the whole k, A
// broadcast in place (see GemmShortK). Taken before the packed path, which packs A for only
// n / NR column panels, and the direct path, whose 1 KB-strided B rows thrash the L1 sets.
inline bool use_short_k_path(int64_t m, int64_t n, int64_t k) {
  return k >= 48 && k <= 160 && m >= 48 && n >= 48 && n <= 512;
}

// The direct (no packing of A) path wins for the thin shapes of small attention models;
// deep or wide products go through the packed, cache-blocked path, and so do the medium
// attention products with a row-major B (P·V, dS·K, Pᵀ·dY, dSᵀ·Q at T = 128, dh = 64:
// 10-20% faster packed; Q·Kᵀ, whose Bᵀ the direct path copies anyway, was 7% slower).
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
#include <cstring>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"  // TransposeBlock8x8, kFastMaskedStore

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using gemm_detail::GemmArgs;
using gemm_detail::kMR;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// MaskedLoad only keeps masked-off lanes from faulting on AVX2 and newer; older targets load
// the whole vector, so partial loads go through a small stack buffer there.
#if HWY_TARGET <= HWY_AVX2 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
inline constexpr bool kFaultFreeMaskedLoad = true;
#else
inline constexpr bool kFaultFreeMaskedLoad = false;
#endif

// The first `count` (<= Lanes) floats at p, zeros after them, touching no memory beyond.
HWY_INLINE VF LoadFirst(DF d, const float* HWY_RESTRICT p, size_t count) {
  if (count == hn::Lanes(d)) return hn::LoadU(d, p);
  if constexpr (kFaultFreeMaskedLoad) {
    return hn::MaskedLoad(hn::FirstN(d, count), d, p);
  } else {
    alignas(64) float buf[64 / sizeof(float)] = {};
    for (size_t i = 0; i < count; ++i) buf[i] = p[i];
    return hn::Load(d, buf);
  }
}

// How the write-back combines the accumulator with what C holds.
enum class Combine { kOverwrite, kAdd, kScale };  // alpha·acc, +C, +beta·C

// Accumulates an R × NV-vector tile of A·B over k into acc: A(r, kk) = a[r·ar + kk·ak], vector
// v of row kk of B at b_v + kk·ldb. The two B vectors need not be adjacent: a ragged last tile
// reads a vector that overlaps its neighbour instead of masking (masked loads are slow on AMD
// and not fault-free before AVX2).
// kFromZero = false continues the chains from what acc holds (a k-chunk after the first).
template <int R, int NV, bool kFromZero = true>
HWY_INLINE void AccumulateTile(DF d, int64_t k, const float* HWY_RESTRICT a, int64_t ar,
                               int64_t ak, const float* HWY_RESTRICT b0,
                               const float* HWY_RESTRICT b1, int64_t ldb, VF (&acc)[kMR][2]) {
  if constexpr (kFromZero) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = hn::Zero(d);
  }
#pragma GCC unroll 4
  for (int64_t kk = 0; kk < k; ++kk) {
    const VF bv0 = hn::LoadU(d, b0 + kk * ldb);
    const VF bv1 = NV == 2 ? hn::LoadU(d, b1 + kk * ldb) : bv0;
    const float* HWY_RESTRICT ak_ptr = a + kk * ak;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const VF av = hn::Set(d, ak_ptr[r * ar]);
      acc[r][0] = hn::MulAdd(av, bv0, acc[r][0]);
      if constexpr (NV == 2) acc[r][1] = hn::MulAdd(av, bv1, acc[r][1]);
    }
  }
}

// C tile (rows × cols, cols <= 2V) = alpha·acc combined with C as `combine` says.
HWY_INLINE VF CombineVec(DF d, VF acc, VF alpha, VF beta, VF old, Combine combine) {
  if (combine == Combine::kOverwrite) return hn::Mul(acc, alpha);
  if (combine == Combine::kAdd) return hn::MulAdd(acc, alpha, old);
  return hn::MulAdd(acc, alpha, hn::Mul(beta, old));
}

// CombineVec plus the bias epilogue: alpha·acc + bias fused when C is not read, else the
// combined value + bias. Only the column decides the operations, never the tile or slice.
HWY_INLINE VF CombineBias(DF d, VF acc, VF alpha, VF beta, VF old, Combine combine, bool has_bias,
                          VF bias) {
  if (!has_bias) return CombineVec(d, acc, alpha, beta, old, combine);
  if (combine == Combine::kOverwrite) return hn::MulAdd(acc, alpha, bias);
  return hn::Add(CombineVec(d, acc, alpha, beta, old, combine), bias);
}

// Stores the first `count` lanes of v (StoreTail: one masked store on AVX-512, a stack
// buffer elsewhere).
HWY_INLINE void StoreFirst(DF d, VF v, size_t count, float* HWY_RESTRICT p) {
  if (count == hn::Lanes(d)) {
    hn::StoreU(v, d, p);
  } else {
    StoreTail(d, v, p, count);
  }
}

// With kBias, bias holds the bias of the tile's cols columns (ignored otherwise).
template <bool kBias = false>
HWY_INLINE void StoreTile(DF d, const VF (&acc)[kMR][2], int64_t rows, size_t cols, float alpha,
                          float beta, Combine combine, float* HWY_RESTRICT c, int64_t ldc,
                          const float* HWY_RESTRICT bias = nullptr) {
  const size_t lanes = hn::Lanes(d);
  const VF va = hn::Set(d, alpha), vb = hn::Set(d, beta);
  const bool read = combine != Combine::kOverwrite;
  constexpr bool has_bias = kBias;
  if (cols == 2 * lanes) {
    const VF b0 = has_bias ? hn::LoadU(d, bias) : hn::Zero(d);
    const VF b1 = has_bias ? hn::LoadU(d, bias + lanes) : hn::Zero(d);
    for (int64_t r = 0; r < rows; ++r) {
      float* cr = c + r * ldc;
      const VF o0 = read ? hn::LoadU(d, cr) : hn::Zero(d);
      const VF o1 = read ? hn::LoadU(d, cr + lanes) : hn::Zero(d);
      hn::StoreU(CombineBias(d, acc[r][0], va, vb, o0, combine, has_bias, b0), d, cr);
      hn::StoreU(CombineBias(d, acc[r][1], va, vb, o1, combine, has_bias, b1), d, cr + lanes);
    }
    return;
  }
  const size_t cols0 = std::min(cols, lanes), cols1 = cols > lanes ? cols - lanes : 0;
  const VF b0 = has_bias ? LoadFirst(d, bias, cols0) : hn::Zero(d);
  const VF b1 = has_bias && cols1 > 0 ? LoadFirst(d, bias + lanes, cols1) : hn::Zero(d);
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    const VF o0 = read ? LoadFirst(d, cr, cols0) : hn::Zero(d);
    StoreFirst(d, CombineBias(d, acc[r][0], va, vb, o0, combine, has_bias, b0), cols0, cr);
    if (cols1 > 0) {
      const VF o1 = read ? LoadFirst(d, cr + lanes, cols1) : hn::Zero(d);
      StoreFirst(d, CombineBias(d, acc[r][1], va, vb, o1, combine, has_bias, b1), cols1,
                 cr + lanes);
    }
  }
}

inline Combine FirstCombine(float beta) {
  return beta == 0.0f ? Combine::kOverwrite : beta == 1.0f ? Combine::kAdd : Combine::kScale;
}

// The relu / mask / addend epilogue of one stored value v of C's row i, columns from j
// (count of them): the same vector operations as ops/elementwise.cc's relu_forward
// (max(v, 0)), relu_backward (v where mask > 0, else 0) and add_forward (v + addend), so the
// fused results are bitwise theirs.
HWY_INLINE VF EpilogueVec(DF d, const GemmArgs& g, VF v, int64_t i, int64_t j, size_t count) {
  if (g.relu) v = hn::Max(v, hn::Zero(d));
  if (g.mask) v = hn::IfThenElseZero(hn::Gt(LoadFirst(d, g.mask + i * g.ldm + j, count), hn::Zero(d)), v);
  if (g.addend) v = hn::Add(v, LoadFirst(d, g.addend + i * g.ld_addend + j, count));
  return v;
}

// The epilogue over C[i0..i1, j0..j1), after the final store of those elements (the packed
// path applies it per tile as it stores, see StoreTileEpilogue; the other paths per block).
HWY_INLINE void Epilogue(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = i0; i < i1; ++i) {
    float* c = g.c + i * g.ldc;
    int64_t j = j0;
    for (; j + lanes <= j1; j += lanes)
      hn::StoreU(EpilogueVec(d, g, hn::LoadU(d, c + j), i, j, static_cast<size_t>(lanes)), d, c + j);
    if (j < j1) {
      const size_t count = static_cast<size_t>(j1 - j);
      StoreFirst(d, EpilogueVec(d, g, LoadFirst(d, c + j, count), i, j, count), count, c + j);
    }
  }
}

// StoreTile with the bias (bias non-null) and the epilogue in the same pass: the values the
// separate Epilogue would give, without storing and reloading the tile, whose first element
// is C[i, j].
HWY_INLINE void StoreTileEpilogue(DF d, const GemmArgs& g, const VF (&acc)[kMR][2], int64_t rows,
                                  size_t cols, Combine combine, float* HWY_RESTRICT c,
                                  const float* HWY_RESTRICT bias, int64_t i, int64_t j) {
  const size_t lanes = hn::Lanes(d);
  const VF va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  const bool read = combine != Combine::kOverwrite;
  const bool has_bias = bias != nullptr;
  const size_t cols0 = std::min(cols, lanes), cols1 = cols > lanes ? cols - lanes : 0;
  const VF b0 = has_bias ? LoadFirst(d, bias, cols0) : hn::Zero(d);
  const VF b1 = has_bias && cols1 > 0 ? LoadFirst(d, bias + lanes, cols1) : hn::Zero(d);
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + r * g.ldc;
    const VF o0 = read ? LoadFirst(d, cr, cols0) : hn::Zero(d);
    StoreFirst(d, EpilogueVec(d, g, CombineBias(d, acc[r][0], va, vb, o0, combine, has_bias, b0), i + r, j, cols0),
               cols0, cr);
    if (cols1 > 0) {
      const VF o1 = read ? LoadFirst(d, cr + lanes, cols1) : hn::Zero(d);
      StoreFirst(d, EpilogueVec(d, g, CombineBias(d, acc[r][1], va, vb, o1, combine, has_bias, b1),
                                i + r, j + static_cast<int64_t>(lanes), cols1),
                 cols1, cr + lanes);
    }
  }
}

// ------------------------------------------------------------------ direct path
// No packing of A: the kernel broadcasts A straight from memory (either layout). B is read in
// place when row-major; Bᵀ is first copied into a small zero-padded panel in thread scratch.

// Ragged last columns [j, j1) of a direct block, t = j1 - j < 2V. B is read in place (or from
// a panel at least V wide) with vectors ending exactly at j1, overlapping what lies before.
// Overlapping lanes are recomputed by the same FMA chain, so storing them again is harmless
// unless C is read (beta) or the lanes belong to another slice; then only new lanes are stored.
// With kBias, bias holds the bias of the tail's t columns.
template <int R, bool kBias>
HWY_INLINE void DirectTail(DF d, const GemmArgs& g, const float* a, int64_t ar, int64_t ak,
                           const float* b, int64_t ldb, float* c, int64_t t,
                           bool may_overwrite_before, const float* bias, VF (&acc)[kMR][2]) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const Combine combine = FirstCombine(g.beta);
  const VF va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  const bool read = combine != Combine::kOverwrite;
  constexpr bool has_bias = kBias;
  if (t == lanes) {  // one whole vector
    AccumulateTile<R, 1>(d, g.k, a, ar, ak, b, nullptr, ldb, acc);
    StoreTile<kBias>(d, acc, R, static_cast<size_t>(t), g.alpha, g.beta, combine, c, g.ldc, bias);
    return;
  }
  if (t > lanes) {  // [j, j + V) and [j1 - V, j1): the overlap stays inside this tile
    AccumulateTile<R, 2>(d, g.k, a, ar, ak, b, b + t - lanes, ldb, acc);
    const VF b0 = has_bias ? hn::LoadU(d, bias) : hn::Zero(d);
    const VF b1 = has_bias ? hn::LoadU(d, bias + t - lanes) : hn::Zero(d);
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * g.ldc;
      const VF o0 = read ? hn::LoadU(d, cr) : hn::Zero(d);
      const VF o1 = read ? hn::LoadU(d, cr + t - lanes) : hn::Zero(d);
      const VF n0 = CombineBias(d, acc[r][0], va, vb, o0, combine, has_bias, b0);
      const VF n1 = CombineBias(d, acc[r][1], va, vb, o1, combine, has_bias, b1);
      hn::StoreU(n0, d, cr);
      hn::StoreU(n1, d, cr + t - lanes);
    }
    return;
  }
  // One vector [j1 - V, j1), overlapping the previous tile.
  AccumulateTile<R, 1>(d, g.k, a, ar, ak, b + t - lanes, nullptr, ldb, acc);
  const bool whole = !read && may_overwrite_before;
  const size_t skip = static_cast<size_t>(lanes - t);
  VF bv = hn::Zero(d);
  if (has_bias) {
    if (whole) {  // the columns before j are this block's too: their bias is there
      bv = hn::LoadU(d, bias - skip);
    } else {
      alignas(64) float bbuf[64 / sizeof(float)] = {};
      for (size_t i = skip; i < static_cast<size_t>(lanes); ++i) bbuf[i] = bias[i - skip];
      bv = hn::Load(d, bbuf);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * g.ldc + t - lanes;
    if (whole) {
      hn::StoreU(CombineBias(d, acc[r][0], va, vb, hn::Zero(d), combine, has_bias, bv), d, cr);
      continue;
    }
    alignas(64) float buf[64 / sizeof(float)];
    if (read) {
      for (size_t i = skip; i < static_cast<size_t>(lanes); ++i) buf[i] = cr[i];
    }
    const VF o = read ? hn::Load(d, buf) : hn::Zero(d);
    hn::Store(CombineBias(d, acc[r][0], va, vb, o, combine, has_bias, bv), d, buf);
    for (size_t i = skip; i < static_cast<size_t>(lanes); ++i) cr[i] = buf[i];
  }
}

// DirectTail where masked loads and stores are fast (AVX-512): the t < 2V columns at b are
// loaded and C stored under lane masks, so B is read in place even when narrower than a
// vector and nothing before j is touched. Each element is the same FMA chain as elsewhere.
template <int R, bool kBias>
HWY_INLINE void DirectTailMasked(DF d, const GemmArgs& g, const float* a, int64_t ar, int64_t ak,
                                 const float* b, int64_t ldb, float* c, int64_t t,
                                 const float* bias, VF (&acc)[kMR][2]) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), k = g.k;
  if (t > lanes) {
    const auto m1 = hn::FirstN(d, static_cast<size_t>(t - lanes));
    VF acc0[R], acc1[R];  // locals, so they stay in registers over the k loop
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = hn::Zero(d);
#pragma GCC unroll 4
    for (int64_t kk = 0; kk < k; ++kk) {
      const VF bv0 = hn::LoadU(d, b + kk * ldb);
      const VF bv1 = hn::MaskedLoad(m1, d, b + kk * ldb + lanes);
      const float* HWY_RESTRICT ak_ptr = a + kk * ak;
      for (int r = 0; r < R; ++r) {
        const VF av = hn::Set(d, ak_ptr[r * ar]);
        acc0[r] = hn::MulAdd(av, bv0, acc0[r]);
        acc1[r] = hn::MulAdd(av, bv1, acc1[r]);
      }
    }
    for (int r = 0; r < R; ++r) acc[r][0] = acc0[r], acc[r][1] = acc1[r];
  } else {
    const auto m0 = hn::FirstN(d, static_cast<size_t>(t));
    VF acc0[R];
    for (int r = 0; r < R; ++r) acc0[r] = hn::Zero(d);
#pragma GCC unroll 4
    for (int64_t kk = 0; kk < k; ++kk) {
      const VF bv0 = hn::MaskedLoad(m0, d, b + kk * ldb);
      const float* HWY_RESTRICT ak_ptr = a + kk * ak;
      for (int r = 0; r < R; ++r) acc0[r] = hn::MulAdd(hn::Set(d, ak_ptr[r * ar]), bv0, acc0[r]);
    }
    for (int r = 0; r < R; ++r) acc[r][0] = acc0[r];
  }
  StoreTile<kBias>(d, acc, R, static_cast<size_t>(t), g.alpha, g.beta, FirstCombine(g.beta), c, g.ldc, bias);
}

// Rows i..i+R of a direct block; op(B) columns j0..j1 are at b (row stride ldb), which reads
// whole vectors up to V columns before j1 when j1 - j0 < V (not on AVX-512: masked loads).
template <int R, bool kBias>
HWY_INLINE void DirectRows(DF d, const GemmArgs& g, int64_t i, const float* b, int64_t ldb,
                           int64_t j0, int64_t j1) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), nr = 2 * lanes;
  const int64_t ar = g.trans_a ? 1 : g.lda, ak = g.trans_a ? g.lda : 1;
  const float* a = g.a + i * ar;
  float* c = g.c + i * g.ldc;
  const Combine combine = FirstCombine(g.beta);
  VF acc[kMR][2];
  int64_t j = j0;
  for (; j + nr <= j1; j += nr) {
    AccumulateTile<R, 2>(d, g.k, a, ar, ak, b + (j - j0), b + (j - j0) + lanes, ldb, acc);
    StoreTile<kBias>(d, acc, R, nr, g.alpha, g.beta, combine, c + j, g.ldc,
                     kBias ? g.bias + j : nullptr);
  }
  if (j < j1) {
    if constexpr (kFastMaskedStore) {
      DirectTailMasked<R, kBias>(d, g, a, ar, ak, b + (j - j0), ldb, c + j, j1 - j,
                                 kBias ? g.bias + j : nullptr, acc);
    } else {
      DirectTail<R, kBias>(d, g, a, ar, ak, b + (j - j0), ldb, c + j, j1 - j, j1 - lanes >= j0,
                           kBias ? g.bias + j : nullptr, acc);
    }
  }
}

// dst[kk·ldd + j] = src[j·lds + kk] for j < n, kk < k: op(B) of a transposed B as a k × n
// row-major panel. Where 256-bit vectors exist, 8 × 8 blocks are transposed in registers (a ragged
// last block overlaps the one before it and rewrites the same values); vector stores also let
// the kernel's vector loads that follow forward from them.
HWY_INLINE void CopyTransposedScalar(const float* HWY_RESTRICT src, int64_t lds, int64_t n,
                                     int64_t k, float* HWY_RESTRICT dst, int64_t ldd) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) dst[kk * ldd + j] = src[j * lds + kk];
  }
}


HWY_INLINE void CopyTransposed(DF d, const float* HWY_RESTRICT src, int64_t lds, int64_t n,
                               int64_t k, float* HWY_RESTRICT dst, int64_t ldd) {
#if ATTNKIT_HAVE_TRANSPOSE8
  if (n >= 8 && k >= 8) {
    for (int64_t j = 0;; j += 8) {
      j = std::min(j, n - 8);
      for (int64_t kk = 0;; kk += 8) {
        kk = std::min(kk, k - 8);
        TransposeBlock8x8(src + j * lds + kk, lds, dst + kk * ldd + j, ldd);
        if (kk + 8 >= k) break;
      }
      if (j + 8 >= n) break;
    }
    return;
  }
#endif
  (void)d;
  CopyTransposedScalar(src, lds, n, k, dst, ldd);
}

// Deep direct products (dW = xᵀ·dy over many rows): k is walked in chunks small enough that
// the chunk of A and of op(B) stay in L1 while every tile passes over them. Between chunks a
// tile's raw accumulators wait in scratch (exact), so each element is still one unbroken FMA
// chain over k: chunking changes no bits, and is decided per block.
template <int R>
HWY_INLINE void ChunkRows(DF d, const GemmArgs& g, int64_t i, const float* b, int64_t ldb,
                          int64_t j0, int64_t j1, int64_t pc, int64_t kc, bool first, bool last,
                          float* HWY_RESTRICT part, int64_t ldp) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), nr = 2 * lanes;
  const int64_t ar = g.trans_a ? 1 : g.lda, ak = g.trans_a ? g.lda : 1;
  const float* a = g.a + i * ar + pc * ak;
  const float* bk = b + pc * ldb;
  float* c = g.c + i * g.ldc;
  const Combine combine = FirstCombine(g.beta);
  for (int64_t j = j0; j < j1; j += nr) {
    VF acc[kMR][2];
    float* HWY_RESTRICT pr = part + (j - j0);
    const float* bj = bk + (j - j0);
    if (first) {
      AccumulateTile<R, 2>(d, kc, a, ar, ak, bj, bj + lanes, ldb, acc);
    } else {
      for (int r = 0; r < R; ++r) {
        acc[r][0] = hn::LoadU(d, pr + r * ldp);
        acc[r][1] = hn::LoadU(d, pr + r * ldp + lanes);
      }
      AccumulateTile<R, 2, false>(d, kc, a, ar, ak, bj, bj + lanes, ldb, acc);
    }
    if (last) {
      if (g.bias) {
        StoreTile<true>(d, acc, R, static_cast<size_t>(nr), g.alpha, g.beta, combine, c + j,
                        g.ldc, g.bias + j);
      } else {
        StoreTile(d, acc, R, static_cast<size_t>(nr), g.alpha, g.beta, combine, c + j, g.ldc);
      }
    } else {
      for (int r = 0; r < R; ++r) {
        hn::StoreU(acc[r][0], d, pr + r * ldp);
        hn::StoreU(acc[r][1], d, pr + r * ldp + lanes);
      }
    }
  }
}

// The row tiles of [i, end): 6 rows, except that 7 to 9 remaining rows become two tiles of
// 4 or 5 rows (a 1- to 3-row tile has too few independent FMA chains to hide the FMA
// latency); fn(std::integral_constant<int, R>(), first row) for each. Which tile a row falls
// in does not change how its elements are computed.
template <class Fn>
HWY_INLINE void ForEachRowTile(int64_t i, int64_t end, const Fn& fn) {
  for (; end - i >= kMR + 4 || end - i == kMR; i += kMR) fn(std::integral_constant<int, 6>(), i);
  if (end - i == 9) {
    fn(std::integral_constant<int, 5>(), i);
    i += 5;
  } else if (end - i > kMR) {
    fn(std::integral_constant<int, 4>(), i);
    i += 4;
  }
  switch (end - i) {
    case 5: fn(std::integral_constant<int, 5>(), i); break;
    case 4: fn(std::integral_constant<int, 4>(), i); break;
    case 3: fn(std::integral_constant<int, 3>(), i); break;
    case 2: fn(std::integral_constant<int, 2>(), i); break;
    case 1: fn(std::integral_constant<int, 1>(), i); break;
    default: break;
  }
}

// Whether GemmDirect walks k in chunks for this block (whole 2V-column tiles only).
inline bool DirectChunked(int64_t k, int64_t width, int64_t lanes) {
  return k > 256 && width % (2 * lanes) == 0 && width <= 256;
}

// Kept out of line: inlined, it costs the tiny products' GemmDirect registers and branches.
inline HWY_NOINLINE void GemmDirectChunked(DF d, const GemmArgs& g, const float* b,
                                           int64_t ldb, int64_t i0, int64_t i1, int64_t j0,
                                           int64_t j1) {
  const int64_t width = j1 - j0;
  for (int64_t ic = i0; ic < i1; ic += gemm_detail::kDirectRows) {
    const int64_t ie = std::min(i1, ic + gemm_detail::kDirectRows);
    // A chunk (kc × rows) and B chunk (kc × width) together about 24 KB.
    const int64_t kc = std::max<int64_t>(32, 6144 / (width + (ie - ic)) / 8 * 8);
    float* part = gemm_detail::thread_scratch(0, static_cast<size_t>((ie - ic) * width));
    for (int64_t pc = 0; pc < g.k; pc += kc) {
      const int64_t kn = std::min(kc, g.k - pc);
      const bool first = pc == 0, last = pc + kn >= g.k;
      ForEachRowTile(ic, ie, [&](auto r_tag, int64_t i) {  // the same row tiles as GemmDirect
        ChunkRows<decltype(r_tag)::value>(d, g, i, b, ldb, j0, j1, pc, kn, first, last,
                                          part + (i - ic) * width, width);
      });
    }
  }
}

// Rows [i0, i1) × columns [j0, j1) of a direct block whose op(B) columns are at b.
template <bool kBias>
HWY_INLINE void DirectBlock(DF d, const GemmArgs& g, const float* b, int64_t ldb, int64_t i0,
                            int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t ic = i0; ic < i1; ic += gemm_detail::kDirectRows) {
    const int64_t ie = std::min(i1, ic + gemm_detail::kDirectRows);
    ForEachRowTile(ic, ie, [&](auto r_tag, int64_t i) {
      DirectRows<decltype(r_tag)::value, kBias>(d, g, i, b, ldb, j0, j1);
    });
  }
}

inline void GemmDirect(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const float* b = g.b + j0;
  int64_t ldb = g.ldb;
  if (g.trans_b || (j1 < lanes && !kFastMaskedStore)) {
    // Copy op(B) columns j0..j1 into a k × width row-major panel; without masked loads at
    // least one vector wide (zero-padded in front) so the ragged-tile loads stay inside it.
    const int64_t width = kFastMaskedStore ? j1 - j0 : std::max(j1 - j0, lanes), pad = width - (j1 - j0);
    float* panel = gemm_detail::thread_scratch(1, static_cast<size_t>(g.k * width));
    for (int64_t kk = 0; kk < g.k; ++kk)
      for (int64_t j = 0; j < pad; ++j) panel[kk * width + j] = 0.0f;
    if (g.trans_b) {
      CopyTransposed(d, g.b + j0 * g.ldb, g.ldb, j1 - j0, g.k, panel + pad, width);
    } else {
      for (int64_t kk = 0; kk < g.k; ++kk)
        for (int64_t j = j0; j < j1; ++j) panel[kk * width + pad + j - j0] = g.b[kk * g.ldb + j];
    }
    b = panel + pad;
    ldb = width;
  }
  if (DirectChunked(g.k, j1 - j0, lanes)) {
    GemmDirectChunked(d, g, b, ldb, i0, i1, j0, j1);
    return;
  }
  if (g.bias) {
    DirectBlock<true>(d, g, b, ldb, i0, i1, j0, j1);
  } else {
    DirectBlock<false>(d, g, b, ldb, i0, i1, j0, j1);
  }
}

// ------------------------------------------------------------------ swapped direct path
// A thin C (few columns) with a transposed A: computed as Cᵀ = op(B)ᵀ·op(A)ᵀ, whose "B" rows
// are the rows of A as stored (contiguous over i), so the vectors run along the long side of C
// instead of wasting lanes on its few columns. Each element is still one FMA chain over k in
// increasing order; only the store is transposed. Chosen by shape only (use_swapped_path).

// C[base + l, j + r] for lanes l in [la, lb) of acc[r][v], combined as `combine` says.
template <int R>
HWY_INLINE void StoreSwapped(DF d, const GemmArgs& g, const VF (&acc)[kMR][2], int v,
                             int64_t j, int64_t base, int64_t la, int64_t lb) {
  const Combine combine = FirstCombine(g.beta);
  const bool read = combine != Combine::kOverwrite;
  const VF va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  HWY_ALIGN float tmp[hn::MaxLanes(DF())];
  float* HWY_RESTRICT c = g.c + base * g.ldc + j;
  for (int r = 0; r < R; ++r) {
    VF old = hn::Zero(d);
    if (read) {
      hn::Store(old, d, tmp);
      for (int64_t l = la; l < lb; ++l) tmp[l] = c[l * g.ldc + r];
      old = hn::Load(d, tmp);
    }
    const VF bv = g.bias ? hn::Set(d, g.bias[j + r]) : hn::Zero(d);
    hn::Store(CombineBias(d, acc[r][v], va, vb, old, combine, g.bias != nullptr, bv), d, tmp);
    for (int64_t l = la; l < lb; ++l) c[l * g.ldc + r] = tmp[l];
  }
}

// Rows j..j+R of Cᵀ (columns of C) over the columns of Cᵀ (rows of C) whose "B" vectors start
// at x + (i - i0) (row stride ldx); the tile layout is decided by GemmSwapped.
template <int R>
HWY_INLINE void SwappedTile(DF d, const GemmArgs& g, int64_t j, const float* x, int64_t ldx,
                            int64_t i0, int64_t i, int64_t i1, bool narrow) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), t = i1 - i;
  // op(B)ᵀ(j + r, kk) = op(B)(kk, j + r).
  const int64_t ar = g.trans_b ? g.ldb : 1, ak = g.trans_b ? 1 : g.ldb;
  const float* a = g.b + j * ar;
  VF acc[kMR][2];
  if (t >= 2 * lanes) {
    AccumulateTile<R, 2>(d, g.k, a, ar, ak, x + (i - i0), x + (i - i0) + lanes, ldx, acc);
    StoreSwapped<R>(d, g, acc, 0, j, i, 0, lanes);
    StoreSwapped<R>(d, g, acc, 1, j, i + lanes, 0, lanes);
  } else if (t > lanes) {  // [i, i + V) and [i1 - V, i1), overlapping
    AccumulateTile<R, 2>(d, g.k, a, ar, ak, x + (i - i0), x + (i1 - lanes - i0), ldx, acc);
    StoreSwapped<R>(d, g, acc, 0, j, i, 0, lanes);
    StoreSwapped<R>(d, g, acc, 1, j, i1 - lanes, 2 * lanes - t, lanes);
  } else if (!narrow) {  // [i1 - V, i1), overlapping the previous tile
    AccumulateTile<R, 1>(d, g.k, a, ar, ak, x + (i1 - lanes - i0), nullptr, ldx, acc);
    StoreSwapped<R>(d, g, acc, 0, j, i1 - lanes, lanes - t, lanes);
  } else {  // fewer than V rows in all: x is a zero-padded panel one vector wide
    AccumulateTile<R, 1>(d, g.k, a, ar, ak, x, nullptr, ldx, acc);
    StoreSwapped<R>(d, g, acc, 0, j, i, 0, t);
  }
}

inline void GemmSwapped(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), nr = 2 * lanes;
  // op(A)ᵀ(kk, i) = a[kk·lda + i] (A is transposed).
  const float* x = g.a + i0;
  int64_t ldx = g.lda;
  const bool narrow = i1 - i0 < lanes;
  if (narrow) {
    float* panel = gemm_detail::thread_scratch(1, static_cast<size_t>(g.k * lanes));
    for (int64_t kk = 0; kk < g.k; ++kk) {
      for (int64_t c = 0; c < lanes; ++c) panel[kk * lanes + c] = c < i1 - i0 ? x[kk * g.lda + c] : 0.0f;
    }
    x = panel;
    ldx = lanes;
  }
  for (int64_t i = i0; i < i1; i += nr) {
    int64_t j = j0;
    for (; j + kMR <= j1; j += kMR) SwappedTile<6>(d, g, j, x, ldx, i0, i, i1, narrow);
    switch (j1 - j) {
      case 5: SwappedTile<5>(d, g, j, x, ldx, i0, i, i1, narrow); break;
      case 4: SwappedTile<4>(d, g, j, x, ldx, i0, i, i1, narrow); break;
      case 3: SwappedTile<3>(d, g, j, x, ldx, i0, i, i1, narrow); break;
      case 2: SwappedTile<2>(d, g, j, x, ldx, i0, i, i1, narrow); break;
      case 1: SwappedTile<1>(d, g, j, x, ldx, i0, i, i1, narrow); break;
      default: break;
    }
  }
}

// ------------------------------------------------------------------ dot path
// C with at most 4 columns and a row-major A (the logits of a 2-class head): dot products
// along k, so no lanes are wasted on the missing columns. Each element is the lane-wise FMA
// chains of its dot product over k (k padded with zeros to whole vectors), reduced in the
// target's fixed SumOfLanes order: like the other paths, it depends only on the shape, never
// on the block or slice the element falls in.

template <int R, int NJ>
HWY_INLINE void DotTile(DF d, const GemmArgs& g, int64_t i, int64_t j0, const float* bt,
                        int64_t kv) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const float* a = g.a + i * g.lda;
  VF acc[R][NJ];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NJ; ++j) acc[r][j] = hn::Zero(d);
  int64_t kk = 0;
  for (; kk + lanes <= g.k; kk += lanes) {
    VF av[R];
    for (int r = 0; r < R; ++r) av[r] = hn::LoadU(d, a + r * g.lda + kk);
    for (int j = 0; j < NJ; ++j) {
      const VF bv = hn::Load(d, bt + j * kv + kk);
      for (int r = 0; r < R; ++r) acc[r][j] = hn::MulAdd(av[r], bv, acc[r][j]);
    }
  }
  if (kk < g.k) {  // bt is zero past k, so the zeros LoadFirst puts in A's lanes add nothing
    const size_t tail = static_cast<size_t>(g.k - kk);
    VF av[R];
    for (int r = 0; r < R; ++r) av[r] = LoadFirst(d, a + r * g.lda + kk, tail);
    for (int j = 0; j < NJ; ++j) {
      const VF bv = hn::Load(d, bt + j * kv + kk);
      for (int r = 0; r < R; ++r) acc[r][j] = hn::MulAdd(av[r], bv, acc[r][j]);
    }
  }
  const Combine combine = FirstCombine(g.beta);
  const bool read = combine != Combine::kOverwrite;
  const VF va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  for (int r = 0; r < R; ++r) {
    float* c = g.c + (i + r) * g.ldc + j0;
    for (int j = 0; j < NJ; ++j) {
      const VF old = read ? hn::Set(d, c[j]) : hn::Zero(d);
      const VF bv = g.bias ? hn::Set(d, g.bias[j0 + j]) : hn::Zero(d);
      c[j] = hn::GetLane(CombineBias(d, hn::SumOfLanes(d, acc[r][j]), va, vb, old, combine,
                                     g.bias != nullptr, bv));
    }
  }
}

template <int NJ>
HWY_INLINE void DotColumns(DF d, const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0,
                           const float* bt, int64_t kv) {
  constexpr int kRows = NJ <= 2 ? 4 : 2;  // 8 or fewer accumulators: no spills
  int64_t i = i0;
  for (; i + kRows <= i1; i += kRows) DotTile<kRows, NJ>(d, g, i, j0, bt, kv);
  for (; i < i1; ++i) DotTile<1, NJ>(d, g, i, j0, bt, kv);
}

inline void GemmDot(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t kv = (g.k + lanes - 1) / lanes * lanes;
  // bt[j·kv + kk] = op(B)(kk, j0 + j), zero for k <= kk < kv.
  float* bt = gemm_detail::thread_scratch(1, static_cast<size_t>((j1 - j0) * kv));
  for (int64_t j = j0; j < j1; ++j) {
    float* row = bt + (j - j0) * kv;
    if (g.trans_b) {
      for (int64_t kk = 0; kk < g.k; ++kk) row[kk] = g.b[j * g.ldb + kk];
    } else {
      for (int64_t kk = 0; kk < g.k; ++kk) row[kk] = g.b[kk * g.ldb + j];
    }
    for (int64_t kk = g.k; kk < kv; ++kk) row[kk] = 0.0f;
  }
  switch (j1 - j0) {
    case 1: DotColumns<1>(d, g, i0, i1, j0, bt, kv); break;
    case 2: DotColumns<2>(d, g, i0, i1, j0, bt, kv); break;
    case 3: DotColumns<3>(d, g, i0, i1, j0, bt, kv); break;
    case 4: DotColumns<4>(d, g, i0, i1, j0, bt, kv); break;
    default: break;
  }
}

// ------------------------------------------------------------------ packed path
// BLIS-style: B block (kc × nc) packed in NR-column micro-panels, A block (mc × kc) in MR-row
// micro-panels, both zero-padded so the micro-kernel always runs a full 6 × 2V tile.

// Slack the packed-A scratch needs past mc × kc floats (PackA6x8's last store).
inline constexpr int64_t kPackASlack = 16;

#if ATTNKIT_HAVE_TRANSPOSE8
// dst[kk·6 + r] = src[r·lds + kk] for r < 6, kk < 8: 8 columns of 6 rows of a row-major A
// into an MR-row panel, transposed in 256-bit registers (on AVX-512 too). The 8 stores of 8
// floats go in increasing order, each overwriting the previous one's 2 spare lanes; the last
// writes dst[48, 50), which the caller owns (the next values of the panel, or slack) and
// overwrites later.
HWY_INLINE void PackA6x8(const float* HWY_RESTRICT src, int64_t lds, float* HWY_RESTRICT dst) {
  const hn::Full256<float> d;
  using V8 = hn::Vec<decltype(d)>;
  const hn::Repartition<double, decltype(d)> dd;
  V8 r[8];
  for (int i = 0; i < 6; ++i) r[i] = hn::LoadU(d, src + i * lds);
  r[6] = r[7] = hn::Zero(d);
  V8 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = hn::InterleaveLower(d, r[i], r[i + 1]);
    t[i + 1] = hn::InterleaveUpper(d, r[i], r[i + 1]);
  }
  V8 u[8];
  for (int h = 0; h < 8; h += 4) {
    for (int i = 0; i < 2; ++i) {
      const auto a = hn::BitCast(dd, t[h + i]), b = hn::BitCast(dd, t[h + 2 + i]);
      u[h + 2 * i] = hn::BitCast(d, hn::InterleaveLower(dd, a, b));
      u[h + 2 * i + 1] = hn::BitCast(d, hn::InterleaveUpper(dd, a, b));
    }
  }
  for (int c = 0; c < 4; ++c) hn::StoreU(hn::ConcatLowerLower(d, u[4 + c], u[c]), d, dst + c * kMR);
  for (int c = 0; c < 4; ++c)
    hn::StoreU(hn::ConcatUpperUpper(d, u[4 + c], u[c]), d, dst + (c + 4) * kMR);
}
#endif

// op(A)[i0.., p0..] → mc × kc as MR-row panels, each kc × MR (kk-major). out has room for
// kPackASlack floats past mc × kc.
inline void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                  float* HWY_RESTRICT out) {
  int64_t ip0 = 0;
  if (g.trans_a) {
    // Whole panels of a transposed A (the dW = xᵀ·dy products): row kk of A holds 6
    // consecutive floats of every panel, so each row is read once, in order, and dealt out
    // to the panels (panel by panel, the kc rows' cache lines fell out of L1 between the
    // panels that share them: ~2% of a large model's step).
    // A comes from memory (the step's activations): the rows a few rows ahead are fetched
    // while this one is dealt out.
    constexpr int64_t kAhead = 16;
    ip0 = mc / kMR * kMR;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const float* src = g.a + (p0 + kk) * g.lda + i0;
      if (kk + kAhead < kc)
        for (int64_t l = 0; l < ip0; l += 16) hwy::Prefetch(src + kAhead * g.lda + l);
      for (int64_t ip = 0; ip < ip0; ip += kMR)
        std::memcpy(out + ip * kc + kk * kMR, src + ip, kMR * 4);
    }
  }
  for (int64_t ip = ip0; ip < mc; ip += kMR) {
    const int64_t rows = std::min(kMR, mc - ip);
    float* panel = out + ip * kc;
    if (!g.trans_a && rows == kMR) {
      const float* src = g.a + (i0 + ip) * g.lda + p0;
      // The next panel's rows are fetched while this one is packed (A comes from memory,
      // and 6 rows 1-4 KB apart are more streams than the hardware prefetcher follows).
      int64_t kk = 0;
#if ATTNKIT_HAVE_TRANSPOSE8
      const int64_t next_rows = std::min(kMR, mc - ip - kMR);
      for (; kk + 8 <= kc; kk += 8) {
        if (kk % 16 == 0)
          for (int64_t r = 0; r < next_rows; ++r) hwy::Prefetch(src + (kMR + r) * g.lda + kk);
        PackA6x8(src + kk, g.lda, panel + kk * kMR);
      }
#endif
      for (; kk < kc; ++kk)
        for (int64_t r = 0; r < kMR; ++r) panel[kk * kMR + r] = src[r * g.lda + kk];
      continue;
    }
    if (!g.trans_a) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = g.a + (i0 + ip + r) * g.lda + p0;
        for (int64_t kk = 0; kk < kc; ++kk) panel[kk * kMR + r] = src[kk];
      }
    } else {
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = g.a + (p0 + kk) * g.lda + i0 + ip;
        for (int64_t r = 0; r < rows; ++r) panel[kk * kMR + r] = src[r];
      }
    }
    for (int64_t r = rows; r < kMR; ++r)
      for (int64_t kk = 0; kk < kc; ++kk) panel[kk * kMR + r] = 0.0f;
  }
}

// Rows of a row-major B prefetched ahead of the copy in PackB.
inline constexpr int64_t kPackBAhead = 4;

// Whole NR-column panels of a row-major B (nr = 2 vectors, any lane count) copied row by
// row, each column also added up in row order into colsum (colsum + column, kept in registers
// over the kc rows).
template <int64_t kWhole>
HWY_INLINE void PackBSummed(const GemmArgs& g, int64_t p0, int64_t kc, int64_t nr,
                            const float* src0, float* HWY_RESTRICT panel, float* HWY_RESTRICT colsum) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  VF sum[kWhole][2];
  for (int64_t w = 0; w < kWhole; ++w)
    for (int64_t h = 0; h < 2; ++h) sum[w][h] = hn::LoadU(d, colsum + w * nr + h * lanes);
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* src = src0 + (p0 + kk) * g.ldb;
    if (kk + kPackBAhead < kc)
      for (int64_t w = 0; w < kWhole; ++w) hwy::Prefetch(src + kPackBAhead * g.ldb + w * nr);
    for (int64_t w = 0; w < kWhole; ++w)
      for (int64_t h = 0; h < 2; ++h) {
        const VF v = hn::LoadU(d, src + w * nr + h * lanes);
        hn::StoreU(v, d, panel + w * nr * kc + kk * nr + h * lanes);
        sum[w][h] = hn::Add(sum[w][h], v);
      }
  }
  for (int64_t w = 0; w < kWhole; ++w)
    for (int64_t h = 0; h < 2; ++h) hn::StoreU(sum[w][h], d, colsum + w * nr + h * lanes);
}

// op(B)[p0.., j0..] → kc × nc as NR-column panels, each kc × NR (kk-major). colsum (B not
// transposed; nullptr for none): the nc columns' sums, added to in row order.
inline void PackB(const GemmArgs& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
                  float* HWY_RESTRICT out, float* HWY_RESTRICT colsum = nullptr) {
  // Whole panels copied together, row by row: 256 bytes of each row of B read in order (rows
  // 1 KB apart fall in a few L1 sets when walked panel by panel; more panels at once, kc·nr·4
  // bytes apart, would be as many write streams, often in one L1 set).
  const int64_t at_once = std::clamp<int64_t>(64 / nr, 1, 4);
  for (int64_t jp = 0; jp < nc; jp += nr) {
    const int64_t cols = std::min(nr, nc - jp);
    float* panel = out + jp * kc;
    if (colsum && !g.trans_b && cols == nr) {  // whole panels, summed
      const int64_t whole = std::min(at_once, (nc - jp) / nr);
      const float* src0 = g.b + j0 + jp;
      switch (whole) {
        case 4: PackBSummed<4>(g, p0, kc, nr, src0, panel, colsum + jp); break;
        case 3: PackBSummed<3>(g, p0, kc, nr, src0, panel, colsum + jp); break;
        case 2: PackBSummed<2>(g, p0, kc, nr, src0, panel, colsum + jp); break;
        default: PackBSummed<1>(g, p0, kc, nr, src0, panel, colsum + jp); break;
      }
      jp += (whole - 1) * nr;
      continue;
    }
    if (!g.trans_b && cols == nr) {  // whole panel rows (a fixed-size copy)
      const int64_t whole = std::min(at_once, (nc - jp) / nr);
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = g.b + (p0 + kk) * g.ldb + j0 + jp;
        if (kk + kPackBAhead < kc) {  // a row a few rows ahead (rows may be 1 KB apart)
          for (int64_t w = 0; w < whole; ++w) hwy::Prefetch(src + kPackBAhead * g.ldb + w * nr);
        }
        for (int64_t w = 0; w < whole; ++w)
          std::memcpy(panel + w * nr * kc + kk * nr, src + w * nr, static_cast<size_t>(nr) * 4);
      }
      jp += (whole - 1) * nr;
      continue;
    }
#if ATTNKIT_HAVE_TRANSPOSE8
    if (g.trans_b && cols == nr && kc >= 8) {  // nr / 8 register transposes of 8 × 8
      const float* src = g.b + (j0 + jp) * g.ldb + p0;
      for (int64_t kk = 0;; kk += 8) {
        kk = std::min(kk, kc - 8);  // a ragged last block rewrites the same values
        for (int64_t c = 0; c < nr; c += 8)
          TransposeBlock8x8(src + c * g.ldb + kk, g.ldb, panel + kk * nr + c, nr);
        if (kk + 8 >= kc) break;
      }
      continue;
    }
#endif
    if (!g.trans_b) {
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = g.b + (p0 + kk) * g.ldb + j0 + jp;
        float* dst = panel + kk * nr;
        for (int64_t j = 0; j < cols; ++j) dst[j] = src[j];
        for (int64_t j = cols; j < nr; ++j) dst[j] = 0.0f;
        if (colsum)
          for (int64_t j = 0; j < cols; ++j) colsum[jp + j] += src[j];
      }
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        const float* src = g.b + (j0 + jp + j) * g.ldb + p0;
        for (int64_t kk = 0; kk < kc; ++kk) panel[kk * nr + j] = src[kk];
      }
      for (int64_t kk = 0; kk < kc; ++kk)
        for (int64_t j = cols; j < nr; ++j) panel[kk * nr + j] = 0.0f;
    }
  }
}

// Rows [ic, ic + mc) × panel columns [jr0, jr1) of the block at column jc (nc wide) for the
// k-block pc of depth kc: ap holds the packed A block, bp the packed B block (kc × nc).
// bias: the block's bias when pc is the last k-block, else nullptr. last: pc is the last
// k-block (the epilogue, if any, follows each tile's store).
HWY_INLINE void PackedPanels(DF d, const GemmArgs& g, const float* HWY_RESTRICT ap,
                             const float* HWY_RESTRICT bp, int64_t ic, int64_t mc, int64_t jc,
                             int64_t jr0, int64_t jr1, int64_t nc, int64_t kc, Combine combine,
                             const float* bias, bool last) {
  const bool epilogue = last && g.has_epilogue();
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  VF acc[kMR][2];
  for (int64_t jr = jr0; jr < jr1; jr += nr) {
    const size_t cols = static_cast<size_t>(std::min(nr, nc - jr));
    const float* bpanel = bp + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += kMR) {
      const int64_t rows = std::min(kMR, mc - ir);
      // C rows of a tile are ldc apart; fetch them while the k-loop runs.
      float* ct = g.c + (ic + ir) * g.ldc + jc + jr;
      for (int64_t r = 0; r < rows; ++r) {
        hwy::Prefetch(ct + r * g.ldc);
        hwy::Prefetch(ct + r * g.ldc + nr - 1);
      }
      // So are the epilogue's operands (they lie in memory like C).
      for (const auto& [op, ld] : {std::pair<const float*, int64_t>{g.mask, g.ldm}, {g.addend, g.ld_addend}}) {
        if (!epilogue || !op) continue;
        const float* t = op + (ic + ir) * ld + jc + jr;
        for (int64_t r = 0; r < rows; ++r) {
          hwy::Prefetch(t + r * ld);
          hwy::Prefetch(t + r * ld + nr - 1);
        }
      }
      AccumulateTile<6, 2>(d, kc, ap + ir * kc, 1, kMR, bpanel, bpanel + nr / 2, nr, acc);
      if (epilogue) {
        StoreTileEpilogue(d, g, acc, rows, cols, combine, ct, bias ? bias + jr : nullptr, ic + ir, jc + jr);
      } else if (bias) {
        StoreTile<true>(d, acc, rows, cols, g.alpha, g.beta, combine, ct, g.ldc, bias + jr);
      } else {
        StoreTile(d, acc, rows, cols, g.alpha, g.beta, combine, ct, g.ldc);
      }
    }
  }
}

inline void GemmPacked(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  using gemm_detail::kKC;
  using gemm_detail::kMC;
  using gemm_detail::kNC;
  const DF d;
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t nc_max = std::min(kNC, (j1 - j0 + nr - 1) / nr * nr);
  const int64_t mc_max = std::min(kMC, (i1 - i0 + kMR - 1) / kMR * kMR);
  const int64_t kc_max = std::min(kKC, g.k);
  float* bp = gemm_detail::thread_scratch(1, static_cast<size_t>(kc_max * nc_max));
  float* ap = gemm_detail::thread_scratch(0, static_cast<size_t>(kc_max * mc_max + kPackASlack));
  // Column sums of B by the block holding row 0 (one owner per column whatever the slicing).
  float* colsum = g.colsum && !g.trans_b && i0 == 0 ? g.colsum : nullptr;
  if (colsum && !g.colsum_accumulate) std::fill(colsum + j0, colsum + j1, 0.0f);
  for (int64_t jc = j0; jc < j1; jc += kNC) {
    const int64_t nc = std::min(kNC, j1 - jc);
    for (int64_t pc = 0; pc < g.k; pc += kKC) {
      const int64_t kc = std::min(kKC, g.k - pc);
      const Combine combine = pc == 0 ? FirstCombine(g.beta) : Combine::kAdd;
      const float* bias = g.bias && pc + kc >= g.k ? g.bias + jc : nullptr;  // last k block
      PackB(g, pc, kc, jc, nc, nr, bp, colsum ? colsum + jc : nullptr);
      for (int64_t ic = i0; ic < i1; ic += kMC) {
        const int64_t mc = std::min(kMC, i1 - ic);
        PackA(g, ic, mc, pc, kc, ap);
        PackedPanels(d, g, ap, bp, ic, mc, jc, 0, nc, nc, kc, combine, bias, pc + kc >= g.k);
      }
    }
  }
}

// ------------------------------------------------------------------ short-k path
// Many independent attention products (S = Q·Kᵀ, P·V, dS·K, Pᵀ·dY, dSᵀ·Q: k of 64 or 128,
// A and B rows 1 KB apart in [B, T, H·dh] activations), each called on its own. Packing A
// costs as much as the n / NR column panels that reuse it, and B read in place (or as a
// k × n row-major panel) has its k rows ldb floats apart, 1 KB strides that fall in a few L1
// sets. Here op(B) is packed once per call into NR-column micro-panels of the whole k (each
// contiguous, at most 32 KB in all per column block), A is broadcast in place (either layout),
// and each row tile of C passes over every micro-panel of the block while the next tile's
// rows of A and C are prefetched (with the operands of 128 products passing through, they
// come from L3 or memory: 15-20% of the time without). Every element is one FMA chain over k
// from zero, then StoreTile: the same operations whatever block or slice it falls in.

inline constexpr int64_t kShortKBlockFloats = 8192;  // packed op(B) of one column block: 32 KB

// Rows i..i+R of C over the columns [jc, jc + nc) whose op(B) is packed at bp (k × NR panels);
// the block's rows end at i1.
template <int R, bool kBias>
HWY_INLINE void ShortKRows(DF d, const GemmArgs& g, int64_t i, int64_t i1,
                           const float* HWY_RESTRICT bp, int64_t jc, int64_t nc) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), nr = 2 * lanes;
  const float* a = g.a + i * g.lda;
  int64_t ar = g.lda, ak = 1;
  // op(A)(i + r, kk) = A[kk·lda + i + r] when A is transposed: broadcast in place too (a
  // copy into a small panel per tile cost more than it saved).
  if (g.trans_a) a = g.a + i, ar = 1, ak = g.lda;
  float* c = g.c + i * g.ldc + jc;
  const Combine combine = FirstCombine(g.beta);
  // The next row tile's rows of A and C come from far away (the operands of many products
  // pass through the caches): fetch them while this tile computes, spread over its panels.
  const int64_t next_rows = std::min<int64_t>(kMR, i1 - i - R);
  const int64_t panels = (nc + nr - 1) / nr;
  VF acc[kMR][2];
  for (int64_t jp = 0; jp < nc; jp += nr) {
    if (next_rows > 0) {
      const int64_t w = jp / nr;
      for (int64_t r = 0; r < next_rows; ++r) {
        const float* cn = c + (R + r) * g.ldc + jp;
        hwy::Prefetch(cn);
        hwy::Prefetch(cn + std::min(nr, nc - jp) - 1);
      }
      if (!g.trans_a) {  // rows of k floats: this panel's share of their cache lines
        const int64_t lines = (g.k + 15) / 16, l0 = w * lines / panels, l1 = (w + 1) * lines / panels;
        for (int64_t r = 0; r < next_rows; ++r) {
          const float* an = g.a + (i + R + r) * g.lda;
          for (int64_t l = l0; l < l1; ++l) hwy::Prefetch(an + l * 16);
          if (l1 == lines) hwy::Prefetch(an + g.k - 1);
        }
      } else {  // k rows of next_rows floats
        const int64_t k0 = w * g.k / panels, k1 = (w + 1) * g.k / panels;
        for (int64_t kk = k0; kk < k1; ++kk) {
          const float* an = g.a + kk * g.lda + i + R;
          hwy::Prefetch(an);
          hwy::Prefetch(an + next_rows - 1);
        }
      }
    }
    const float* bpanel = bp + jp * g.k;
    AccumulateTile<R, 2>(d, g.k, a, ar, ak, bpanel, bpanel + lanes, nr, acc);
    const size_t cols = static_cast<size_t>(std::min(nr, nc - jp));
    StoreTile<kBias>(d, acc, R, cols, g.alpha, g.beta, combine, c + jp, g.ldc,
                     kBias ? g.bias + jc + jp : nullptr);
  }
}

template <bool kBias>
HWY_INLINE void ShortKBlock(DF d, const GemmArgs& g, const float* bp, int64_t i0, int64_t i1,
                            int64_t jc, int64_t nc) {
  ForEachRowTile(i0, i1, [&](auto r_tag, int64_t i) {  // the row tiles of DirectBlock
    ShortKRows<decltype(r_tag)::value, kBias>(d, g, i, i1, bp, jc, nc);
  });
}

inline void GemmShortK(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const DF d;
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t ncb = std::max(nr, kShortKBlockFloats / g.k / nr * nr);
  const int64_t nc_max = std::min(ncb, (j1 - j0 + nr - 1) / nr * nr);
  float* bp = gemm_detail::thread_scratch(1, static_cast<size_t>(nc_max * g.k));
  for (int64_t jc = j0; jc < j1; jc += ncb) {
    const int64_t nc = std::min(ncb, j1 - jc);
    PackB(g, 0, g.k, jc, nc, nr, bp);
    if (g.bias) {
      ShortKBlock<true>(d, g, bp, i0, i1, jc, nc);
    } else {
      ShortKBlock<false>(d, g, bp, i0, i1, jc, nc);
    }
  }
}

// ------------------------------------------------------------------ dynamic packed path
// sgemm's own parallel region on the packed path: the threads take (row block, column chunk)
// tasks from a shared counter instead of a fixed share, so a thread slowed down by other work
// on the machine leaves its share to the others (no barrier to wait at either). Tasks run
// chunk by chunk; a thread packs a chunk of op(B) (all of k) when it first takes a task in it
// and keeps it for the chunk's next row blocks. Each task walks the k-blocks in order with the
// same tiles and combines as GemmPacked: every element of C gets the same operations, bitwise.

inline constexpr int64_t kTaskCols = 256;  // columns of a chunk: a KC slab of it is 384 KB

// next: the task counter, 0 on entry, shared by the threads. task_rows: rows of a task, a
// multiple of MR up to MC (a blocking choice only: it changes no bits).
inline void GemmPackedDynamic(const GemmArgs& g, std::atomic<int64_t>* next, int64_t task_rows) {
  using gemm_detail::kKC;
  const int64_t kMC = task_rows;
  const DF d;
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t kc_max = std::min(kKC, g.k);
  const int64_t mc_max = std::min(kMC, (g.m + kMR - 1) / kMR * kMR);
  const int64_t nc_max = std::min(kTaskCols, (g.n + nr - 1) / nr * nr);
  float* ap = gemm_detail::thread_scratch(0, static_cast<size_t>(kc_max * mc_max + kPackASlack));
  // The chunk: KC slab pc at bp + pc·ncp.
  float* bp = gemm_detail::thread_scratch(1, static_cast<size_t>(g.k * nc_max));
  const int64_t row_tasks = (g.m + kMC - 1) / kMC;
  const int64_t col_tasks = (g.n + kTaskCols - 1) / kTaskCols;
  int64_t packed_chunk = -1;
  for (;;) {
    const int64_t t = next->fetch_add(1, std::memory_order_relaxed);
    if (t >= row_tasks * col_tasks) break;
    const int64_t chunk = t / row_tasks, ic = t % row_tasks * kMC, jc = chunk * kTaskCols;
    const int64_t mc = std::min(kMC, g.m - ic), nc = std::min(kTaskCols, g.n - jc);
    const int64_t ncp = (nc + nr - 1) / nr * nr;
    if (chunk != packed_chunk) {
      for (int64_t pc = 0; pc < g.k; pc += kKC) {
        PackB(g, pc, std::min(kKC, g.k - pc), jc, nc, nr, bp + pc * ncp);
      }
      packed_chunk = chunk;
    }
    for (int64_t pc = 0; pc < g.k; pc += kKC) {
      const int64_t kc = std::min(kKC, g.k - pc);
      const Combine combine = pc == 0 ? FirstCombine(g.beta) : Combine::kAdd;
      const float* bias = g.bias && pc + kc >= g.k ? g.bias + jc : nullptr;  // last k block
      PackA(g, ic, mc, pc, kc, ap);
      PackedPanels(d, g, ap, bp + pc * ncp, ic, mc, jc, 0, nc, nc, kc, combine, bias, pc + kc >= g.k);
    }
  }
}

// Row blocks of `rows` rows taken from a shared counter, each on the path the product's
// shape selects (which block a row falls in changes none of its values).
inline void GemmRowsDynamic(const GemmArgs& g, std::atomic<int64_t>* next, int64_t rows);

// C[i0..i1, j0..j1] of product g, on the path the whole product's shape selects.
inline void GemmBlock(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (i0 >= i1 || j0 >= j1) return;
  if (gemm_detail::use_packed_path(g.m, g.n, g.k, g.trans_b)) {
    GemmPacked(g, i0, i1, j0, j1);  // its epilogue runs per tile
    return;
  }
  if (gemm_detail::use_short_k_path(g.m, g.n, g.k)) {
    GemmShortK(g, i0, i1, j0, j1);
  } else if (gemm_detail::use_swapped_path(g.trans_a, g.m, g.n)) {
    GemmSwapped(g, i0, i1, j0, j1);
  } else if (gemm_detail::use_dot_path(g.trans_a, g.n)) {
    GemmDot(g, i0, i1, j0, j1);
  } else {
    GemmDirect(g, i0, i1, j0, j1);
  }
  if (g.has_epilogue()) Epilogue(g, i0, i1, j0, j1);  // the block is this call's, done
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
