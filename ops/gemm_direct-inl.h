// Per-target GEMM paths that do not pack A, included through ops/gemm_kernels-inl.h: the
// direct path (A broadcast in place, B in place or a copied Bᵀ panel), the swapped direct
// path (Cᵀ of a thin C with a transposed A) and the dot path (at most 4 columns).

// Per-target part: toggled include guard, as Highway's foreach_target.h requires.
#if defined(ATTNKIT_OPS_GEMM_DIRECT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_OPS_GEMM_DIRECT_INL_H_
#undef ATTNKIT_OPS_GEMM_DIRECT_INL_H_
#else
#define ATTNKIT_OPS_GEMM_DIRECT_INL_H_
#endif

#include <algorithm>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/gemm_quads-inl.h"  // PackKQuadsOfB, KQuadSums, Columns89Sums (AVX2)
#include "ops/gemm_small-inl.h"  // GemmSmall (AVX-512)
#include "ops/gemm_tile-inl.h"  // DF, VF, GemmArgs, tiles, ForEachRowTile
#include "ops/ops_simd-inl.h"   // TransposeBlock8x8, WithCount

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {

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
#pragma GCC unroll 6
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
#pragma GCC unroll 6
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

// alpha·acc combined with old as CombineBias does, bit for bit: with kAlphaOne (alpha == 1)
// the multiply by alpha is left out (fma(acc, 1, x) = acc + x and acc·1 = acc exactly), so the
// write-back runs on the FP adders instead of the FMA pipes.
template <bool kBias, bool kAlphaOne, class D, class V = hn::Vec<D>>
HWY_INLINE V DirectCombine(D d, V acc, V va, V vb, V old, Combine combine, V bias) {
  if constexpr (!kAlphaOne) {
    return CombineBias(d, acc, va, vb, old, combine, kBias, bias);
  } else {
    V v = acc;
    if (combine == Combine::kAdd) {
      v = hn::Add(acc, old);
    } else if (combine == Combine::kScale) {
      v = hn::Add(acc, hn::Mul(vb, old));
    }
    if constexpr (kBias) v = hn::Add(v, bias);
    return v;
  }
}

// hn::Set(d, *p), the tile's broadcast of one A value. On AVX-512 targets a 256-bit vector
// takes the VEX-encoded vbroadcastss (destination among the first 16 registers): on Zen 4 the
// EVEX form costs more, enough to make a broadcast-per-two-FMAs loop ~15% slower (direct
// product 256×32×32 in 6 × 16 tiles: 80 against 94 GFLOP/s, side by side in one process).
template <class D>
HWY_INLINE hn::Vec<D> DirectBroadcast(D d, const float* HWY_RESTRICT p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && (defined(__GNUC__) || defined(__clang__))
  if constexpr (hn::MaxLanes(D()) == 8) {
    (void)d;
    __m256 v;
    asm("vbroadcastss %1, %0" : "=x"(v) : "m"(*p));
    return hn::Vec<D>{v};
  }
#endif
  return hn::Set(d, *p);
}

// Rows i..i+R, NV whole vectors of D (columns j..j+NV·Lanes(d)) of a direct block: a at row
// i of op(A) (A(r, kk) = a[r·ar + kk·ak]), b at column j of op(B) (row stride ldb), c at
// C[i, j], bias at bias[j]. The accumulators are a one-dimensional local array, so they stay
// in registers (AccumulateTile's array, passed by reference, is partly spilled: one chain
// through memory, every accumulator stored and reloaded before the write-back). The FMA
// chains and the write-back are AccumulateTile's and StoreTile's, element for element. With
// kEpilogue (C overwritten only) g's relu / mask / addend go into the same stores, c being
// C[i, j] (EpilogueLanes: the separate pass's bits).
// Out of line on AVX-512, where short-k products take the small path instead and every whole
// tile here runs k > 16 (Zen 4's short-k products of several vectors too, see GemmDirect):
// inlined into GemmDirect, its epilogue kept 24 C addresses in stack
// slots and the rest of GemmDirect lost registers to it (640 × 32 × 32: 0.89–0.97× → 1.00×
// OpenBLAS on Zen 5). Inline elsewhere: on AVX2 every product's tiles come here, k = 2 too,
// whose tiles a call per tile made 10% slower.
#undef ATTNKIT_DIRECT_TILE_INLINE
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define ATTNKIT_DIRECT_TILE_INLINE HWY_NOINLINE
#else
#define ATTNKIT_DIRECT_TILE_INLINE HWY_INLINE
#endif
// (DirectTileBody is the tile itself, inlined into DirectTileN and into DirectTallTiles' loop.)
template <class D, int R, int NV, bool kBias, bool kAlphaOne, bool kEpilogue = false>
HWY_INLINE void DirectTileBody(D d, const GemmArgs& g, const float* HWY_RESTRICT a, int64_t ar, int64_t ak,
                               const float* HWY_RESTRICT b, int64_t ldb, float* HWY_RESTRICT c,
                               const float* HWY_RESTRICT bias, Combine combine, int64_t i, int64_t j) {
  using V = hn::Vec<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), k = g.k;
  V acc[R * NV];
  // Unrolled whole: a partly unrolled zeroing loop becomes a `rep stos` into a stack copy of
  // the accumulators (g++ 12, 24 of them on AVX3), whose reloads wait for it (~2% of a call).
#pragma GCC unroll 48
  for (int q = 0; q < R * NV; ++q) acc[q] = hn::Zero(d);
  // Row r of the tile at base[r / 3] + (r % 3)·ar: one pointer per 3 rows and one stride
  // (base + stride·1 or ·2 addressing), fewer general-purpose registers in the k loop.
  constexpr int kBases = (R + 2) / 3;
  const float* HWY_RESTRICT base[kBases];
#pragma GCC unroll 4
  for (int q = 0; q < kBases; ++q) base[q] = a + 3 * q * ar;
  // Every caller has k >= 1 (k == 0 only scales C, in ops/gemm.cc): told so, g++ keeps the
  // accumulators in registers instead of merging a zero-trip path's through a stack copy.
  HWY_ASSUME(k >= 1);
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < k; ++kk) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, b + v * lanes);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const V av = DirectBroadcast(d, base[r / 3] + (r % 3) * ar);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r * NV + v] = hn::MulAdd(av, bv[v], acc[r * NV + v]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < kBases; ++q) base[q] += ak;
    b += ldb;
  }
  const V va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  V bb[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) bb[v] = hn::Zero(d);
  if constexpr (kBias) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bb[v] = hn::LoadU(d, bias + v * lanes);
  }
  const int64_t ldc = g.ldc;
  if (combine == Combine::kOverwrite) {  // C is not read; the epilogue's kind a constant per loop
    WithEpilogueKind<kEpilogue>(g, [&](auto kind_tag) ATTNKIT_INLINE_LAMBDA {
      constexpr EpilogueKind kKind = decltype(kind_tag)::value;
      // A ReLU backward's mask (a Linear–ReLU's dx, k = 10: 240 FMAs a tile) read through a
      // restrict pointer found once: its loads need not wait behind the stores of C.
      const int64_t ldm = g.ldm;
      const float* HWY_RESTRICT mask = kKind == EpilogueKind::kMask ? g.mask + i * ldm + j : nullptr;
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          V x = DirectCombine<kBias, kAlphaOne>(d, acc[r * NV + v], va, vb, hn::Zero(d), Combine::kOverwrite, bb[v]);
          if constexpr (kKind == EpilogueKind::kMask) {  // as EpilogueOf's, through the hoisted pointer
            x = KeepWherePositive(d, hn::LoadU(d, mask + r * ldm + v * lanes), x);
          } else {
            x = EpilogueOf<kKind, false>(d, g, x, hn::FirstN(d, 0), i + r, j + v * lanes);
          }
          hn::StoreU(x, d, c + r * ldc + v * lanes);
        }
      }
    });
    return;
  }
  if constexpr (kEpilogue) return;  // (kEpilogue: C is always overwritten, above)
  // One loop per combine, each with its combine a constant (no per-vector choice between
  // results that the compiler could turn into a select).
  auto read_combine = [&](auto combine_tag) {
    constexpr Combine kCombine = decltype(combine_tag)::value;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* p = c + r * ldc + v * lanes;
        hn::StoreU(DirectCombine<kBias, kAlphaOne>(d, acc[r * NV + v], va, vb, hn::LoadU(d, p),
                                                   kCombine, bb[v]),
                   d, p);
      }
    }
  };
  if (combine == Combine::kAdd) {
    read_combine(std::integral_constant<Combine, Combine::kAdd>());
  } else {
    read_combine(std::integral_constant<Combine, Combine::kScale>());
  }
}

template <class D, int R, int NV, bool kBias, bool kAlphaOne, bool kEpilogue = false>
ATTNKIT_DIRECT_TILE_INLINE void DirectTileN(D d, const GemmArgs& g, const float* HWY_RESTRICT a, int64_t ar,
                                            int64_t ak, const float* HWY_RESTRICT b, int64_t ldb,
                                            float* HWY_RESTRICT c, const float* HWY_RESTRICT bias,
                                            Combine combine, int64_t i = 0, int64_t j = 0) {
  DirectTileBody<D, R, NV, kBias, kAlphaOne, kEpilogue>(d, g, a, ar, ak, b, ldb, c, bias, combine, i, j);
}

// Whether the AVX-512 direct path computes its whole tiles with 256-bit vectors (VEX
// broadcasts, 16 columns a tile) instead of 512-bit ones: only when asked for
// (set_gemm_direct_half_tiles(1)). On Zen 4 a 512-bit FMA issues at one per cycle, two 256-bit
// ones per cycle, the same peak, and the 512-bit broadcasts are the slower EVEX form; yet the
// 256-bit tiles, with twice the instructions, were at most ~4% faster with the core to
// themselves and 15–20% slower while another developer's jobs loaded the machine
// (640×32×32, side by side in one process), so 512-bit tiles are the default.
inline bool DirectHalfTiles() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && (defined(__GNUC__) || defined(__clang__))
  return gemm_detail::direct_half_tiles_mode > 0;
#else
  return false;
#endif
}

// Rows i..i+R (R <= kMR) of a direct block; op(B) columns j0..j1 are at b (row stride ldb),
// which reads whole vectors up to V columns before j1 when j1 - j0 < V (not on AVX-512:
// masked loads). Whole 2V-column tiles first (with kHalf, of 256-bit vectors: 16 columns),
// then the ragged rest.
// With kEpilogue: whole tiles only, C overwritten, the epilogue in the tiles' stores (see
// DirectFusesEpilogue).
template <int R, bool kBias, bool kAlphaOne, bool kHalf, bool kEpilogue = false>
HWY_INLINE void DirectRows(DF d, const GemmArgs& g, int64_t i, const float* b, int64_t ldb,
                           int64_t j0, int64_t j1) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), nr = 2 * lanes;
  const int64_t ar = g.trans_a ? 1 : g.lda, ak = g.trans_a ? g.lda : 1;
  const float* a = g.a + i * ar;
  float* c = g.c + i * g.ldc;
  const Combine combine = FirstCombine(g.beta);
  int64_t j = j0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kHalf) {
    const hn::Full256<float> dh;
    constexpr int64_t kHalfCols = 2 * static_cast<int64_t>(hn::MaxLanes(hn::Full256<float>()));
    for (; j + kHalfCols <= j1; j += kHalfCols) {
      DirectTileN<hn::Full256<float>, R, 2, kBias, kAlphaOne>(
          dh, g, a, ar, ak, b + (j - j0), ldb, c + j, kBias ? g.bias + j : nullptr, combine);
    }
  }
#endif
  if constexpr (kEpilogue) {
    for (; j + nr <= j1; j += nr) {
      DirectTileN<DF, R, 2, kBias, kAlphaOne, true>(d, g, a, ar, ak, b + (j - j0), ldb, c + j,
                                                    kBias ? g.bias + j : nullptr, Combine::kOverwrite, i, j);
    }
    return;
  }
  for (; j + nr <= j1; j += nr) {
    DirectTileN<DF, R, 2, kBias, kAlphaOne>(d, g, a, ar, ak, b + (j - j0), ldb, c + j,
                                            kBias ? g.bias + j : nullptr, combine);
  }
  if constexpr (R > kMR) return;  // (taller tiles only where the columns are whole tiles)
  if (j < j1) {
    VF acc[kMR][2];
    const float* bj = b + (j - j0);
    const float* bias = kBias ? g.bias + j : nullptr;
    if constexpr (kFastMaskedStore) {
      DirectTailMasked<R, kBias>(d, g, a, ar, ak, bj, ldb, c + j, j1 - j, bias, acc);
    } else {
      DirectTail<R, kBias>(d, g, a, ar, ak, bj, ldb, c + j, j1 - j, j1 - lanes >= j0, bias,
                           acc);
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
  if (n >= 8 && k >= 8) return TransposeOverlapping8(src, lds, n, k, dst, ldd);
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

// Whether GemmDirect walks k in chunks for this block (whole 2V-column tiles only). Not on
// AVX-512 for one tile of columns over at most three tall row tiles (dW = xᵀ·dy of a
// Linear(32, 32), 32 × 640 × 32): there the tall tiles over the whole k, B read from L2 by
// each, beat the 6-row chunked tiles (0.91× → 1.01× OpenBLAS on Zen 5, bare kernels side by
// side).
inline bool DirectChunked(int64_t k, int64_t width, int64_t lanes, int64_t rows) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (width == 2 * lanes && rows <= 36) return false;
#else
  (void)rows;
#endif
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

#ifndef ATTNKIT_TALL_ROWS
#define ATTNKIT_TALL_ROWS 12
#endif
inline constexpr int kTallRows = ATTNKIT_TALL_ROWS;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Rows [i, i_end) (a multiple of kTallRows) × columns [j0, j1) (whole tiles of 2 vectors) of a
// direct block: DirectRows<kTallRows>' tiles, in the same order, in one out-of-line call whose
// loop inlines them. A call per tile cost its prologue, register copies and epilogue every
// 12 × 32 tile: with k = 10 (Linear(128, 10)'s dx = dy·Wᵀ, 240 FMAs a tile) that was 0.92× the
// same product on AVX2 (Zen 4).
template <bool kBias, bool kAlphaOne, bool kEpilogue>
HWY_NOINLINE void DirectTallTiles(DF d, const GemmArgs& g, const float* b, int64_t ldb, int64_t i, int64_t i_end,
                                  int64_t j0, int64_t j1) {
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t ar = g.trans_a ? 1 : g.lda, ak = g.trans_a ? g.lda : 1;
  const Combine combine = kEpilogue ? Combine::kOverwrite : FirstCombine(g.beta);
  for (; i < i_end; i += kTallRows) {
    const float* a = g.a + i * ar;
    float* c = g.c + i * g.ldc;
    for (int64_t j = j0; j + nr <= j1; j += nr)
      DirectTileBody<DF, kTallRows, 2, kBias, kAlphaOne, kEpilogue>(d, g, a, ar, ak, b + (j - j0), ldb, c + j,
                                                                    kBias ? g.bias + j : nullptr, combine, i, j);
  }
}

// Whether a direct block without an epilogue takes ShortHalfTiles: k <= 16 where 512-bit
// operations issue in halves (Zen 4), columns in whole 16-column tiles. Each tile is short
// there (k = 10: 240 FMAs in a 12 × 32 tile), and the same work in the AVX2 build's 256-bit
// tiles was faster on the same CPU: Linear(128, 10)'s dx = dy·Wᵀ (640 × 128 × 10) was 0.92× the
// AVX2 build, reversal's 256 × 32 × 10 0.96×; these tiles took them to 0.94×, 0.95× the time
// (duplicates' 640 × 64 × 2, k = 2, unchanged). (With a ReLU
// mask in the stores the 512-bit tiles stay: the 256-bit ones take twice the mask's loads,
// compares and selects, 640 × 128 × 10 dx 23.0 against 20.8 us on Zen 4.)
inline bool UseShortHalfTiles(const GemmArgs& g, int64_t j0, int64_t j1) {
  return gemm_detail::avx512_halves && g.k <= 16 && (j1 - j0) % 16 == 0;
}

// Rows [i0, i1) × columns [j0, j1) (whole 16-column tiles) of a direct block in the AVX2
// build's tiles: 6 rows of two 256-bit vectors (VEX broadcasts; 12-row tiles were 11% slower),
// in one out-of-line call whose loops inline them. The same FMA chains and stores as the
// 512-bit tiles: the same bits.
template <bool kBias, bool kAlphaOne>
HWY_NOINLINE void ShortHalfTiles(const GemmArgs& g, const float* b, int64_t ldb, int64_t i0, int64_t i1,
                                 int64_t j0, int64_t j1) {
  using DH = hn::Full256<float>;
  const DH dh;
  constexpr int64_t kCols = 2 * static_cast<int64_t>(hn::MaxLanes(DH()));
  const int64_t ar = g.trans_a ? 1 : g.lda, ak = g.trans_a ? g.lda : 1;
  const Combine combine = FirstCombine(g.beta);
  ForEachRowTile(i0, i1, [&](auto r_tag, int64_t i) {
    constexpr int R = decltype(r_tag)::value;
    const float* a = g.a + i * ar;
    float* c = g.c + i * g.ldc;
    for (int64_t j = j0; j + kCols <= j1; j += kCols)
      DirectTileBody<DH, R, 2, kBias, kAlphaOne>(dh, g, a, ar, ak, b + (j - j0), ldb, c + j,
                                                 kBias ? g.bias + j : nullptr, combine, i, j);
  });
}
#endif

// Rows [i0, i1) × columns [j0, j1) of a direct block whose op(B) columns are at b.
template <bool kBias, bool kAlphaOne, bool kHalf = false, bool kEpilogue = false>
HWY_INLINE void DirectBlock(DF d, const GemmArgs& g, const float* b, int64_t ldb, int64_t i0,
                            int64_t i1, int64_t j0, int64_t j1) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (!kHalf && !kEpilogue) {
    if (UseShortHalfTiles(g, j0, j1)) return ShortHalfTiles<kBias, kAlphaOne>(g, b, ldb, i0, i1, j0, j1);
  }
#endif
  for (int64_t ic = i0; ic < i1; ic += gemm_detail::kDirectRows) {
    const int64_t ie = std::min(i1, ic + gemm_detail::kDirectRows);
    int64_t i = ic;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // 32 vector registers: tiles of 12 rows × 2 vectors (24 accumulators, 14 loads per 24
    // FMAs instead of 8 per 12) where the columns are whole tiles.
    if constexpr (!kHalf) {
      if ((j1 - j0) % (2 * static_cast<int64_t>(hn::Lanes(d))) == 0) {
        if (ie - i >= kTallRows) {
          const int64_t tall_end = i + (ie - i) / kTallRows * kTallRows;
          DirectTallTiles<kBias, kAlphaOne, kEpilogue>(d, g, b, ldb, i, tall_end, j0, j1);
          i = tall_end;
        }
        // 7 to 11 rows left: one tile of them, not two of at most 6 (each another pass over A
        // and B with a broadcast per two FMAs; dW 32 × 256 × 32: 12 + 12 + 4 + 4 rows 0.95×,
        // 12 + 12 + 8 1.02× OpenBLAS on Zen 5).
        if (ie - i > kMR) {
          WithCount<kTallRows - 1>(ie - i, [&](auto r_tag) {
            constexpr int kRows = decltype(r_tag)::value;
            if constexpr (kRows > kMR) DirectRows<kRows, kBias, kAlphaOne, false, kEpilogue>(d, g, i, b, ldb, j0, j1);
          });
          i = ie;
        }
      }
    }
#endif
    ForEachRowTile(i, ie, [&](auto r_tag, int64_t r) {
      DirectRows<decltype(r_tag)::value, kBias, kAlphaOne, kHalf, kEpilogue>(d, g, r, b, ldb, j0, j1);
    });
  }
}

// Whether the direct tiles apply g's epilogue in their stores for columns [j0, j1): whole
// 512-bit tiles only (no ragged tail, no 256-bit tiles) and C overwritten (a Linear's forward
// with a residual addend, x·W + b + r: the separate pass over [640, 128] was 2.5% of
// neighbor-sum's step).
inline bool DirectFusesEpilogue(const GemmArgs& g, int64_t j0, int64_t j1, int64_t lanes) {
  return g.has_epilogue() && g.beta == 0.0f && (j1 - j0) % (2 * lanes) == 0 && !DirectHalfTiles();
}

// DirectBlock with the 256-bit tiles (where DirectHalfTiles) and the alpha == 1 write-back
// chosen here, outside the row-tile lambda (no runtime selects inside it).
template <bool kBias, bool kAlphaOne>
HWY_INLINE void DirectBlockHalf(DF d, const GemmArgs& g, const float* b, int64_t ldb,
                                int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // Not with a transposed A: each k-step of its tile is another cache line of A, read again by
  // every 16-column tile (dW = xᵀ·dy, 32 × 32 × 256: 512-bit tiles 10–25% faster).
  if (!g.trans_a && DirectHalfTiles()) {
    DirectBlock<kBias, kAlphaOne, true>(d, g, b, ldb, i0, i1, j0, j1);
    return;
  }
#endif
  DirectBlock<kBias, kAlphaOne>(d, g, b, ldb, i0, i1, j0, j1);
}

template <bool kBias>
HWY_INLINE void DirectBlockAlpha(DF d, const GemmArgs& g, const float* b, int64_t ldb,
                                 int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (DirectFusesEpilogue(g, j0, j1, static_cast<int64_t>(hn::Lanes(d)))) {
    if (g.alpha == 1.0f) {
      DirectBlock<kBias, true, false, true>(d, g, b, ldb, i0, i1, j0, j1);
    } else {
      DirectBlock<kBias, false, false, true>(d, g, b, ldb, i0, i1, j0, j1);
    }
    return;
  }
  if (g.alpha == 1.0f) {
    DirectBlockHalf<kBias, true>(d, g, b, ldb, i0, i1, j0, j1);
  } else {
    DirectBlockHalf<kBias, false>(d, g, b, ldb, i0, i1, j0, j1);
  }
}

// Returns whether g's epilogue (relu / mask / addend) was applied (in the small path's or the
// whole tiles' stores); else the caller applies it.
inline bool GemmDirect(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
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
#if ATTNKIT_HAVE_SMALL_GEMM
  // Short k (dx = dy·Wᵀ of a narrow layer) or at most one vector of columns: the small path's
  // tiles over all the rows, 10 to 12 rows of C in registers, op(B) read from b (the panel
  // of a transposed B). The same values as DirectBlock's, the bias added in the store as
  // StoreTile adds it (a Linear's head of 10 classes, [640, 128] × [128, 10] + b: 2.6× slower
  // through the direct tiles' tail).
  // The epilogue goes into the same stores (a ReLU's backward mask on dx = dy·Wᵀ of a narrow
  // layer: the separate pass over [640, 128] was 3% of neighbor-sum's step).
  // Not where 512-bit operations issue in halves (Zen 4) with more than one vector of columns:
  // there the direct path's 12 × 2-vector tiles were faster (640 × 128 × 10 dx: 0.93× the time).
  const bool short_k = g.k <= 16 && !(gemm_detail::avx512_halves && j1 - j0 > lanes);
  if (g.k <= 256 && (short_k || j1 - j0 <= lanes)) {
    GemmArgs gs = g;  // columns from j0 (C, bias, mask and addend)
    gs.trans_b = false;
    gs.b = b;
    gs.ldb = ldb;
    gs.c = g.c + j0;
    gs.bias = g.bias ? g.bias + j0 : nullptr;
    gs.mask = g.mask ? g.mask + j0 : nullptr;
    gs.addend = g.addend ? g.addend + j0 : nullptr;
    int64_t j = 0;
    // k <= 16: blocks of four whole vectors (6 rows × 4 vectors of accumulators) where the
    // columns allow: 10 loads per 24 FMAs instead of 12 per 20 (neighbor-sum's dx = dy·Wᵀ of
    // its 10-class head, [640, 10] × [10, 128]).
    if (g.k <= 16)
      for (; j + 4 * lanes <= j1 - j0; j += 4 * lanes) GemmSmall(gs, i0, i1, j, j + 4 * lanes);
    for (; j < j1 - j0; j += 2 * lanes) GemmSmall(gs, i0, i1, j, std::min(j1 - j0, j + 2 * lanes));
    return true;
  }
#endif
  if (DirectChunked(g.k, j1 - j0, lanes, i1 - i0)) {
    GemmDirectChunked(d, g, b, ldb, i0, i1, j0, j1);
    return false;
  }
  if (g.bias) {
    DirectBlockAlpha<true>(d, g, b, ldb, i0, i1, j0, j1);
  } else {
    DirectBlockAlpha<false>(d, g, b, ldb, i0, i1, j0, j1);
  }
  return DirectFusesEpilogue(g, j0, j1, lanes);
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

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// StoreSwapped's values for all 16 lanes of acc[r] (rows base..base+16 of C) when C's rows are
// R = 1 or 2 floats apart (ldc == R: the rows' block is contiguous): R = 1 one vector, R = 2
// the two columns' vectors interleaved by two permutes (duplicates' dW, a 2-class head's:
// 2·16 scalar stores per vector pair were ~3% of the product).
template <int R>
HWY_INLINE void StoreSwappedDense(DF d, const GemmArgs& g, const VF (&acc)[R], int64_t j, int64_t base) {
  static_assert(R == 1 || R == 2, "one or two columns");
  static_assert(hn::MaxLanes(DF()) == 16, "AVX-512 vectors");
  const Combine combine = FirstCombine(g.beta);
  const bool read = combine != Combine::kOverwrite, has_bias = g.bias != nullptr;
  const VF va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  float* HWY_RESTRICT c = g.c + base * R + j;
  if constexpr (R == 1) {
    const VF old = read ? hn::LoadU(d, c) : hn::Zero(d);
    const VF bias = has_bias ? hn::Set(d, g.bias[j]) : hn::Zero(d);
    hn::StoreU(CombineBias(d, acc[0], va, vb, old, combine, has_bias, bias), d, c);
  } else {
    VF old0 = hn::Zero(d), old1 = hn::Zero(d);
    if (read) {  // C's 16 rows as [c0 c1 c0 c1 ...]: even lanes column 0, odd lanes column 1
      const __m512 x0 = _mm512_loadu_ps(c), x1 = _mm512_loadu_ps(c + 16);
      const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
      const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
      old0 = VF{_mm512_permutex2var_ps(x0, even, x1)};
      old1 = VF{_mm512_permutex2var_ps(x0, odd, x1)};
    }
    const VF bias0 = has_bias ? hn::Set(d, g.bias[j]) : hn::Zero(d);
    const VF bias1 = has_bias ? hn::Set(d, g.bias[j + 1]) : hn::Zero(d);
    const __m512 c0 = CombineBias(d, acc[0], va, vb, old0, combine, has_bias, bias0).raw;
    const __m512 c1 = CombineBias(d, acc[1], va, vb, old1, combine, has_bias, bias1).raw;
    // Lane 2l of the first store is c0[l], lane 2l + 1 c1[l]; the second, l + 8.
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    _mm512_storeu_ps(c, _mm512_permutex2var_ps(c0, lo, c1));
    _mm512_storeu_ps(c + 16, _mm512_permutex2var_ps(c0, hi, c1));
  }
}

// SwappedTile over four whole vectors of Cᵀ columns (rows i..i+4V of C) at once: 4·R FMA
// chains instead of 2·R, enough to cover the FMA latency when C has one or two columns
// (R = 1, 2: dW of a 2-class head). The same chains and stores as SwappedTile's.
template <int R>
HWY_INLINE void SwappedTile4(DF d, const GemmArgs& g, int64_t j, const float* x, int64_t ldx,
                             int64_t i0, int64_t i) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t ar = g.trans_b ? g.ldb : 1, ak = g.trans_b ? 1 : g.ldb;
  const float* HWY_RESTRICT a = g.b + j * ar;
  const float* HWY_RESTRICT xb = x + (i - i0);
  VF acc0[R], acc1[R], acc2[R], acc3[R];  // locals: they stay in registers over k
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = acc2[r] = acc3[r] = hn::Zero(d);
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < g.k; ++kk) {
    const float* HWY_RESTRICT xr = xb + kk * ldx;
    const VF x0 = hn::LoadU(d, xr), x1 = hn::LoadU(d, xr + lanes);
    const VF x2 = hn::LoadU(d, xr + 2 * lanes), x3 = hn::LoadU(d, xr + 3 * lanes);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const VF av = hn::Set(d, a[r * ar + kk * ak]);
      acc0[r] = hn::MulAdd(av, x0, acc0[r]);
      acc1[r] = hn::MulAdd(av, x1, acc1[r]);
      acc2[r] = hn::MulAdd(av, x2, acc2[r]);
      acc3[r] = hn::MulAdd(av, x3, acc3[r]);
    }
  }
  if (g.ldc == R) {  // (C's rows contiguous)
    StoreSwappedDense<R>(d, g, acc0, j, i);
    StoreSwappedDense<R>(d, g, acc1, j, i + lanes);
    StoreSwappedDense<R>(d, g, acc2, j, i + 2 * lanes);
    StoreSwappedDense<R>(d, g, acc3, j, i + 3 * lanes);
    return;
  }
  VF lo[kMR][2], hi[kMR][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    lo[r][0] = acc0[r], lo[r][1] = acc1[r];
    hi[r][0] = acc2[r], hi[r][1] = acc3[r];
  }
  StoreSwapped<R>(d, g, lo, 0, j, i, 0, lanes);
  StoreSwapped<R>(d, g, lo, 1, j, i + lanes, 0, lanes);
  StoreSwapped<R>(d, g, hi, 0, j, i + 2 * lanes, 0, lanes);
  StoreSwapped<R>(d, g, hi, 1, j, i + 3 * lanes, 0, lanes);
}
#endif

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
  int64_t i = i0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (j1 - j0 <= 2 && !narrow) {  // one or two columns: four vectors of rows at a time
    for (; i + 2 * nr <= i1; i += 2 * nr) {
      if (j1 - j0 == 2) {
        SwappedTile4<2>(d, g, j0, x, ldx, i0, i);
      } else {
        SwappedTile4<1>(d, g, j0, x, ldx, i0, i);
      }
    }
  }
#endif
  for (; i < i1; i += nr) {
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

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512: the dot products of 16 / NJ rows (all NJ columns) at a time, their 16 accumulators
// reduced together by a tree of ConcatEven / ConcatOdd pair sums (four levels of adjacent-lane
// sums, 15 pair steps in all, instead of 16 separate SumOfLanes). Each accumulator's lanes go
// through the same tree whatever shares the vectors with it, so an element's value depends
// only on the shape (rows past `rows` are zeros, their lanes never stored).
// Lane r·NJ + j of the result holds C[i + r, j0 + j].
HWY_INLINE VF DotPairSum(DF d, VF x, VF y) {
  return hn::Add(hn::ConcatEven(d, y, x), hn::ConcatOdd(d, y, x));
}

template <int NJ>
HWY_INLINE void DotTile16(DF d, const GemmArgs& g, int64_t i, int64_t rows, int64_t j0,
                          const float* bt, int64_t kv, const float* bias_lanes) {
  static_assert(hn::MaxLanes(DF()) == 16, "16 lanes: one tree over 16 accumulators");
  constexpr int R = 16 / NJ;
  const int64_t lanes = 16, lda = g.lda;
  const float* ar[R];
  for (int r = 0; r < R; ++r) ar[r] = g.a + (i + std::min<int64_t>(r, rows - 1)) * lda;
  VF acc[16];
#pragma GCC unroll 16
  for (int q = 0; q < 16; ++q) acc[q] = hn::Zero(d);
  int64_t kk = 0;
  for (; kk + lanes <= g.k; kk += lanes) {
    VF bv[NJ];
#pragma GCC unroll 4
    for (int j = 0; j < NJ; ++j) bv[j] = hn::Load(d, bt + j * kv + kk);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      // The rows two tiles on (A streams from L2: the prefetchers alone leave it waiting).
      hwy::Prefetch(ar[r] + 2 * R * lda + kk);
      VF av = hn::LoadU(d, ar[r] + kk);
      // One load for the NJ FMAs (the compiler would fold it into each of them: NJ loads, and
      // loads are what this loop is short of).
      asm("" : "+v"(av.raw));
#pragma GCC unroll 4
      for (int j = 0; j < NJ; ++j) acc[r * NJ + j] = hn::MulAdd(av, bv[j], acc[r * NJ + j]);
    }
  }
  if (kk < g.k) {  // bt is zero past k, so the zeros of the masked A loads add nothing
    const auto m = hn::FirstN(d, static_cast<size_t>(g.k - kk));
    VF bv[NJ];
#pragma GCC unroll 4
    for (int j = 0; j < NJ; ++j) bv[j] = hn::Load(d, bt + j * kv + kk);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const VF av = hn::MaskedLoad(m, d, ar[r] + kk);
#pragma GCC unroll 4
      for (int j = 0; j < NJ; ++j) acc[r * NJ + j] = hn::MulAdd(av, bv[j], acc[r * NJ + j]);
    }
  }
  VF s8[8], s4[4], s2[2];
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) s8[q] = DotPairSum(d, acc[2 * q], acc[2 * q + 1]);
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) s4[q] = DotPairSum(d, s8[2 * q], s8[2 * q + 1]);
  s2[0] = DotPairSum(d, s4[0], s4[1]);
  s2[1] = DotPairSum(d, s4[2], s4[3]);
  const VF sum = DotPairSum(d, s2[0], s2[1]);
  const size_t count = static_cast<size_t>(rows * NJ);
  const auto mc = hn::FirstN(d, count);
  const Combine combine = FirstCombine(g.beta);
  const bool read = combine != Combine::kOverwrite, has_bias = bias_lanes != nullptr;
  const VF va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  const VF bv = has_bias ? hn::Load(d, bias_lanes) : hn::Zero(d);
  float* c = g.c + i * g.ldc + j0;
  if (g.ldc == NJ) {  // the rows' elements are contiguous
    const VF old = read ? hn::MaskedLoad(mc, d, c) : hn::Zero(d);
    hn::BlendedStore(CombineBias(d, sum, va, vb, old, combine, has_bias, bv), mc, d, c);
    return;
  }
  HWY_ALIGN float buf[16] = {};
  if (read) {
    for (int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < NJ; ++j) buf[r * NJ + j] = c[r * g.ldc + j];
  }
  hn::Store(CombineBias(d, sum, va, vb, hn::Load(d, buf), combine, has_bias, bv), d, buf);
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < NJ; ++j) c[r * g.ldc + j] = buf[r * NJ + j];
}

template <int NJ>
HWY_INLINE void DotColumns16(DF d, const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0,
                             const float* bt, int64_t kv) {
  constexpr int R = 16 / NJ;
  HWY_ALIGN float bias_lanes[16] = {};  // lane r·NJ + j: bias[j0 + j]
  if (g.bias) {
    for (int q = 0; q < R * NJ; ++q) bias_lanes[q] = g.bias[j0 + q % NJ];
  }
  for (int64_t i = i0; i < i1; i += R)
    DotTile16<NJ>(d, g, i, std::min<int64_t>(R, i1 - i), j0, bt, kv,
                  g.bias ? bias_lanes : nullptr);
}
#endif

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
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  switch (j1 - j0) {
    case 1: DotColumns16<1>(d, g, i0, i1, j0, bt, kv); break;
    case 2: DotColumns16<2>(d, g, i0, i1, j0, bt, kv); break;
    case 3: DotColumns16<3>(d, g, i0, i1, j0, bt, kv); break;
    case 4: DotColumns16<4>(d, g, i0, i1, j0, bt, kv); break;
    default: break;
  }
  return;
#endif
  switch (j1 - j0) {
    case 1: DotColumns<1>(d, g, i0, i1, j0, bt, kv); break;
    case 2: DotColumns<2>(d, g, i0, i1, j0, bt, kv); break;
    case 3: DotColumns<3>(d, g, i0, i1, j0, bt, kv); break;
    case 4: DotColumns<4>(d, g, i0, i1, j0, bt, kv); break;
    default: break;
  }
}

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
// A·B of 9 or 10 columns with 32 <= k <= 256 on AVX2 (a 10-class head's forward x·W), in the
// AVX-512 build's k quads (ops/gemm_quads-inl.h; UseKQuadsNN in ops/gemm_small-inl.h): a row's
// four A values of a quad are one 128-bit broadcast load for its five FMAs and every lane works
// (the direct path's 8-lane rows of this product fill 10 of 16 lanes). B is packed once per
// block. Two rows a tile: 10 accumulators, 5 B vectors and the broadcast in AVX2's 16
// registers. Chosen on the whole product's shape, so every block and slice sums the same way.
inline bool UseKQuadsNNAvx2(const GemmArgs& g) {
  return !g.trans_a && !g.trans_b && g.n >= 9 && g.n <= 10 && g.k >= kKQuadsMinK && g.k <= kKQuadsMaxK;
}

// Rows i..i + R of the product from PackKQuadsOfB's packed (a at A's row i, c at C's row i,
// column 0), stored through DirectCombine (alpha, beta, bias; no epilogue).
template <int R, bool kTwo, bool kBias, bool kAlphaOne, Combine kCombine>
HWY_INLINE void KQuadTileAvx2(const GemmArgs& g, const float* HWY_RESTRICT packed, const float* HWY_RESTRICT a,
                              float* HWY_RESTRICT c) {
  using D8 = hn::Full256<float>;
  using DT = std::conditional_t<kTwo, hn::Full64<float>, hn::Full32<float>>;
  const D8 d8;
  const DT dt;
  __m256 row8[R], col89[R], sums[(R + 3) / 4];
  KQuadSums<R>(packed, a, g.lda, g.k, row8, col89);
  Columns89Sums<R>(col89, sums);
  const auto va8 = hn::Set(d8, g.alpha), vb8 = hn::Set(d8, g.beta);
  const auto vat = hn::Set(dt, g.alpha), vbt = hn::Set(dt, g.beta);
  const auto bias8 = kBias ? hn::LoadU(d8, g.bias) : hn::Zero(d8);
  const auto biast = kBias ? hn::LoadU(dt, g.bias + 8) : hn::Zero(dt);
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    const hn::Vec<DT> tail{Columns89OfRow<R>(sums, r)};
    float* HWY_RESTRICT cr = c + r * g.ldc;
    const auto old8 = kCombine == Combine::kOverwrite ? hn::Zero(d8) : hn::LoadU(d8, cr);
    const auto oldt = kCombine == Combine::kOverwrite ? hn::Zero(dt) : hn::LoadU(dt, cr + 8);
    hn::StoreU(DirectCombine<kBias, kAlphaOne>(d8, hn::Vec<D8>{row8[r]}, va8, vb8, old8, kCombine, bias8), d8, cr);
    hn::StoreU(DirectCombine<kBias, kAlphaOne>(dt, tail, vat, vbt, oldt, kCombine, biast), dt, cr + 8);
  }
}

// Rows [i0, i1) of one product (all its 9 or 10 columns), see UseKQuadsNNAvx2.
HWY_NOINLINE inline void KQuadRowsNNAvx2(const GemmArgs& g, int64_t i0, int64_t i1) {
  alignas(32) float packed[kKQuadsPacked];
  WithFlag(g.n == 10, [&](auto two) {
    constexpr bool kTwo = decltype(two)::value;
    PackKQuadsOfB<kTwo>(g.b, g.ldb, g.k, packed);
    WithFlag(g.bias != nullptr, [&](auto bias) {
      WithFlag(g.alpha == 1.0f, [&](auto alpha_one) {
        const auto rows = [&](auto combine_tag) {
          constexpr Combine kC = decltype(combine_tag)::value;
          constexpr bool kBias = decltype(bias)::value;
          constexpr bool kAlphaOne = decltype(alpha_one)::value;
          int64_t i = i0;
          for (; i + 2 <= i1; i += 2)
            KQuadTileAvx2<2, kTwo, kBias, kAlphaOne, kC>(g, packed, g.a + i * g.lda, g.c + i * g.ldc);
          if (i < i1) KQuadTileAvx2<1, kTwo, kBias, kAlphaOne, kC>(g, packed, g.a + i * g.lda, g.c + i * g.ldc);
        };
        switch (FirstCombine(g.beta)) {
          case Combine::kOverwrite: return rows(std::integral_constant<Combine, Combine::kOverwrite>());
          case Combine::kAdd: return rows(std::integral_constant<Combine, Combine::kAdd>());
          default: return rows(std::integral_constant<Combine, Combine::kScale>());
        }
      });
    });
  });
}
#endif

}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_OPS_GEMM_DIRECT_INL_H_
