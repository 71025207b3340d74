// Per-target GEMM kernels, included once per Highway target by ops/gemm.cc.
//
// Every element of C is one FMA chain over k in increasing order, split only at fixed KC
// boundaries (packed path), then C = alpha·acc + beta·C. The tile an element falls in and the
// slice that computes it never change that chain, which is what makes results bitwise
// independent of the thread count.

// Target-independent declarations (normal include guard).
#ifndef ATTNKIT_OPS_GEMM_KERNELS_SHARED_H_
#define ATTNKIT_OPS_GEMM_KERNELS_SHARED_H_
#include <cstddef>
#include <cstdint>

namespace attnkit::gemm_detail {

// One product C = alpha·op(A)·op(B) + beta·C; the kernels compute a sub-block of it.
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
};

// Per-thread grow-only 64-byte-aligned scratch; slot 0 holds packed A, slot 1 packed B.
float* thread_scratch(int slot, size_t floats);

// Blocking of the packed path. KC is fixed for every target and thread count: it decides
// where the k-sum is split, so it must not depend on anything but the shape.
inline constexpr int64_t kMR = 6;     // rows of the micro-tile
inline constexpr int64_t kKC = 256;   // k-depth of packed panels: B micro-panel 16 KB in L1
inline constexpr int64_t kMC = 144;   // rows of an A block: 144 KB in L2
inline constexpr int64_t kNC = 2048;  // columns of a B block: 2 MB in L3
// Rows of A kept hot in the direct path while all column tiles pass over them.
inline constexpr int64_t kDirectRows = 96;

// The direct (no packing of A) path wins for the thin shapes of small attention models;
// deep or wide products go through the packed, cache-blocked path.
inline bool use_packed_path(int64_t m, int64_t n, int64_t k) {
  return k > 256 || (n > 512 && m > 64) || (k > 128 && n > 256 && m > 256);
}

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

#include "hwy/highway.h"

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

// Accumulates an R × (2 vectors) tile of A·B over k into acc. A(r, kk) = a[r·ar + kk·ak];
// B(kk, 0..2V) = b[kk·ldb ...]; with kMaskB only the first `cols` columns of B are read.
template <int R, bool kMaskB>
HWY_INLINE void AccumulateTile(DF d, int64_t k, const float* HWY_RESTRICT a, int64_t ar,
                               int64_t ak, const float* HWY_RESTRICT b, int64_t ldb,
                               size_t cols, VF (&acc)[kMR][2]) {
  const size_t lanes = hn::Lanes(d);
  const auto m0 = hn::FirstN(d, std::min(cols, lanes));
  const auto m1 = hn::FirstN(d, cols > lanes ? cols - lanes : 0);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = hn::Zero(d);
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* HWY_RESTRICT bk = b + kk * ldb;
    const VF b0 = kMaskB ? hn::MaskedLoad(m0, d, bk) : hn::LoadU(d, bk);
    const VF b1 = kMaskB ? hn::MaskedLoad(m1, d, bk + lanes) : hn::LoadU(d, bk + lanes);
    const float* HWY_RESTRICT ak_ptr = a + kk * ak;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const VF av = hn::Set(d, ak_ptr[r * ar]);
      acc[r][0] = hn::MulAdd(av, b0, acc[r][0]);
      acc[r][1] = hn::MulAdd(av, b1, acc[r][1]);
    }
  }
}

// C tile (rows × cols, cols <= 2V) = alpha·acc combined with C as `combine` says.
HWY_INLINE VF CombineVec(DF d, VF acc, VF alpha, VF beta, VF old, Combine combine) {
  if (combine == Combine::kOverwrite) return hn::Mul(acc, alpha);
  if (combine == Combine::kAdd) return hn::MulAdd(acc, alpha, old);
  return hn::MulAdd(acc, alpha, hn::Mul(beta, old));
}

HWY_INLINE void StoreTile(DF d, const VF (&acc)[kMR][2], int64_t rows, size_t cols, float alpha,
                          float beta, Combine combine, float* HWY_RESTRICT c, int64_t ldc) {
  const size_t lanes = hn::Lanes(d);
  const VF va = hn::Set(d, alpha), vb = hn::Set(d, beta);
  const bool read = combine != Combine::kOverwrite;
  if (cols == 2 * lanes) {
    for (int64_t r = 0; r < rows; ++r) {
      float* cr = c + r * ldc;
      const VF o0 = read ? hn::LoadU(d, cr) : hn::Zero(d);
      const VF o1 = read ? hn::LoadU(d, cr + lanes) : hn::Zero(d);
      hn::StoreU(CombineVec(d, acc[r][0], va, vb, o0, combine), d, cr);
      hn::StoreU(CombineVec(d, acc[r][1], va, vb, o1, combine), d, cr + lanes);
    }
    return;
  }
  const size_t cols0 = std::min(cols, lanes), cols1 = cols > lanes ? cols - lanes : 0;
  const auto m0 = hn::FirstN(d, cols0);
  const auto m1 = hn::FirstN(d, cols1);
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    const VF o0 = read ? LoadFirst(d, cr, cols0) : hn::Zero(d);
    hn::BlendedStore(CombineVec(d, acc[r][0], va, vb, o0, combine), m0, d, cr);
    if (cols1 > 0) {
      const VF o1 = read ? LoadFirst(d, cr + lanes, cols1) : hn::Zero(d);
      hn::BlendedStore(CombineVec(d, acc[r][1], va, vb, o1, combine), m1, d, cr + lanes);
    }
  }
}

inline Combine FirstCombine(float beta) {
  return beta == 0.0f ? Combine::kOverwrite : beta == 1.0f ? Combine::kAdd : Combine::kScale;
}

// ------------------------------------------------------------------ direct path
// No packing of A: the kernel broadcasts A straight from memory (either layout). B is read in
// place when row-major; Bᵀ is first copied into a small zero-padded panel in thread scratch.

// Where the direct kernel reads op(B) columns j0..j1: whole 2V-wide tiles from `main`
// (row stride ld_main), the ragged last tile from `tail` (row stride ld_tail), which is either
// B itself (masked loads) or a zero-padded copy in scratch.
struct DirectB {
  const float* main;
  int64_t ld_main;
  const float* tail;
  int64_t ld_tail;
  bool mask_tail;
};

template <int R>
HWY_INLINE void DirectRows(DF d, const GemmArgs& g, int64_t i, const DirectB& b, int64_t j0,
                           int64_t j1) {
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t ar = g.trans_a ? 1 : g.lda, ak = g.trans_a ? g.lda : 1;
  const float* a = g.a + i * ar;
  const Combine combine = FirstCombine(g.beta);
  VF acc[kMR][2];
  int64_t j = j0;
  for (; j + nr <= j1; j += nr) {
    AccumulateTile<R, false>(d, g.k, a, ar, ak, b.main + (j - j0), b.ld_main, nr, acc);
    StoreTile(d, acc, R, nr, g.alpha, g.beta, combine, g.c + i * g.ldc + j, g.ldc);
  }
  if (j < j1) {
    const size_t cols = static_cast<size_t>(j1 - j);
    if (b.mask_tail) {
      AccumulateTile<R, true>(d, g.k, a, ar, ak, b.tail, b.ld_tail, cols, acc);
    } else {
      AccumulateTile<R, false>(d, g.k, a, ar, ak, b.tail, b.ld_tail, cols, acc);
    }
    StoreTile(d, acc, R, cols, g.alpha, g.beta, combine, g.c + i * g.ldc + j, g.ldc);
  }
}

inline void GemmDirect(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const DF d;
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t tail_begin = j0 + (j1 - j0) / nr * nr;
  DirectB b{g.b + j0, g.ldb, g.b + tail_begin, g.ldb, kFaultFreeMaskedLoad};
  if (g.trans_b) {
    // Bᵀ columns j0..j1 as a k × width row-major panel, zero-padded to whole tiles.
    const int64_t width = (j1 - j0 + nr - 1) / nr * nr;
    float* panel = gemm_detail::thread_scratch(1, static_cast<size_t>(g.k * width));
    for (int64_t kk = 0; kk < g.k; ++kk) {
      float* row = panel + kk * width;
      for (int64_t j = j0; j < j1; ++j) row[j - j0] = g.b[j * g.ldb + kk];
      for (int64_t j = j1 - j0; j < width; ++j) row[j] = 0.0f;
    }
    b = {panel, width, panel + (tail_begin - j0), width, false};
  } else if (tail_begin < j1 && !kFaultFreeMaskedLoad) {
    // The ragged columns as a k × NR zero-padded panel, so no load runs past B.
    float* panel = gemm_detail::thread_scratch(1, static_cast<size_t>(g.k * nr));
    for (int64_t kk = 0; kk < g.k; ++kk) {
      const float* src = g.b + kk * g.ldb;
      float* row = panel + kk * nr;
      for (int64_t j = tail_begin; j < j1; ++j) row[j - tail_begin] = src[j];
      for (int64_t j = j1 - tail_begin; j < nr; ++j) row[j] = 0.0f;
    }
    b.tail = panel;
    b.ld_tail = nr;
  }
  for (int64_t ic = i0; ic < i1; ic += gemm_detail::kDirectRows) {
    const int64_t ie = std::min(i1, ic + gemm_detail::kDirectRows);
    int64_t i = ic;
    for (; i + kMR <= ie; i += kMR) DirectRows<6>(d, g, i, b, j0, j1);
    switch (ie - i) {
      case 5: DirectRows<5>(d, g, i, b, j0, j1); break;
      case 4: DirectRows<4>(d, g, i, b, j0, j1); break;
      case 3: DirectRows<3>(d, g, i, b, j0, j1); break;
      case 2: DirectRows<2>(d, g, i, b, j0, j1); break;
      case 1: DirectRows<1>(d, g, i, b, j0, j1); break;
      default: break;
    }
  }
}

// ------------------------------------------------------------------ packed path
// BLIS-style: B block (kc × nc) packed in NR-column micro-panels, A block (mc × kc) in MR-row
// micro-panels, both zero-padded so the micro-kernel always runs a full 6 × 2V tile.

// op(A)[i0.., p0..] → mc × kc as MR-row panels, each kc × MR (kk-major).
inline void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                  float* HWY_RESTRICT out) {
  for (int64_t ip = 0; ip < mc; ip += kMR) {
    const int64_t rows = std::min(kMR, mc - ip);
    float* panel = out + ip * kc;
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

// op(B)[p0.., j0..] → kc × nc as NR-column panels, each kc × NR (kk-major).
inline void PackB(const GemmArgs& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
                  float* HWY_RESTRICT out) {
  for (int64_t jp = 0; jp < nc; jp += nr) {
    const int64_t cols = std::min(nr, nc - jp);
    float* panel = out + jp * kc;
    if (!g.trans_b) {
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = g.b + (p0 + kk) * g.ldb + j0 + jp;
        float* dst = panel + kk * nr;
        for (int64_t j = 0; j < cols; ++j) dst[j] = src[j];
        for (int64_t j = cols; j < nr; ++j) dst[j] = 0.0f;
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
  float* ap = gemm_detail::thread_scratch(0, static_cast<size_t>(kc_max * mc_max));
  VF acc[kMR][2];
  for (int64_t jc = j0; jc < j1; jc += kNC) {
    const int64_t nc = std::min(kNC, j1 - jc);
    for (int64_t pc = 0; pc < g.k; pc += kKC) {
      const int64_t kc = std::min(kKC, g.k - pc);
      const Combine combine = pc == 0 ? FirstCombine(g.beta) : Combine::kAdd;
      PackB(g, pc, kc, jc, nc, nr, bp);
      for (int64_t ic = i0; ic < i1; ic += kMC) {
        const int64_t mc = std::min(kMC, i1 - ic);
        PackA(g, ic, mc, pc, kc, ap);
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const size_t cols = static_cast<size_t>(std::min(nr, nc - jr));
          const float* bpanel = bp + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const int64_t rows = std::min(kMR, mc - ir);
            AccumulateTile<6, false>(d, kc, ap + ir * kc, 1, kMR, bpanel, nr, cols, acc);
            StoreTile(d, acc, rows, cols, g.alpha, g.beta, combine,
                      g.c + (ic + ir) * g.ldc + jc + jr, g.ldc);
          }
        }
      }
    }
  }
}

// C[i0..i1, j0..j1] of product g, on the path the whole product's shape selects.
inline void GemmBlock(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (i0 >= i1 || j0 >= j1) return;
  if (gemm_detail::use_packed_path(g.m, g.n, g.k)) {
    GemmPacked(g, i0, i1, j0, j1);
  } else {
    GemmDirect(g, i0, i1, j0, j1);
  }
}

}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_OPS_GEMM_KERNELS_INL_H_
