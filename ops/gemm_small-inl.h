// Per-target small-product path, included through ops/gemm_kernels-inl.h: products whose
// C block is at most a few rows by at most two vectors (the attention products of the lesson
// models, T × T × dh and T × dh × T at T <= 16, dh <= 32), computed with the whole row tile of
// C in registers, the ragged last vector under lane masks, and op(B) of a transposed B
// transposed 8 k-steps at a time in registers (no panel in memory). AVX-512 only (masked loads
// and stores are single fast instructions there); the other targets keep the direct path.
//
// Each element is the same FMA chain over k in increasing order, from zero, and the same
// write-back (CombineVec) as the direct path's, so the values are bitwise the direct path's:
// which of the two computes a block never changes a bit. The two pairs paths (UsePairsNT,
// UsePairsNN) and the two quads paths (UseQuadsNN, UseQuadsNT) sum in their own orders instead,
// and so are chosen for a whole product by its shape alone, never for a block.

// Per-target part: toggled include guard, as Highway's foreach_target.h requires.
#if defined(ATTNKIT_OPS_GEMM_SMALL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_OPS_GEMM_SMALL_INL_H_
#undef ATTNKIT_OPS_GEMM_SMALL_INL_H_
#else
#define ATTNKIT_OPS_GEMM_SMALL_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"
#include "ops/gemm_quads-inl.h"  // Columns89QuadOfB, Columns89Sums, PackKQuadsOfB, KQuadSums
#include "ops/gemm_tile-inl.h"   // DF, VF, GemmArgs, CombineVec, FirstCombine
#include "ops/ops_simd-inl.h"   // Transpose8x8, WithCount

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {

#undef ATTNKIT_HAVE_SMALL_GEMM  // this file is included once per target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && ATTNKIT_HAVE_TRANSPOSE8
#define ATTNKIT_HAVE_SMALL_GEMM 1
#else
#define ATTNKIT_HAVE_SMALL_GEMM 0
#endif

// Most rows of C one small tile holds: R rows × NV vectors of accumulators stay in registers.
inline constexpr int64_t kSmallRows1 = 12;  // one vector per row
inline constexpr int64_t kSmallRows2 = 10;  // two vectors per row
inline constexpr int64_t kSmallRows4 = 6;   // four vectors per row (short k: see GemmDirect)

#if ATTNKIT_HAVE_SMALL_GEMM

// Whether the small path computes block [i0, i1) × [j0, j1) of g: at most 24 rows, at most two
// full vectors of columns (one when B is transposed), a bias and an epilogue only with B not
// transposed (both then go into the tiles' stores).
HWY_INLINE bool UseSmallPath(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t cols = j1 - j0;
  return (!g.trans_b || (g.bias == nullptr && !g.has_epilogue())) && i1 - i0 <= 24 && cols >= 5 &&
         g.k <= 256 && cols <= (g.trans_b ? lanes : 2 * lanes);
}

// FirstCombine, and kCopy for alpha = 1 with C not read (the attention products').
inline Combine SmallCombine(const GemmArgs& g) {
  return g.beta == 0.0f && g.alpha == 1.0f ? Combine::kCopy : FirstCombine(g.beta);
}

// Calls f(std::integral_constant<Combine, combine>()): a tile's stores with their combine a
// constant, one loop per combine (no branch between the stores, no choice between vectors).
template <class F>
HWY_INLINE void WithCombine(Combine combine, const F& f) {
  switch (combine) {
    case Combine::kCopy:
      f(std::integral_constant<Combine, Combine::kCopy>());
      return;
    case Combine::kOverwrite:
      f(std::integral_constant<Combine, Combine::kOverwrite>());
      return;
    case Combine::kAdd:
      f(std::integral_constant<Combine, Combine::kAdd>());
      return;
    case Combine::kScale:
      f(std::integral_constant<Combine, Combine::kScale>());
      return;
  }
}

// f(combine_tag, kind_tag): a tile's stores with their combine (WithCombine) and, with
// kEpilogue, their epilogue's kind (WithEpilogueKind) constants: one loop per pair.
template <bool kEpilogue, class F>
HWY_INLINE void WithStores(Combine combine, const GemmArgs& g, const F& f) {
  WithCombine(combine, [&](auto combine_tag) ATTNKIT_INLINE_LAMBDA {
    WithEpilogueKind<kEpilogue>(g, [&](auto kind_tag) ATTNKIT_INLINE_LAMBDA { f(combine_tag, kind_tag); });
  });
}

// p[lanes of m] = alpha·acc combined with C as CombineVec does (the direct path's write-back,
// lane for lane), with kBias + bias as CombineBias rounds it, with g's epilogue of kind kKind for
// row i and columns from j (EpilogueOf); every lane when !kMasked. The vectors come by
// value: an accumulator array whose address a store helper took would be spilled to the stack
// on every k step.
template <bool kMasked, bool kBias, EpilogueKind kKind, class D>
HWY_INLINE void SmallStoreVec(D d, hn::Vec<D> acc, hn::Vec<D> va, hn::Vec<D> vb, Combine combine,
                              hn::Mask<D> m, hn::Vec<D> bias, const GemmArgs& g, int64_t i, int64_t j,
                              float* HWY_RESTRICT p) {
  hn::Vec<D> v;
  if (combine == Combine::kOverwrite) {  // C is not read
    v = kBias ? hn::MulAdd(acc, va, bias) : hn::Mul(acc, va);
  } else if (combine == Combine::kCopy) {  // alpha = 1, C not read: the same bits without the
    v = kBias ? hn::Add(acc, bias) : acc;  // multiply (fma(acc, 1, bias) rounds acc + bias once)
  } else {
    const hn::Vec<D> old = LoadLanes<kMasked>(d, m, p);
    v = combine == Combine::kAdd ? hn::MulAdd(acc, va, old) : hn::MulAdd(acc, va, hn::Mul(vb, old));
    if constexpr (kBias) v = hn::Add(v, bias);
  }
  v = EpilogueOf<kKind, kMasked>(d, g, v, m, i, j);
  if constexpr (kMasked) {
    hn::BlendedStore(v, m, d, p);
  } else {
    hn::StoreU(v, d, p);
  }
}

// Floats of C (rows · ldc) from which a C the tiles read is prefetched (see PrefetchC).
inline constexpr int64_t kPrefetchCFloats = 4096;

// Whether a tile asks for its lines of C before the k loop, so that they arrive during it: C is
// read (beta != 0) and too large to stay in L1 between calls (a Linear's dx accumulated into,
// 640 × 128 from k = 10: the loads of C after the loop stalled the stores, a third of the
// time). Not for small C (the attention's dS·K with beta 1): L1's, the prefetches only cost.
inline bool PrefetchC(const GemmArgs& g, Combine combine) {
  return (combine == Combine::kAdd || combine == Combine::kScale) && g.m * g.ldc >= kPrefetchCFloats;
}

// What one row tile of one product reads: A at its first row (A(r, kk) = a[r·lda + kk],
// a[kk·lda + r] when A is transposed), B and C at column j (C at row i), the combine of
// alpha·acc with C. Two sources with the same accessors (see SmallTileSpanNN):
// CallOperands, a per-call product's, reads each from g where the tile uses it: what the
// stores need is read after the k loop (held in registers over it, it pushed the row offsets
// of a 12-row tile to the stack: Linear(128, 10)'s forward 1.15× → 0.98× OpenBLAS);
// BatchOperands, a batch's, holds them in locals stepped product to product, which stores of C
// cannot alias (read through g, they were reloaded after every product's stores).
template <bool kTransA>
struct CallOperands {
  const GemmArgs& g;
  int64_t i, j;
  const float* a() const { return g.a + (kTransA ? i : i * g.lda); }
  const float* b() const { return g.b + j; }
  float* c() const { return g.c + i * g.ldc + j; }
  int64_t lda() const { return g.lda; }
  int64_t ldb() const { return g.ldb; }
  int64_t ldc() const { return g.ldc; }
  int64_t k() const { return g.k; }
  float alpha() const { return g.alpha; }
  float beta() const { return g.beta; }
  Combine combine() const { return SmallCombine(g); }
  // SmallTileSpanNN gives a product whose C is prefetched BatchOperands instead.
  static constexpr bool prefetch_c() { return false; }
};

struct BatchOperands {
  const float* pa;
  const float* pb;
  float* pc;
  int64_t lda_, ldb_, ldc_, k_;
  float alpha_, beta_;
  Combine combine_;
  bool prefetch_c_;
  const float* a() const { return pa; }
  const float* b() const { return pb; }
  float* c() const { return pc; }
  int64_t lda() const { return lda_; }
  int64_t ldb() const { return ldb_; }
  int64_t ldc() const { return ldc_; }
  int64_t k() const { return k_; }
  float alpha() const { return alpha_; }
  float beta() const { return beta_; }
  Combine combine() const { return combine_; }
  bool prefetch_c() const { return prefetch_c_; }
};

// A(r, ·) of a tile's row r at the current k, A not transposed: a's rows, or for r >= 6 a6's,
// the base 6 rows further (see SmallTileNN).
template <int R>
HWY_INLINE float ATileValue(const float* HWY_RESTRICT a, const float* HWY_RESTRICT a6, int64_t lda, int r) {
  return R > 6 && r >= 6 ? a6[(r - 6) * lda] : a[r * lda];
}

// The address of A(r, ·) at the current k, as ATileValue reads it.
template <int R>
HWY_INLINE const float* ATileRow(const float* HWY_RESTRICT a, const float* HWY_RESTRICT a6, int64_t lda, int r) {
  return R > 6 && r >= 6 ? a6 + (r - 6) * lda : a + r * lda;
}

// Rows i..i+R, columns j..j+cols (cols <= NV·Lanes(d), the last vector partial) of C, op(B) in
// place (B not transposed): row kk of op(B) at b + kk·ldb.
// kFull: cols == NV·Lanes(d), every vector stored whole (a masked store of a full mask costs
// several times a plain one on Zen 4). kBias: g.bias[j..] is added to every row (a Linear's);
// kEpilogue: g's relu / mask / addend in the same store (a Linear–ReLU's backward dx).
template <class D, int R, int NV, bool kTransA, bool kFull, bool kBias, bool kEpilogue, class Operands>
HWY_INLINE void SmallTileNN(D d, const GemmArgs& g, const Operands& o, int64_t i, int64_t j, int64_t cols) {
  static_assert(NV == 1 || NV == 2 || NV == 4, "one, two or four vectors per row");
  using V = hn::Vec<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t lda = o.lda(), ldb = o.ldb(), k = o.k();
  const float* HWY_RESTRICT a = o.a();
  const float* HWY_RESTRICT b = o.b();
  const auto mlast = hn::FirstN(d, static_cast<size_t>(cols - (NV - 1) * lanes));  // the last vector's lanes
  if (o.prefetch_c()) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) hwy::Prefetch(o.c() + r * o.ldc() + v * lanes);
      hwy::Prefetch(o.c() + r * o.ldc() + cols - 1);
    }
  }
  V acc0[R], acc1[R], acc2[R], acc3[R];  // one-dimensional local arrays: they stay in registers
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = acc2[r] = acc3[r] = hn::Zero(d);
  bool permuted = false;  // k done by the permuted-rows loop below
  if constexpr (NV == 1 && !kTransA && hn::MaxLanes(D()) == 16) {
    // All of k in one vector of each A row (k <= 16: the lessons' P·V, dS·K and their batched
    // 10 × 16 × 10): the odd rows' A values are lanes of a register, moved into place with a
    // permute (a shuffle port), the even rows' broadcast from memory (a load port): a load
    // per FMA was the bound. Batched 128 × 10 × 16 × 10 on Zen 5: 36 → 32 ns a product (a bare
    // loop: 29 → 25). The values broadcast and the FMA chains are the same, so are the bits.
    // Only where gemm_detail::small_split (set_gemm_small_values): on Intel the permutes would
    // share port 5 with half of the FMAs, where a broadcast load costs no vector port.
    if (k <= lanes && gemm_detail::small_split) {
      const auto km = hn::FirstN(d, static_cast<size_t>(k));
      V arow[R / 2 + 1];
#pragma GCC unroll 6
      for (int r = 1; r < R; r += 2) arow[r / 2] = hn::MaskedLoad(km, d, a + r * lda);
      __m512i idx = _mm512_setzero_si512();
      const __m512i one = _mm512_set1_epi32(1);
#pragma GCC unroll 2
      for (int64_t kk = 0; kk < k; ++kk) {
        const V bv = LoadLanes<!kFull>(d, mlast, b);
#pragma GCC unroll 6
        for (int r = 0; r < R; r += 2) acc0[r] = hn::MulAdd(hn::Set(d, a[r * lda]), bv, acc0[r]);
#pragma GCC unroll 6
        for (int r = 1; r < R; r += 2)
          acc0[r] = hn::MulAdd(V{_mm512_permutexvar_ps(idx, arow[r / 2].raw)}, bv, acc0[r]);
        idx = _mm512_add_epi32(idx, one);
        a += 1;
        b += ldb;
      }
      permuted = true;
    }
  }
  if constexpr (NV == 1 && kTransA && hn::MaxLanes(D()) == 16 && R >= 2) if (gemm_detail::small_split) {
    // A transposed (the attention's Pᵀ·dY, dSᵀ·Q): the R values of step kk are adjacent, one
    // masked load; the odd rows' taken from it with a permute by a constant index, the even
    // rows' broadcast from memory, as above. Batched 128 × 10 × 10 × 16 Pᵀ·dO on Zen 5:
    // 21.2 → 19 ns a product. Same values and chains, same bits.
    const auto rm = hn::FirstN(d, static_cast<size_t>(R));
    __m512i idx[R / 2];
#pragma GCC unroll 6
    for (int r = 1; r < R; r += 2) idx[r / 2] = _mm512_set1_epi32(r);
#pragma GCC unroll 2
    for (int64_t kk = 0; kk < k; ++kk) {
      const V bv = LoadLanes<!kFull>(d, mlast, b);
      const V acol = hn::MaskedLoad(rm, d, a);
#pragma GCC unroll 6
      for (int r = 0; r < R; r += 2) acc0[r] = hn::MulAdd(hn::Set(d, a[r]), bv, acc0[r]);
#pragma GCC unroll 6
      for (int r = 1; r < R; r += 2)
        acc0[r] = hn::MulAdd(V{_mm512_permutexvar_ps(idx[r / 2], acol.raw)}, bv, acc0[r]);
      a += lda;
      b += ldb;
    }
    permuted = true;
  }
  // A's rows from two bases 6 rows apart (a and a6): their offsets r·lda (r < 6) take the
  // registers lda, 3·lda and 5·lda with scales 1, 2 and 4. Twelve row offsets of their own took
  // more general registers than x86 has and went to the stack, reloaded every k step (Linear(128,
  // 10)'s forward on Zen 4: 0.93–0.96× the time without).
  const float* HWY_RESTRICT a6 = R > 6 && !kTransA ? a + 6 * lda : a;
  if (!permuted)
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < k; ++kk) {
    if constexpr (NV == 1) {
      const V bv = LoadLanes<!kFull>(d, mlast, b);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r)
        acc0[r] = hn::MulAdd(hn::Set(d, kTransA ? a[r] : ATileValue<R>(a, a6, lda, r)), bv, acc0[r]);
    } else if constexpr (NV == 2) {
      const V bv0 = hn::LoadU(d, b);
      const V bv1 = LoadLanes<!kFull>(d, mlast, b + lanes);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const V av = hn::Set(d, kTransA ? a[r] : ATileValue<R>(a, a6, lda, r));
        acc0[r] = hn::MulAdd(av, bv0, acc0[r]);
        acc1[r] = hn::MulAdd(av, bv1, acc1[r]);
      }
    } else {
      const V bv0 = hn::LoadU(d, b), bv1 = hn::LoadU(d, b + lanes), bv2 = hn::LoadU(d, b + 2 * lanes);
      const V bv3 = LoadLanes<!kFull>(d, mlast, b + 3 * lanes);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const V av = hn::Set(d, kTransA ? a[r] : ATileValue<R>(a, a6, lda, r));
        acc0[r] = hn::MulAdd(av, bv0, acc0[r]);
        acc1[r] = hn::MulAdd(av, bv1, acc1[r]);
        acc2[r] = hn::MulAdd(av, bv2, acc2[r]);
        acc3[r] = hn::MulAdd(av, bv3, acc3[r]);
      }
    }
    a += kTransA ? lda : 1;
    a6 += kTransA ? lda : 1;
    b += ldb;
  }
  const V va = hn::Set(d, o.alpha()), vb = hn::Set(d, o.beta());
  const Combine combine = o.combine();
  const int64_t ldc = o.ldc();
  float* HWY_RESTRICT c = o.c();
  V bias0 = hn::Zero(d), bias1 = hn::Zero(d), bias2 = hn::Zero(d), bias3 = hn::Zero(d);
  if constexpr (kBias) {
    if constexpr (NV == 1) {
      bias0 = LoadLanes<!kFull>(d, mlast, g.bias + j);
    } else if constexpr (NV == 2) {
      bias0 = hn::LoadU(d, g.bias + j);
      bias1 = LoadLanes<!kFull>(d, mlast, g.bias + j + lanes);
    } else {
      bias0 = hn::LoadU(d, g.bias + j);
      bias1 = hn::LoadU(d, g.bias + j + lanes);
      bias2 = hn::LoadU(d, g.bias + j + 2 * lanes);
      bias3 = LoadLanes<!kFull>(d, mlast, g.bias + j + 3 * lanes);
    }
  }
  // The epilogue's kind a constant of the store loop (the combine stays a per-vector choice here).
  WithEpilogueKind<kEpilogue>(g, [&](auto kind_tag) ATTNKIT_INLINE_LAMBDA {
    constexpr EpilogueKind kKind = decltype(kind_tag)::value;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      if constexpr (NV == 1) {
        SmallStoreVec<!kFull, kBias, kKind>(d, acc0[r], va, vb, combine, mlast, bias0, g, i + r, j, c + r * ldc);
      } else if constexpr (NV == 2) {
        SmallStoreVec<false, kBias, kKind>(d, acc0[r], va, vb, combine, mlast, bias0, g, i + r, j, c + r * ldc);
        SmallStoreVec<!kFull, kBias, kKind>(d, acc1[r], va, vb, combine, mlast, bias1, g, i + r, j + lanes,
                                            c + r * ldc + lanes);
      } else {
        float* cr = c + r * ldc;
        SmallStoreVec<false, kBias, kKind>(d, acc0[r], va, vb, combine, mlast, bias0, g, i + r, j, cr);
        SmallStoreVec<false, kBias, kKind>(d, acc1[r], va, vb, combine, mlast, bias1, g, i + r, j + lanes,
                                           cr + lanes);
        SmallStoreVec<false, kBias, kKind>(d, acc2[r], va, vb, combine, mlast, bias2, g, i + r, j + 2 * lanes,
                                           cr + 2 * lanes);
        SmallStoreVec<!kFull, kBias, kKind>(d, acc3[r], va, vb, combine, mlast, bias3, g, i + r,
                                            j + 3 * lanes, cr + 3 * lanes);
      }
    }
  });
}

// Rows [i0, i1) in tiles of at most kMax rows, as even as possible (which tile a row falls in
// changes none of its values), calling tile(i, rows) for each.
template <int kMax, class F>
HWY_INLINE void ForEachRowTile(int64_t i0, int64_t i1, const F& tile) {
  const int64_t m = i1 - i0, tiles = (m + kMax - 1) / kMax;
  // The first m % tiles tiles one row taller (one division per block, none for one tile).
  const int64_t base = tiles == 1 ? m : m / tiles, taller = tiles == 1 ? 0 : m % tiles;
  int64_t i = i0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t rows = base + (t < taller ? 1 : 0);
    tile(i, rows);
    i += rows;
  }
}

// product(a, b, c) for every product of span, given the first one's operands at a0, b0, c0:
// one product (every per-call GEMM) straight, a batch in a loop, the caller's setup shared.
template <class F>
HWY_INLINE void ForEachProduct(const ProductSpan& span, const float* a0, const float* b0, float* c0, const F& product) {
  if (span.p0 == 0 && span.p1 == 1) {
    product(a0, b0, c0);
    return;
  }
  for (ProductSpan::Cursor at(span); at.p < span.p1; at.next()) product(a0 + at.a(), b0 + at.b(), c0 + at.c());
}

// SmallTileNN for a transposed B (op(B)(kk, j) = b[j·ldb + kk], one vector of columns): each
// chunk of 8 k-steps of the cols rows of B is transposed in registers into the 8 vectors of
// op(B) rows it holds (8 × 8 for 8 lanes; for 16, both halves at once in 512-bit vectors:
// Transpose16x8 and 4 inserts, 3.5 shuffles per k-step where 8 × 8, 4 × 8 and Combine took 5.5
// at T = 10).
template <class D, int R, bool kTransA>
HWY_INLINE void SmallTileNT(D d, const GemmArgs& g, const ProductSpan& span, int64_t i, int64_t j, int64_t cols) {
  using V = hn::Vec<D>;
  const hn::Full256<float> d8;
  constexpr int kBlocks = static_cast<int>(hn::MaxLanes(D()) / 8);  // 8-row blocks of B
  static_assert(kBlocks == 1 || kBlocks == 2, "one or two 8-lane halves");
  const int64_t lda = g.lda, ldb = g.ldb, k = g.k, ldc = g.ldc;
  const auto mcols = hn::FirstN(d, static_cast<size_t>(cols));
  // Rows of B past cols repeat the last one (their lanes are computed, never stored).
  int64_t row_offset[8 * kBlocks];
  for (int q = 0; q < 8 * kBlocks; ++q) row_offset[q] = std::min<int64_t>(q, cols - 1) * ldb;
  const V va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  const Combine combine = SmallCombine(g);
  // Every product of the span with the setup above done once.
  const float* const a0 = g.a + (kTransA ? i : i * lda);
  const float* const b0 = g.b + j * ldb;
  float* const c0 = g.c + i * ldc + j;
  const auto product = [&](const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                           float* HWY_RESTRICT c) ATTNKIT_INLINE_LAMBDA {
    V acc[R];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r] = hn::Zero(d);
    for (int64_t k0 = 0; k0 < k; k0 += 8) {
      const int64_t kc = std::min<int64_t>(8, k - k0);
      V bt[8];  // bt[c]: row k0 + c of op(B)
      {
        const auto km = hn::FirstN(d8, static_cast<size_t>(kc));
        const auto row = [&](int q) { return hn::MaskedLoad(km, d8, b + row_offset[q] + k0); };
        if constexpr (kBlocks == 2) {
          // Rows q and 4 + q in the halves of in[q], then rows 8 + q and 12 + q (Transpose16x8's
          // layout); rows 12..15 only when there are more than 12 (T = 10: the halves stay zero).
          V in[8];
          for (int q = 0; q < 4; ++q) in[q] = hn::Combine(d, row(4 + q), row(q));
          if (cols <= 12) {
            for (int q = 0; q < 4; ++q) in[4 + q] = hn::ZeroExtendVector(d, row(8 + q));
          } else {
            for (int q = 0; q < 4; ++q) in[4 + q] = hn::Combine(d, row(12 + q), row(8 + q));
          }
          Transpose16x8(in, bt);
        } else {
          V8 in[8];
          for (int q = 0; q < 8; ++q) in[q] = row(q);
          Transpose8x8(in, bt);
        }
      }
#pragma GCC unroll 8
      for (int cc = 0; cc < 8; ++cc) {
        if (cc >= kc) break;
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const V av = hn::Set(d, kTransA ? a[r] : a[r * lda]);
          acc[r] = hn::MulAdd(av, bt[cc], acc[r]);
        }
        a += kTransA ? lda : 1;
      }
    }
    // One loop per combine, each with its combine a constant (no branches between the stores).
    WithCombine(combine, [&](auto combine_tag) ATTNKIT_INLINE_LAMBDA {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r)
        SmallStoreVec<true, false, EpilogueKind::kNone>(d, acc[r], va, vb, decltype(combine_tag)::value, mcols,
                                                        hn::Zero(d), g, i + r, j, c + r * ldc);
    });
  };
  ForEachProduct(span, a0, b0, c0, product);
}

// Products with a transposed B of 5 to 8 columns and A not transposed (Q·Kᵀ and dY·Vᵀ at
// T <= 8): k in pairs. A 512-bit vector holds (k, k + 1) of all 8 columns side by side, so one
// FMA does two k-steps of a row: lane 2c sums the even k of column c, lane 2c + 1 the odd ones,
// added at the end. Against 256-bit vectors of 8 columns (SmallTileNT), half the FMAs, and half
// the shuffles: 16 k-steps of the 8 rows of B come in as an 8 × 8 transpose of 64-bit pairs,
// where a float 8 × 8 transpose gives 8. A pair of A is one 64-bit broadcast load.
// Chosen on the whole product's shape (never a block's), so a product is computed this way
// whatever its split into blocks and threads; its sums are its own (even + odd chains), bitwise
// the same for every block and thread count.
// A bias and an epilogue go into the stores, as the small path's do.
HWY_INLINE bool UsePairsNT(const GemmArgs& g) {
  return g.trans_b && !g.trans_a && g.n >= 5 && g.n <= 8 && g.k <= 256;
}

// The 8 × 8 transpose of 64-bit elements: out[p] element q = element p of r[q].
HWY_INLINE void TransposePairs8x8(const hn::Vec<hn::Full512<double>> (&r)[8], hn::Vec<hn::Full512<double>> (&out)[8]) {
  const hn::Full512<double> dd;
  using VD = hn::Vec<decltype(dd)>;
  VD t[8];  // t[2h]: elements 0, 2, 4, 6 of rows 2h, 2h + 1 (a pair of rows per 128-bit block)
  for (int h = 0; h < 4; ++h) {
    t[2 * h] = hn::InterleaveLower(dd, r[2 * h], r[2 * h + 1]);
    t[2 * h + 1] = hn::InterleaveUpper(dd, r[2 * h], r[2 * h + 1]);
  }
  for (int odd = 0; odd < 2; ++odd) {
    // u0 blocks: rows 0-1 of elements e, e + 4, rows 2-3 of the same; u1: elements e + 2, e + 6.
    const VD* s = t + odd;  // s[0], s[2], s[4], s[6]: elements of parity `odd` of rows 0-1, …
    const VD u0{_mm512_shuffle_f64x2(s[0].raw, s[2].raw, _MM_SHUFFLE(2, 0, 2, 0))};
    const VD u1{_mm512_shuffle_f64x2(s[0].raw, s[2].raw, _MM_SHUFFLE(3, 1, 3, 1))};
    const VD u2{_mm512_shuffle_f64x2(s[4].raw, s[6].raw, _MM_SHUFFLE(2, 0, 2, 0))};
    const VD u3{_mm512_shuffle_f64x2(s[4].raw, s[6].raw, _MM_SHUFFLE(3, 1, 3, 1))};
    out[odd + 0] = VD{_mm512_shuffle_f64x2(u0.raw, u2.raw, _MM_SHUFFLE(2, 0, 2, 0))};
    out[odd + 4] = VD{_mm512_shuffle_f64x2(u0.raw, u2.raw, _MM_SHUFFLE(3, 1, 3, 1))};
    out[odd + 2] = VD{_mm512_shuffle_f64x2(u1.raw, u3.raw, _MM_SHUFFLE(2, 0, 2, 0))};
    out[odd + 6] = VD{_mm512_shuffle_f64x2(u1.raw, u3.raw, _MM_SHUFFLE(3, 1, 3, 1))};
  }
}

// A(r, k0 + 2p) and A(r, k0 + 2p + 1) in every pair of lanes (one 64-bit broadcast load).
HWY_INLINE hn::Vec<hn::Full512<float>> PairOfA(const float* HWY_RESTRICT p) {
  double pair;
  std::memcpy(&pair, p, sizeof(pair));
  return hn::BitCast(hn::Full512<float>(), hn::Set(hn::Full512<double>(), pair));
}

// Rows i..i+R, columns j..j+cols (5..8) of every product of span (see UsePairsNT).
template <int R, bool kBias, bool kEpilogue>
HWY_INLINE void PairTileNT(const GemmArgs& g, const ProductSpan& span, int64_t i, int64_t j, int64_t cols) {
  const hn::Full512<float> d;
  const hn::Full512<double> dd;
  const hn::Full256<float> d8;
  using V = hn::Vec<decltype(d)>;
  using VD = hn::Vec<decltype(dd)>;
  using V8v = hn::Vec<decltype(d8)>;
  const int64_t lda = g.lda, ldb = g.ldb, k = g.k, ldc = g.ldc;
  const auto mcols = hn::FirstN(d8, static_cast<size_t>(cols));
  // Rows of B past cols repeat the last one (their lanes are computed, never stored).
  int64_t row_offset[8];
  for (int q = 0; q < 8; ++q) row_offset[q] = std::min<int64_t>(q, cols - 1) * ldb;
  const V8v va = hn::Set(d8, g.alpha), vb = hn::Set(d8, g.beta);
  const Combine combine = SmallCombine(g);
  const V8v bias = kBias ? hn::MaskedLoad(mcols, d8, g.bias + j) : hn::Zero(d8);
  // Lanes 0..7: the even lanes of the first source, 8..15: of the second (odd: + 1).
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const float* const a0 = g.a + i * lda;
  const float* const b0 = g.b + j * ldb;
  float* const c0 = g.c + i * ldc + j;
  const auto product = [&](const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                           float* HWY_RESTRICT c) ATTNKIT_INLINE_LAMBDA {
    V acc[R];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r] = hn::Zero(d);
    // 16 k-steps of B's 8 rows: kc of them loaded (the rest zero), transposed into pairs.
    const auto load_pairs = [&](int64_t k0, int64_t kc, auto whole_tag, VD (&bt)[8]) ATTNKIT_INLINE_LAMBDA {
      VD in[8];
      if constexpr (decltype(whole_tag)::value) {
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) in[q] = hn::BitCast(dd, hn::LoadU(d, b + row_offset[q] + k0));
      } else {
        const auto km = hn::FirstN(d, static_cast<size_t>(kc));
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) in[q] = hn::BitCast(dd, hn::MaskedLoad(km, d, b + row_offset[q] + k0));
      }
      TransposePairs8x8(in, bt);
    };
    // Pair p of the chunk at k0: one FMA per row.
    const auto fma_pair = [&](int64_t k0, int p, const VD (&bt)[8]) ATTNKIT_INLINE_LAMBDA {
      const V bp = hn::BitCast(d, bt[p]);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = hn::MulAdd(PairOfA(a + r * lda + k0 + 2 * p), bp, acc[r]);
    };
    // Whole chunks: 8 pairs each, no masks and no counts (the common case, k = 16, 32, 64).
    int64_t k0 = 0;
    for (; k0 + 16 <= k; k0 += 16) {
      VD bt[8];
      load_pairs(k0, 16, std::true_type(), bt);
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) fma_pair(k0, p, bt);
    }
    if (k0 < k) {  // the last kc < 16 k-steps: the same FMAs in the same order
      const int64_t kc = k - k0, pairs = kc / 2;
      VD bt[8];  // bt[p]: (k0 + 2p, k0 + 2p + 1) of the 8 columns; zero past k
      load_pairs(k0, kc, std::false_type(), bt);
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) {
        if (p >= pairs) break;
        fma_pair(k0, p, bt);
      }
      if (kc & 1) {  // the last k alone: A(r, k - 1) in the even lanes, zero in the odd ones
        const V bp = hn::BitCast(d, bt[pairs]);
        const hn::Full512<uint64_t> du64;
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          uint32_t bits;
          std::memcpy(&bits, a + r * lda + k - 1, sizeof(bits));
          const V av = hn::BitCast(d, hn::Set(du64, static_cast<uint64_t>(bits)));
          acc[r] = hn::MulAdd(av, bp, acc[r]);
        }
      }
    }
    // Even + odd lanes of two rows at once: lanes 0..7 row r, 8..15 row r + 1. One loop per
    // combine, each with its combine a constant (no branches between the stores).
    const auto store_rows = [&](auto combine_tag, auto kind_tag) ATTNKIT_INLINE_LAMBDA {
      constexpr Combine kCombine = decltype(combine_tag)::value;
      constexpr EpilogueKind kKind = decltype(kind_tag)::value;
#pragma GCC unroll 12
      for (int r = 0; r < R; r += 2) {
        const V second = r + 1 < R ? acc[r + 1] : acc[r];
        const V sum = hn::Add(V{_mm512_permutex2var_ps(acc[r].raw, evens, second.raw)},
                              V{_mm512_permutex2var_ps(acc[r].raw, odds, second.raw)});
        SmallStoreVec<true, kBias, kKind>(d8, hn::LowerHalf(d8, sum), va, vb, kCombine, mcols, bias, g, i + r, j,
                                          c + r * ldc);
        if (r + 1 < R)
          SmallStoreVec<true, kBias, kKind>(d8, hn::UpperHalf(d8, sum), va, vb, kCombine, mcols, bias, g, i + r + 1,
                                            j, c + (r + 1) * ldc);
      }
    };
    WithStores<kEpilogue>(combine, g, store_rows);
  };
  ForEachProduct(span, a0, b0, c0, product);
}

// Rows [i0, i1) of a pairs path's product in tiles of at most kMax rows: f(rows_tag, bias_tag,
// epilogue_tag, i), the tags std::integral_constants (the tile's template arguments), i its first row.
template <int kMax, class F>
HWY_INLINE void ForEachPairTile(const GemmArgs& g, int64_t i0, int64_t i1, const F& f) {
  ForEachRowTile<kMax>(i0, i1, [&](int64_t i, int64_t rows) {
    WithCount<kMax>(rows, [&](auto r_tag) {
      WithFlag(g.bias != nullptr, [&](auto b) {
        WithFlag(g.has_epilogue(), [&](auto e) { f(r_tag, b, e, i); });
      });
    });
  });
}

// Rows [i0, i1) of every product of span in tiles of at most kSmallRows1 rows (see UsePairsNT).
HWY_INLINE void PairRowsNT(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, const ProductSpan& span) {
  ForEachPairTile<static_cast<int>(kSmallRows1)>(g, i0, i1, [&](auto r_tag, auto b, auto e, int64_t i) {
    PairTileNT<decltype(r_tag)::value, decltype(b)::value, decltype(e)::value>(g, span, i, j0, j1 - j0);
  });
}

// Products with neither operand transposed and 9 or 10 columns (a 10-class head's forward
// x·W; an attention's P·V or dS·K at head size 9 or 10 and T >= 32): 10 columns fill 10 of a
// row vector's 16 lanes, so the small path's FMAs run at 62% of the lanes. Here every lane works:
// - columns 0..7 with k in pairs, as UsePairsNT's: lane 2c + e of a row's vector sums
//   A(r, k)·B(k, c) over the k of parity e; a pair of A is one 64-bit broadcast load, the 8 + 8
//   values of B rows k and k + 1 one two-source permute (16 lanes for 2 k-steps);
// - columns 8 and 9 with k in octets: lane 8(c - 8) + q sums over the k of k % 8 = q; A's
//   octet broadcast to both halves, B's (k..k + 7) × (8, 9) built once per 8 k-steps;
// then each row's sums are folded lane pair by lane pair (even + odd; three halvings of the
// octets, pairs of neighbours first), the same tree for every row whatever its tile.
// Chosen on the whole product's shape, never a block's (see UsePairsNT): a product is computed
// this way whatever its split into blocks and threads, bitwise the same for every split.
// A bias and an epilogue go into the stores, as the small path's do.
// From k = 32: at k = 16 (the batched 10 × 16 × 10) the sums' folding after the k loop costs
// more than the FMAs saved (4.2 µs against the small path's 3.5 for 128 products).
// Only where the 9/10-column products keep 16-lane rows (gemm_detail::ten_columns_quads false:
// set_gemm_ten_columns, AMD Zen 5's default). On Zen 4 the interleaving permutes share the FMA
// pipes' ports (without this path 256 × 32 × 10 took 0.88–0.91× the time, 640 × 128 × 10
// 0.98–1.02×), and there and on the Intel Xeon the quads paths are faster.
inline constexpr int64_t kPairsNNMinK = 32;
HWY_INLINE bool UsePairsNN(const GemmArgs& g) {
  return !gemm_detail::ten_columns_quads && !g.trans_b && !g.trans_a && g.n >= 9 && g.n <= 10 && g.k >= kPairsNNMinK &&
         g.k <= 256;
}

// Rows of a pairs-NN tile: its two sets of accumulators (2 · R vectors) and the shared
// operands fit in the 32 vector registers.
inline constexpr int64_t kPairsNNRows = 10;

// Lanes 0..7: B(k0 + q, 8), lanes 8..15: B(k0 + q, 9) (zero without kTwo), for q < kc (zero
// past it); b = B's row k0 at column 8.
template <bool kTwo, bool kWhole>
HWY_INLINE hn::Vec<hn::Full512<float>> Columns89OfB(const float* HWY_RESTRICT b, int64_t ldb, int64_t kc) {
  const __m256d h0 = Pairs89OfB<kTwo, kWhole, 0>(b, ldb, kc), h1 = Pairs89OfB<kTwo, kWhole, 4>(b, ldb, kc);
  const __m512 pairs = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(h0), h1, 1));
  // (q, c) → (c, q)
  const __m512i by_column = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  return hn::Vec<hn::Full512<float>>{_mm512_permutexvar_ps(by_column, pairs)};
}

// Rows 2 and 8 of a pairs-NN tile take their A pairs from a register (16 values of the row, 8
// pairs, one load) with a permute; the other rows' are 64-bit broadcast loads. The k loop was
// bound by those loads (10 per pair of k-steps, plus B's 2); a permute runs on a vector port
// beside the FMAs. On Zen 5, 8 alternating rounds against the all-broadcast loop, 640 × 128 × 10:
// rows 1, 3, 6, 8 permuted 0.97× the time, rows 1, 5, 8 a further 0.97–0.98×, rows 2, 8 0.91×
// in all (256 × 32 × 10: 0.95×); the chunked loop with no row permuted 1.01–1.04×. The values
// and the FMA chains are the same, so are the bits.
constexpr bool PermutedPairRow(int r) { return r == 2 || r == 8; }

// Rows i..i+R (R <= kPairsNNRows), columns j..j+cols (9 or 10: kTwo) of every product of
// span (see UsePairsNN).
template <int R, bool kTwo, bool kBias, bool kEpilogue>
HWY_INLINE void PairTileNN(const GemmArgs& g, const ProductSpan& span, int64_t i, int64_t j, int64_t cols) {
  const hn::Full512<float> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lda = g.lda, ldb = g.ldb, k = g.k, ldc = g.ldc;
  const auto mcols = hn::FirstN(d, static_cast<size_t>(cols));
  const V va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  const Combine combine = SmallCombine(g);
  const V bias = kBias ? hn::MaskedLoad(mcols, d, g.bias + j) : hn::Zero(d);
  // B rows k, k + 1 (columns 0..7) interleaved: lane 2c + e = B(k + e, c).
  const __m512i interleave = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  // Lanes 0..7: the even lanes of the first source, 8..15: of the second (odd: + 1).
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const float* const a0 = g.a + i * lda;
  const float* const b0 = g.b + j;
  float* const c0 = g.c + i * ldc + j;
  // Two vectors' neighbouring lanes added: lanes 0..7 from x's 16, 8..15 from y's.
  const auto halve = [&](V x, V y) ATTNKIT_INLINE_LAMBDA {
    return hn::Add(V{_mm512_permutex2var_ps(x.raw, evens, y.raw)}, V{_mm512_permutex2var_ps(x.raw, odds, y.raw)});
  };
  const auto product = [&](const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                           float* HWY_RESTRICT c) ATTNKIT_INLINE_LAMBDA {
    V acc[R], acc2[R];
#pragma GCC unroll 10
    for (int r = 0; r < R; ++r) acc[r] = hn::Zero(d), acc2[r] = hn::Zero(d);
    // The k loops are not unrolled: unrolled (at k = 16, in a first version), the compiler gave
    // every (row, k-step) address an induction variable of its own, spilled to the stack.
    // Columns 0..7: B rows kk, kk + 1 interleaved, one FMA per row; in chunks of 8 pairs (16
    // k-steps, the rows of PermutedPairRow loaded whole, zero past k), idx picking pair q.
    const int64_t pairs = k / 2;
    const __m512i next_pair = _mm512_set1_epi32(2);
#pragma GCC unroll 1
    for (int64_t p0 = 0; p0 < pairs; p0 += 8) {
      const int64_t np = std::min<int64_t>(8, pairs - p0);
      const auto km = hn::FirstN(d, static_cast<size_t>(2 * np));
      V chunk[R];
#pragma GCC unroll 10
      for (int r = 0; r < R; ++r)
        if (PermutedPairRow(r)) chunk[r] = hn::MaskedLoad(km, d, a + r * lda + 2 * p0);
      __m512i idx = _mm512_setr_epi32(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1);
      const float* HWY_RESTRICT bk = b + 2 * p0 * ldb;
      const float* HWY_RESTRICT ak = a + 2 * p0;
#pragma GCC unroll 1
      for (int64_t q = 0; q < np; ++q) {
        const V bp{_mm512_permutex2var_ps(_mm512_castps256_ps512(_mm256_loadu_ps(bk)), interleave,
                                          _mm512_castps256_ps512(_mm256_loadu_ps(bk + ldb)))};
#pragma GCC unroll 10
        for (int r = 0; r < R; ++r)
          if (!PermutedPairRow(r)) acc[r] = hn::MulAdd(PairOfA(ak + r * lda), bp, acc[r]);
#pragma GCC unroll 10
        for (int r = 0; r < R; ++r)
          if (PermutedPairRow(r)) acc[r] = hn::MulAdd(V{_mm512_permutexvar_ps(idx, chunk[r].raw)}, bp, acc[r]);
        idx = _mm512_add_epi32(idx, next_pair);
        bk += 2 * ldb;
        ak += 2;
      }
    }
    if (k & 1) {  // the last k alone: A(r, k - 1) in the even lanes, zero in the odd ones
      const V bp{_mm512_permutex2var_ps(_mm512_castps256_ps512(_mm256_loadu_ps(b + (k - 1) * ldb)), interleave,
                                        _mm512_setzero_ps())};
      const hn::Full512<uint64_t> du64;
#pragma GCC unroll 10
      for (int r = 0; r < R; ++r) {
        uint32_t bits;
        std::memcpy(&bits, a + r * lda + k - 1, sizeof(bits));
        acc[r] = hn::MulAdd(hn::BitCast(d, hn::Set(du64, static_cast<uint64_t>(bits))), bp, acc[r]);
      }
    }
    // Columns 8 and 9: eight k-steps per FMA.
    int64_t k0 = 0;
#pragma GCC unroll 1
    for (; k0 + 8 <= k; k0 += 8) {
      const V bo = Columns89OfB<kTwo, true>(b + k0 * ldb + 8, ldb, 8);
#pragma GCC unroll 10
      for (int r = 0; r < R; ++r)
        acc2[r] = hn::MulAdd(V{_mm512_broadcast_f32x8(_mm256_loadu_ps(a + r * lda + k0))}, bo, acc2[r]);
    }
    if (k0 < k) {  // the last kc < 8 k-steps: zero in A's and B's lanes past k
      const int64_t kc = k - k0;
      const V bo = Columns89OfB<kTwo, false>(b + k0 * ldb + 8, ldb, kc);
      const __mmask8 ka = static_cast<__mmask8>((1u << kc) - 1);
#pragma GCC unroll 10
      for (int r = 0; r < R; ++r)
        acc2[r] = hn::MulAdd(V{_mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(ka, a + r * lda + k0))}, bo, acc2[r]);
    }
    // Row pairs: s[h] lanes 0..7 = row 2h's columns 0..7, 8..15 = row 2h + 1's.
    constexpr int kH = (R + 1) / 2, kY = (kH + 1) / 2, kZ = (kY + 1) / 2;
    V s[kH], x[kH], y[kY], z[kZ];
#pragma GCC unroll 5
    for (int h = 0; h < kH; ++h) {
      const V zero = hn::Zero(d);
      s[h] = halve(acc[2 * h], 2 * h + 1 < R ? acc[2 * h + 1] : zero);
      x[h] = halve(acc2[2 * h], 2 * h + 1 < R ? acc2[2 * h + 1] : zero);
    }
#pragma GCC unroll 3
    for (int q = 0; q < kY; ++q) y[q] = halve(x[2 * q], 2 * q + 1 < kH ? x[2 * q + 1] : hn::Zero(d));
    // z[w] lane 2(r % 8) + c - 8: row 8w + r % 8, column c.
#pragma GCC unroll 2
    for (int w = 0; w < kZ; ++w) z[w] = halve(y[2 * w], 2 * w + 1 < kY ? y[2 * w + 1] : hn::Zero(d));
    const auto store_rows = [&](auto combine_tag, auto kind_tag) ATTNKIT_INLINE_LAMBDA {
      constexpr Combine kCombine = decltype(combine_tag)::value;
      constexpr EpilogueKind kKind = decltype(kind_tag)::value;
#pragma GCC unroll 10
      for (int r = 0; r < R; ++r) {
        const int h = (r & 1) * 8, t = 16 + 2 * (r & 7);
        const __m512i pick =
            _mm512_setr_epi32(h, h + 1, h + 2, h + 3, h + 4, h + 5, h + 6, h + 7, t, t + 1, 0, 0, 0, 0, 0, 0);
        const V row{_mm512_permutex2var_ps(s[r / 2].raw, pick, z[r / 8].raw)};
        SmallStoreVec<true, kBias, kKind>(d, row, va, vb, kCombine, mcols, bias, g, i + r, j, c + r * ldc);
      }
    };
    WithStores<kEpilogue>(combine, g, store_rows);
  };
  ForEachProduct(span, a0, b0, c0, product);
}

// Rows [i0, i1) of a product of 9 or 10 columns [j0, j1) in tiles of at most kMax rows:
// f(rows_tag, two_tag, bias_tag, epilogue_tag, i), two_tag true for 10 columns (see
// ForEachPairTile).
template <int kMax, class F>
HWY_INLINE void ForEachTenColumnTile(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, const F& f) {
  WithFlag(j1 - j0 == 10, [&](auto two) {
    ForEachPairTile<kMax>(g, i0, i1, [&](auto r_tag, auto b, auto e, int64_t i) { f(r_tag, two, b, e, i); });
  });
}

// Rows [i0, i1) of every product of span in tiles of at most kPairsNNRows rows (see UsePairsNN).
HWY_INLINE void PairRowsNN(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, const ProductSpan& span) {
  constexpr int kMax = static_cast<int>(kPairsNNRows);
  ForEachTenColumnTile<kMax>(g, i0, i1, j0, j1, [&](auto r, auto two, auto b, auto e, int64_t i) {
    constexpr int kRows = decltype(r)::value;
    PairTileNN<kRows, decltype(two)::value, decltype(b)::value, decltype(e)::value>(g, span, i, j0, j1 - j0);
  });
}

// Products with neither operand transposed and 9 or 10 columns where the quads paths are chosen
// (gemm_detail::ten_columns_quads: set_gemm_ten_columns, the default on Zen 4 — one 512-bit FMA
// a cycle, or two 256-bit ones — and on the Intel Xeon): a row's 10 columns in one 512-bit
// vector keep 10 of its 16 lanes busy. Here in 256-bit vectors, every lane working:
// - columns 0..7: one 8-lane vector a row, A(r, kk) broadcast, one FMA chain a column over k in
//   increasing order from zero (the small path's chains: the same bits for these columns);
// - columns 8 and 9 with k in quads: lanes q and 4 + q of a row's second vector sum
//   A(r, kk)·B(kk, 8) and A(r, kk)·B(kk, 9) over the kk of kk % 4 = q (A's 4 values broadcast
//   to both 128-bit halves, one load; B's 4 × 2 values packed once per product for all its
//   tiles, or built quad by quad for a batch's one-tile products); a last quad of 1..3 k-steps
//   zero in A's and B's lanes past k. After the k loop the lanes are added (l0 + l1) +
//   (l2 + l3), the same tree for every row whatever its tile.
// 40 FMAs of 8 lanes for every 32 of 16 (Linear(128, 10)'s forward: 640 × 128 × 10 at 12 rows
// a tile 17.3 µs against 22.75 in a bare loop, AMD EPYC Zen 4, one thread).
// Chosen on the whole product's shape, never a block's (see UsePairsNT): a product is computed
// this way whatever its split into blocks and threads, bitwise the same for every split.
// With 16-lane rows chosen instead, UsePairsNN's path takes these products from k = 32.
HWY_INLINE bool UseQuadsNN(const GemmArgs& g) {
  return gemm_detail::ten_columns_quads && !g.trans_b && !g.trans_a && g.n >= 9 && g.n <= 10 && g.k <= 256;
}

// Rows of a quads-NN tile: its 2 · R accumulators of 8 lanes and the shared operands fit in
// the 32 vector registers.
inline constexpr int64_t kQuadsNNRows = 12;

// Floats of a quads-NN product's packed columns 8 and 9: 8 a quad, k <= 256.
inline constexpr int64_t kQuadsNNPacked = 2 * 256;

// B's columns 8 and 9 of a quads-NN product (b at column 0) for its tiles: quad w's
// Columns89QuadOfB at packed + 8w, the last quad zero past k. Built once for every tile of a
// product (in the k loop, once per tile: 640 × 128 × 10 4% slower in a bare loop).
template <bool kTwo>
HWY_INLINE void PackColumns89(const float* HWY_RESTRICT b, int64_t ldb, int64_t k, float* HWY_RESTRICT packed) {
  int64_t k0 = 0;
  for (; k0 + 4 <= k; k0 += 4) _mm256_store_ps(packed + 2 * k0, Columns89QuadOfB<kTwo, true>(b + k0 * ldb + 8, ldb, 4));
  if (k0 < k) _mm256_store_ps(packed + 2 * k0, Columns89QuadOfB<kTwo, false>(b + k0 * ldb + 8, ldb, k - k0));
}

// What a quads tile's stores need (QuadTileNN, QuadTileNT): alpha, beta and the bias of
// columns 0..7 (8 lanes) and of columns 8..9 (DT: 2 lanes; column 8 alone in 1 without kTwo).
template <bool kTwo>
struct QuadStores {
  using D8 = hn::Full256<float>;
  using DT = std::conditional_t<kTwo, hn::Full64<float>, hn::Full32<float>>;
  hn::Vec<D8> va8, vb8, bias8;
  hn::Vec<DT> vat, vbt, biast;
  Combine combine;
  QuadStores(const GemmArgs& g, int64_t j, bool bias)
      : va8(hn::Set(D8(), g.alpha)),
        vb8(hn::Set(D8(), g.beta)),
        bias8(bias ? hn::LoadU(D8(), g.bias + j) : hn::Zero(D8())),
        vat(hn::Set(DT(), g.alpha)),
        vbt(hn::Set(DT(), g.beta)),
        biast(bias ? hn::LoadU(DT(), g.bias + j + 8) : hn::Zero(DT())),
        combine(SmallCombine(g)) {}
};

// A quads tile's R rows stored at c (row i of g, column j): acc[r] holds row r's columns 0..7,
// acc2[r] lanes q and 4 + q its columns 8 and 9 over the k of kk % 4 = q. Those lanes are added
// (l0 + l1) + (l2 + l3), the same tree for every row whatever its tile.
template <int R, bool kTwo, bool kBias, bool kEpilogue>
HWY_INLINE void StoreQuadRows(const GemmArgs& g, const QuadStores<kTwo>& st, const __m256 (&acc)[R],
                              const __m256 (&acc2)[R], int64_t i, int64_t j, float* HWY_RESTRICT c) {
  const hn::Full256<float> d8;
  using V8 = hn::Vec<decltype(d8)>;
  using DT = typename QuadStores<kTwo>::DT;
  using VT = hn::Vec<DT>;
  const DT dt;
  const int64_t ldc = g.ldc;
  __m256 sums[(R + 3) / 4];
  Columns89Sums<R>(acc2, sums);
  // Each row in two plain stores: columns 0..7 (8 lanes) and 8..9 (2 lanes, 1 without kTwo).
  // One masked 512-bit store a row instead cost Zen 4 more than the row's FMAs at k = 16.
  const auto store_rows = [&](auto combine_tag, auto kind_tag) ATTNKIT_INLINE_LAMBDA {
    constexpr Combine kCombine = decltype(combine_tag)::value;
    constexpr EpilogueKind kKind = decltype(kind_tag)::value;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m128 tail = Columns89OfRow<R>(sums, r);
      float* HWY_RESTRICT cr = c + r * ldc;
      SmallStoreVec<false, kBias, kKind>(d8, V8{acc[r]}, st.va8, st.vb8, kCombine, hn::FirstN(d8, 8), st.bias8, g,
                                         i + r, j, cr);
      SmallStoreVec<false, kBias, kKind>(dt, VT{tail}, st.vat, st.vbt, kCombine, hn::FirstN(dt, 2), st.biast, g,
                                         i + r, j + 8, cr + 8);
    }
  };
  WithStores<kEpilogue>(st.combine, g, store_rows);
}

// Rows i..i+R (R <= kQuadsNNRows), columns j..j+cols (9 or 10: kTwo) of every product of span
// (see UseQuadsNN). packed: the one product's PackColumns89, or null (a batch: B's columns 8
// and 9 built in the k loop).
template <int R, bool kTwo, bool kBias, bool kEpilogue>
HWY_INLINE void QuadTileNN(const GemmArgs& g, const ProductSpan& span, int64_t i, int64_t j, int64_t cols,
                           const float* packed) {
  // Columns 0..7 in 8 lanes, columns 8..9 in 2 (column 8 alone in 1 without kTwo).
  (void)cols;
  const int64_t lda = g.lda, ldb = g.ldb, k = g.k, ldc = g.ldc;
  const QuadStores<kTwo> st(g, j, kBias);
  const float* const a0 = g.a + i * lda;
  const float* const b0 = g.b + j;
  float* const c0 = g.c + i * ldc + j;
  const auto product = [&](const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                           float* HWY_RESTRICT c) ATTNKIT_INLINE_LAMBDA {
    __m256 acc[R], acc2[R];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), acc2[r] = _mm256_setzero_ps();
    // The k loop with B's columns 8 and 9 from packed (kPacked) or built quad by quad (a batch's
    // products, one tile each: packed first, the stores and loads of the pack cost more).
    const auto k_loop = [&](auto packed_tag) ATTNKIT_INLINE_LAMBDA {
      constexpr bool kPacked = decltype(packed_tag)::value;
      // A's rows from two bases 6 rows apart, as SmallTileNN's (ATileValue).
      const float* HWY_RESTRICT ak = a;
      const float* HWY_RESTRICT ak6 = R > 6 ? a + 6 * lda : a;
      const float* HWY_RESTRICT bk = b;
      // Columns 0..7 over the next `steps` k-steps (A broadcast, one FMA a row each).
      const auto columns_0_7 = [&](int64_t steps) ATTNKIT_INLINE_LAMBDA {
#pragma GCC unroll 1
        for (int64_t q = 0; q < steps; ++q) {
          const __m256 bv = _mm256_loadu_ps(bk);
#pragma GCC unroll 12
          for (int r = 0; r < R; ++r)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(ATileValue<R>(ak, ak6, lda, r)), bv, acc[r]);
          ak += 1;
          ak6 += 1;
          bk += ldb;
        }
      };
      int64_t k0 = 0;
#pragma GCC unroll 1
      for (; k0 + 4 <= k; k0 += 4) {
        const __m256 b89 = kPacked ? _mm256_load_ps(packed + 2 * k0) : Columns89QuadOfB<kTwo, true>(bk + 8, ldb, 4);
        __m256 bv[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) bv[q] = _mm256_loadu_ps(bk + q * ldb);
        // A row's quad (one load) feeds its columns 8 and 9; rows 0..3 take their columns
        // 0..7's A values from it too, each spread over the vector by an in-lane shuffle, the
        // others as broadcast loads: with a broadcast load for every row and k-step the loop
        // was bound by its loads, with shuffles for every row by the shuffles. The same FMAs
        // in the same order, so the same bits. Batched 128 × 10×16×10 on Zen 4: 0.92× the
        // time with every second row shuffled, 0.85× with rows 0..3 (every row: 1.02×).
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const float* HWY_RESTRICT ar = ATileRow<R>(ak, ak6, lda, r);
          const __m256 quad = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(ar));
          acc2[r] = _mm256_fmadd_ps(quad, b89, acc2[r]);
          if (r < 4) {
            acc[r] = _mm256_fmadd_ps(_mm256_shuffle_ps(quad, quad, 0x00), bv[0], acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_shuffle_ps(quad, quad, 0x55), bv[1], acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_shuffle_ps(quad, quad, 0xAA), bv[2], acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_shuffle_ps(quad, quad, 0xFF), bv[3], acc[r]);
          } else {
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q) acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(ar[q]), bv[q], acc[r]);
          }
        }
        ak += 4;
        ak6 += 4;
        bk += 4 * ldb;
      }
      if (k0 < k) {  // the last kc < 4 k-steps: zero in A's and B's lanes past k
        const int64_t kc = k - k0;
        const __m256 b89 = kPacked ? _mm256_load_ps(packed + 2 * k0) : Columns89QuadOfB<kTwo, false>(bk + 8, ldb, kc);
        const __mmask8 ka = static_cast<__mmask8>((1u << kc) - 1);
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const __m128 quad = _mm_maskz_loadu_ps(ka, ATileRow<R>(ak, ak6, lda, r));
          acc2[r] = _mm256_fmadd_ps(_mm256_set_m128(quad, quad), b89, acc2[r]);
        }
        columns_0_7(kc);
      }
    };
    if (packed != nullptr) {
      k_loop(std::true_type());
    } else {
      k_loop(std::false_type());
    }
    StoreQuadRows<R, kTwo, kBias, kEpilogue>(g, st, acc, acc2, i, j, c);
  };
  ForEachProduct(span, a0, b0, c0, product);
}

// Rows [i0, i1) of every product of span in tiles of at most kQuadsNNRows rows (see UseQuadsNN).
HWY_INLINE void QuadRowsNN(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, const ProductSpan& span) {
  WithFlag(j1 - j0 == 10, [&](auto two) {
    constexpr bool kTwo = decltype(two)::value;
    alignas(32) float packed[kQuadsNNPacked];
    const bool one = span.p0 == 0 && span.p1 == 1;  // one product: its B packed once for its tiles
    if (one) PackColumns89<kTwo>(g.b + j0, g.ldb, g.k, packed);
    ForEachPairTile<static_cast<int>(kQuadsNNRows)>(g, i0, i1, [&](auto r_tag, auto b, auto e, int64_t i) {
      QuadTileNN<decltype(r_tag)::value, kTwo, decltype(b)::value, decltype(e)::value>(g, span, i, j0, j1 - j0,
                                                                                        one ? packed : nullptr);
    });
  });
}

// A·B of 9 or 10 columns from k = kKQuadsMinK where the quads paths are chosen
// (UseQuadsNN's products; Linear(128, 10)'s forward): all ten columns with k in quads, as
// QuadTileNN's columns 8 and 9, in ops/gemm_quads-inl.h's k-quads layout (KQuadSums): a row's
// four A values are one 128-bit broadcast load for its five FMAs (QuadTileNN: five loads, one
// a column vector and k-step, for the same five FMAs), and B is packed once per product
// (PackKQuadsOfB). Each column's four lanes are added (l0 + l1) + (l2 + l3), QuadTileNN's tree
// for columns 8 and 9, so its stores (StoreQuadRows) take the rows as they are.
// 640 × 128 × 10: 15.7 µs against QuadTileNN's 18.6 (AMD EPYC Zen 4, one thread, a bare loop);
// five rows a tile (25 accumulators, 5 B vectors and A's broadcast: 31 of the 32 registers).
// Chosen on the whole product's shape (k), never a block's. From k = 32: a batch of 128
// 10 × 16 × 10 products took 1.49× QuadTileNN's time (B packed for each product).
inline constexpr int64_t kKQuadsNNRows = 5;

HWY_INLINE bool UseKQuadsNN(const GemmArgs& g) { return UseQuadsNN(g) && g.k >= kKQuadsMinK; }

// Rows i..i + R (R <= kKQuadsNNRows) of one product, columns j..j + 9 or 10 (kTwo), from
// PackKQuadsOfB's packed: a at A's row i, c at C's row i and column j (see UseKQuadsNN).
template <int R, bool kTwo, bool kBias, bool kEpilogue>
HWY_INLINE void KQuadTileNN(const GemmArgs& g, const float* HWY_RESTRICT packed, const float* HWY_RESTRICT a,
                            float* HWY_RESTRICT c, int64_t i, int64_t j) {
  const QuadStores<kTwo> st(g, j, kBias);
  __m256 row8[R], col89[R];
  KQuadSums<R>(packed, a, g.lda, g.k, row8, col89);
  StoreQuadRows<R, kTwo, kBias, kEpilogue>(g, st, row8, col89, i, j, c);
}

// Rows [i0, i1) of every product of span in tiles of at most kKQuadsNNRows rows (see
// UseKQuadsNN): each product's B packed once for its tiles.
HWY_INLINE void KQuadRowsNN(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, const ProductSpan& span) {
  WithFlag(j1 - j0 == 10, [&](auto two) {
    constexpr bool kTwo = decltype(two)::value;
    alignas(32) float packed[kKQuadsPacked];
    ForEachProduct(span, g.a, g.b + j0, g.c + j0, [&](const float* a, const float* b, float* c) {
      PackKQuadsOfB<kTwo>(b, g.ldb, g.k, packed);
      ForEachPairTile<static_cast<int>(kKQuadsNNRows)>(g, i0, i1, [&](auto r_tag, auto b_tag, auto e, int64_t i) {
        KQuadTileNN<decltype(r_tag)::value, kTwo, decltype(b_tag)::value, decltype(e)::value>(
            g, packed, a + i * g.lda, c + i * g.ldc, i, j0);
      });
    });
  });
}

// Products with a transposed B of 9 or 10 columns and A not transposed (Q·Kᵀ and dY·Vᵀ at
// T = 9 or 10) where the quads paths are chosen (gemm_detail::ten_columns_quads, as UseQuadsNN):
// SmallTileNT's 512-bit rows keep 10 of 16 lanes busy, and its transposes of B cost 3.5 512-bit
// shuffles a k-step. Here, as UseQuadsNN's, in 256-bit vectors with every lane working:
// - columns 0..7: one 8-lane vector a row, A(r, kk) broadcast, op(B)'s rows from an 8 × 8
//   transpose of B's rows 0..7 every 8 k-steps (3 256-bit shuffles a k-step); one FMA chain a
//   column over k in increasing order from zero (SmallTileNT's chains: the same bits there);
// - columns 8 and 9 with k in quads: lanes q and 4 + q of a row's second vector sum
//   A(r, kk)·B(8, kk) and A(r, kk)·B(9, kk) over the kk of kk % 4 = q, B's two quads read as
//   they lie (one load and one insert); a last quad of 1..3 k-steps zero in A's and B's lanes
//   past k; added after the k loop as QuadTileNN's (StoreQuadRows).
// Chosen on the whole product's shape, never a block's (see UsePairsNT).
HWY_INLINE bool UseQuadsNT(const GemmArgs& g) {
  return gemm_detail::ten_columns_quads && g.trans_b && !g.trans_a && g.n >= 9 && g.n <= 10 && g.k <= 256;
}

// Rows of a quads-NT tile: 2 · R accumulators of 8 lanes beside op(B)'s 8 rows and the
// operands in the 32 vector registers.
inline constexpr int64_t kQuadsNTRows = 10;

// Lanes 0..3: B(8, k0 + q), lanes 4..7: B(9, k0 + q) (zero without kTwo), for q < kc (zero past
// it); b8 = B's row 8 at k0.
template <bool kTwo, bool kWhole>
HWY_INLINE __m256 Columns89QuadOfBT(const float* HWY_RESTRICT b8, int64_t ldb, int64_t kc) {
  __m128 lo, hi = _mm_setzero_ps();
  if constexpr (kWhole) {
    lo = _mm_loadu_ps(b8);
    if constexpr (kTwo) hi = _mm_loadu_ps(b8 + ldb);
  } else {
    const __mmask8 kb = static_cast<__mmask8>((1u << kc) - 1);
    lo = _mm_maskz_loadu_ps(kb, b8);
    if constexpr (kTwo) hi = _mm_maskz_loadu_ps(kb, b8 + ldb);
  }
  return _mm256_set_m128(hi, lo);
}

// Rows i..i+R (R <= kQuadsNTRows), columns j..j+cols (9 or 10: kTwo) of every product of span
// (see UseQuadsNT).
template <int R, bool kTwo, bool kBias, bool kEpilogue>
HWY_INLINE void QuadTileNT(const GemmArgs& g, const ProductSpan& span, int64_t i, int64_t j, int64_t cols) {
  static_assert(R <= kQuadsNTRows, "see kQuadsNTRows");
  const hn::Full256<float> d8;
  (void)cols;
  const int64_t lda = g.lda, ldb = g.ldb, k = g.k, ldc = g.ldc;
  const QuadStores<kTwo> st(g, j, kBias);
  const float* const a0 = g.a + i * lda;
  const float* const b0 = g.b + j * ldb;
  float* const c0 = g.c + i * ldc + j;
  const auto product = [&](const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                           float* HWY_RESTRICT c) ATTNKIT_INLINE_LAMBDA {
    __m256 acc[R], acc2[R];
#pragma GCC unroll 10
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), acc2[r] = _mm256_setzero_ps();
    // A's rows from two bases 6 rows apart, as SmallTileNN's (ATileValue).
    const float* HWY_RESTRICT a6 = R > 6 ? a + 6 * lda : a;
    const float* HWY_RESTRICT ak = a;
    const float* HWY_RESTRICT ak6 = a6;
    // Columns 0..7, the next kc <= 8 k-steps from k0 (kWhole: 8).
    const auto chunk = [&](int64_t k0, int64_t kc, auto whole_tag) ATTNKIT_INLINE_LAMBDA {
      constexpr bool kWhole = decltype(whole_tag)::value;
      V8 bt[8];  // bt[q]: columns 0..7 of op(B)'s row k0 + q
      {
        V8 in[8];
        if constexpr (kWhole) {
#pragma GCC unroll 8
          for (int q = 0; q < 8; ++q) in[q] = hn::LoadU(d8, b + q * ldb + k0);
        } else {
          const auto km = hn::FirstN(d8, static_cast<size_t>(kc));
#pragma GCC unroll 8
          for (int q = 0; q < 8; ++q) in[q] = hn::MaskedLoad(km, d8, b + q * ldb + k0);
        }
        Transpose8x8(in, bt);
      }
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        if (!kWhole && q >= kc) break;
#pragma GCC unroll 10
        for (int r = 0; r < R; ++r)
          acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(ATileValue<R>(ak, ak6, lda, r)), bt[q].raw, acc[r]);
        ak += 1;
        ak6 += 1;
      }
    };
    int64_t k0 = 0;
#pragma GCC unroll 1
    for (; k0 + 8 <= k; k0 += 8) chunk(k0, 8, std::true_type());
    if (k0 < k) chunk(k0, k - k0, std::false_type());
    // Columns 8 and 9 in a loop of their own (in the one above, their accumulators beside op(B)'s
    // rows and the transpose's spilled to the stack), one quad (or the last kq < 4 k-steps) at k0.
    const float* HWY_RESTRICT b8 = b + 8 * ldb;
    const auto quad = [&](int64_t q0, int64_t kq, auto whole_quad) ATTNKIT_INLINE_LAMBDA {
      constexpr bool kWholeQuad = decltype(whole_quad)::value;
      const __m256 b89 = Columns89QuadOfBT<kTwo, kWholeQuad>(b8 + q0, ldb, kq);
      const __mmask8 ka = static_cast<__mmask8>((1u << kq) - 1);
#pragma GCC unroll 10
      for (int r = 0; r < R; ++r) {
        const float* HWY_RESTRICT ar = ATileRow<R>(a, a6, lda, r) + q0;
        __m256 av;
        if constexpr (kWholeQuad) {
          av = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(ar));
        } else {
          const __m128 q4 = _mm_maskz_loadu_ps(ka, ar);
          av = _mm256_set_m128(q4, q4);
        }
        acc2[r] = _mm256_fmadd_ps(av, b89, acc2[r]);
      }
    };
    int64_t q0 = 0;
#pragma GCC unroll 1
    for (; q0 + 4 <= k; q0 += 4) quad(q0, 4, std::true_type());
    if (q0 < k) quad(q0, k - q0, std::false_type());
    StoreQuadRows<R, kTwo, kBias, kEpilogue>(g, st, acc, acc2, i, j, c);
  };
  ForEachProduct(span, a0, b0, c0, product);
}

// Rows [i0, i1) of every product of span in tiles of at most kQuadsNTRows rows (see UseQuadsNT).
HWY_INLINE void QuadRowsNT(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, const ProductSpan& span) {
  constexpr int kMax = static_cast<int>(kQuadsNTRows);
  ForEachTenColumnTile<kMax>(g, i0, i1, j0, j1, [&](auto r, auto two, auto b, auto e, int64_t i) {
    constexpr int kRows = decltype(r)::value;
    QuadTileNT<kRows, decltype(two)::value, decltype(b)::value, decltype(e)::value>(g, span, i, j0, j1 - j0);
  });
}

// sgemm_slice's whole products of at most kSmallRows1 rows are never the packed or short-k
// path's (both need m >= 48), so the per-call paths below need not ask.
inline constexpr bool kOneTileRowsNeverPacked = kSmallRows1 < 48;
static_assert(kOneTileRowsNeverPacked, "see use_packed_path and use_short_k_path");

// One whole product of R rows, no bias and no epilogue (sgemm_slice's per-call Q·Kᵀ and dY·Vᵀ):
// on the pairs path at T <= 8 (5 to 8 columns), on the quads path at T = 9 or 10 where that is
// chosen (UseQuadsNT, R <= kQuadsNTRows), else in SmallTileNT's full vectors at T = 9 to 16.
template <int R>
struct PairTileOne {
  static HWY_NOINLINE void Run(const GemmArgs& g) { PairTileNT<R, false, false>(g, ProductSpan{}, 0, 0, g.n); }
};
template <int R>
struct QuadTileOneNT {
  static HWY_NOINLINE void Run(const GemmArgs& g) {
    if (g.n == 10) return QuadTileNT<R, true, false, false>(g, ProductSpan{}, 0, 0, g.n);
    QuadTileNT<R, false, false, false>(g, ProductSpan{}, 0, 0, g.n);
  }
};
template <int R>
struct SmallTileOneNT {
  static HWY_NOINLINE void Run(const GemmArgs& g) { SmallTileNT<DF, R, false>(DF(), g, ProductSpan{}, 0, 0, g.n); }
};

// Tile<rows>::Run for rows 1..kMaxRows (g.m of them), indexed by rows - 1.
using OneTileFn = void (*)(const GemmArgs&);
template <template <int> class Tile, size_t... I>
constexpr std::array<OneTileFn, sizeof...(I)> MakeOneTiles(std::index_sequence<I...>) {
  return {{&Tile<static_cast<int>(I) + 1>::Run...}};
}
template <template <int> class Tile, int64_t kMaxRows = kSmallRows1>
HWY_INLINE void RunOneTile(const GemmArgs& g) {
  static constexpr auto kTiles = MakeOneTiles<Tile>(std::make_index_sequence<static_cast<size_t>(kMaxRows)>());
  HWY_DASSERT(g.m >= 1 && g.m <= kMaxRows);
  kTiles[static_cast<size_t>(g.m - 1)](g);
}

// The per-call form of PairRowsNT (see SmallOneTileNN): a whole product of at most
// kSmallRows1 rows on the pairs path, without bias or epilogue, straight to its tile
// function; false (nothing done) for any other product.
HWY_INLINE bool PairOneTileNT(const GemmArgs& g) {
  if (!UsePairsNT(g) || g.m > kSmallRows1 || g.bias != nullptr || g.has_epilogue()) return false;
  RunOneTile<PairTileOne>(g);
  return true;
}

// The per-call form of QuadRowsNT: a whole product of at most kQuadsNTRows rows on the quads
// path, without bias or epilogue, straight to its tile function; false (nothing done) for any
// other product.
HWY_INLINE bool QuadOneTileNT(const GemmArgs& g) {
  if (!UseQuadsNT(g) || g.m > kQuadsNTRows || g.bias != nullptr || g.has_epilogue()) return false;
  RunOneTile<QuadTileOneNT, kQuadsNTRows>(g);
  return true;
}

// A whole product with B transposed, A not, no bias and no epilogue, that the small path
// computes in one row tile of SmallTileNT (the choice GemmSmall makes, made here): straight to
// its tile function. False (nothing done) for any other product, and for the pairs path's
// (UsePairsNT, which takes them first). 9 to 16 columns reach it (5 to 8 are the pairs path's,
// fewer not the small path's), so GemmSmall would pick full vectors.
HWY_INLINE bool SmallOneTileNT(const GemmArgs& g) {
  if (!g.trans_b || g.trans_a || g.m > kSmallRows1 || UsePairsNT(g) || UseQuadsNT(g) ||
      !UseSmallPath(g, 0, g.m, 0, g.n))
    return false;
  RunOneTile<SmallTileOneNT>(g);
  return true;
}

// Rows [i0, i1) of every product of span, B transposed (SmallTileNT), in tiles.
template <class D, bool kTransA>
HWY_INLINE void SmallRowsNT(D d, const GemmArgs& g, int64_t i0, int64_t i1, int64_t j, int64_t cols,
                            const ProductSpan& span) {
  ForEachRowTile<static_cast<int>(kSmallRows1)>(i0, i1, [&](int64_t i, int64_t rows) {
    WithCount<static_cast<int>(kSmallRows1)>(rows, [&](auto r_tag) {
      SmallTileNT<D, decltype(r_tag)::value, kTransA>(d, g, span, i, j, cols);  // (its own loop over the products)
    });
  });
}

inline constexpr int SmallRowsMax(int nv) {
  return static_cast<int>(nv == 1 ? kSmallRows1 : nv == 2 ? kSmallRows2 : kSmallRows4);
}

// Every product of a batch (more than one product in span), operands in o at the first one's.
template <class D, int NV, int R, bool kTransA, bool kFull, bool kBias, bool kEpilogue>
HWY_NOINLINE void SmallTileBatchNN(const GemmArgs& g, BatchOperands o, int64_t i, int64_t j, int64_t cols,
                                   const ProductSpan& span) {
  // The operands stepped product to product in o, a local that stores of C cannot alias, with
  // no division per product. (A function of its own: inlined beside the per-call tiles, its
  // registers were allocated worse: batched 10 × 10 × 16 2.15× → 1.63× OpenBLAS.)
  int64_t hi = 0;
  if (span.p0 != 0) {
    const int64_t bi = span.p0 / span.heads;
    hi = span.p0 % span.heads;
    o.pa += bi * span.a_batch + hi * span.a_head;
    o.pb += bi * span.b_batch + hi * span.b_head;
    o.pc += bi * span.c_batch + hi * span.c_head;
  }
  // From the last head of a batch to the first of the next.
  const int64_t heads = span.heads, last = heads - 1;
  const int64_t a_head = span.a_head, b_head = span.b_head, c_head = span.c_head;
  const int64_t a_wrap = span.a_batch - last * a_head, b_wrap = span.b_batch - last * b_head,
                c_wrap = span.c_batch - last * c_head;
  for (int64_t p = span.p0; p < span.p1; ++p) {
    SmallTileNN<D, R, NV, kTransA, kFull, kBias, kEpilogue>(D(), g, o, i, j, cols);
    if (++hi == heads) {
      hi = 0;
      o.pa += a_wrap, o.pb += b_wrap, o.pc += c_wrap;
    } else {
      o.pa += a_head, o.pb += b_head, o.pc += c_head;
    }
  }
}

// One row tile of every product of span, B not transposed: a plain function per (vectors,
// rows, flags), reached through a table (SmallTileNNFor), so that a per-call product goes from
// the dispatch to its kernel in one call.
template <class D, int NV, int R, bool kTransA, bool kFull, bool kBias, bool kEpilogue>
HWY_NOINLINE void SmallTileSpanNN(const GemmArgs& g, int64_t i, int64_t j, int64_t cols, const ProductSpan& span) {
  const bool one = span.p0 == 0 && span.p1 == 1;  // one product: every per-call GEMM
  const Combine combine = SmallCombine(g);
  const bool prefetch_c = PrefetchC(g, combine);
  if (one && !prefetch_c) {
    SmallTileNN<D, R, NV, kTransA, kFull, kBias, kEpilogue>(D(), g, CallOperands<kTransA>{g, i, j}, i, j, cols);
    return;
  }
  // (A product whose C is prefetched: its operands in locals too, the prefetches' addresses at
  // hand: dx of Linear(128, 10) 0.92–0.93× → 1.01–1.16× OpenBLAS across runs, against
  // CallOperands'.)
  const int64_t lda = g.lda, ldc = g.ldc;
  const BatchOperands o{g.a + (kTransA ? i : i * lda), g.b + j, g.c + i * ldc + j, lda, g.ldb, ldc, g.k,
                        g.alpha, g.beta, combine, prefetch_c};
  if (one) {
    SmallTileNN<D, R, NV, kTransA, kFull, kBias, kEpilogue>(D(), g, o, i, j, cols);
  } else {
    SmallTileBatchNN<D, NV, R, kTransA, kFull, kBias, kEpilogue>(g, o, i, j, cols, span);
  }
}

using SmallTileFn = void (*)(const GemmArgs&, int64_t, int64_t, int64_t, const ProductSpan&);

// Entry flags · kMax + rows - 1, flags = 8·trans_a + 4·full + 2·bias + epilogue.
template <class D, int NV, size_t... I>
constexpr std::array<SmallTileFn, sizeof...(I)> MakeSmallTilesNN(std::index_sequence<I...>) {
  constexpr size_t kMax = static_cast<size_t>(SmallRowsMax(NV));
  return {{&SmallTileSpanNN<D, NV, static_cast<int>(I % kMax) + 1, ((I / kMax) & 8) != 0, ((I / kMax) & 4) != 0,
                            ((I / kMax) & 2) != 0, ((I / kMax) & 1) != 0>...}};
}

template <int NV>
using SmallTilesNN = std::array<SmallTileFn, 16 * static_cast<size_t>(SmallRowsMax(NV))>;

// The tables of tile functions, each defined in a file of its own (ops/gemm_small_nn_*.cc,
// ATTNKIT_DEFINE_SMALL_TILES_NN): their 640 functions are about 60% of the GEMM's AVX-512
// code, and in one file with the rest they were a single ~6.5-minute compile.
extern const SmallTilesNN<1> kSmallTilesNN256x1;  // one 256-bit vector a row
extern const SmallTilesNN<1> kSmallTilesNNx1;     // one full vector a row
extern const SmallTilesNN<2> kSmallTilesNNx2;
extern const SmallTilesNN<4> kSmallTilesNNx4;
#define ATTNKIT_DEFINE_SMALL_TILES_NN(name, D, NV) \
  const SmallTilesNN<NV> name = MakeSmallTilesNN<D, NV>(std::make_index_sequence<16 * SmallRowsMax(NV)>());

template <class D, int NV>
HWY_INLINE SmallTileFn SmallTileNNFor(bool trans_a, bool full, bool bias, bool epilogue, int64_t rows) {
  constexpr int kMax = SmallRowsMax(NV);
  static_assert(std::is_same_v<D, DF> || (NV == 1 && std::is_same_v<D, hn::Full256<float>>),
                "full vectors, or 256-bit ones for one a row");
  const SmallTilesNN<NV>* table;
  if constexpr (!std::is_same_v<D, DF>) {
    table = &kSmallTilesNN256x1;
  } else if constexpr (NV == 1) {
    table = &kSmallTilesNNx1;
  } else if constexpr (NV == 2) {
    table = &kSmallTilesNNx2;
  } else {
    static_assert(NV == 4, "one, two or four vectors a row");
    table = &kSmallTilesNNx4;
  }
  const size_t flags = (trans_a ? 8u : 0u) | (full ? 4u : 0u) | (bias ? 2u : 0u) | (epilogue ? 1u : 0u);
  return (*table)[flags * kMax + static_cast<size_t>(rows - 1)];
}

template <class D, int NV>
HWY_INLINE void SmallBlock(D d, const GemmArgs& g, int64_t i0, int64_t i1, int64_t j,
                           int64_t cols, const ProductSpan& span) {
  if (g.trans_b) {  // (no bias, no epilogue: see UseSmallPath)
    if constexpr (NV == 1) {
      WithFlag(g.trans_a, [&](auto ta) { SmallRowsNT<D, decltype(ta)::value>(d, g, i0, i1, j, cols, span); });
    }
    return;
  }
  // kFull: no masks.
  const bool full = cols == NV * static_cast<int64_t>(hn::Lanes(d));
  const bool bias = g.bias != nullptr, epilogue = g.has_epilogue();
  ForEachRowTile<SmallRowsMax(NV)>(i0, i1, [&](int64_t i, int64_t rows) {
    SmallTileNNFor<D, NV>(g.trans_a, full, bias, epilogue, rows)(g, i, j, cols, span);
  });
}

// A whole product with B not transposed, no bias and no epilogue (sgemm_slice's per-call
// products) that the small path computes in one row tile: its tile function called at once,
// the choice GemmSmall and SmallBlock would make made here in a few compares. False (nothing
// done) for any other product.
HWY_INLINE bool SmallOneTileNN(const GemmArgs& g) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF())), m = g.m, n = g.n;
  // (At most kSmallRows1 rows: never the packed or short-k path's, see kOneTileRowsNeverPacked.)
  if (g.trans_b || g.bias != nullptr || g.has_epilogue() || m > kSmallRows1 || n < 5 || n > 2 * lanes ||
      g.k > 256 || UsePairsNN(g) || UseQuadsNN(g))
    return false;
  SmallTileFn tile;
  if (n <= 8 && lanes > 8) {
    tile = SmallTileNNFor<hn::Full256<float>, 1>(g.trans_a, n == 8, false, false, m);
  } else if (n <= lanes) {
    tile = SmallTileNNFor<DF, 1>(g.trans_a, n == lanes, false, false, m);
  } else {
    if (m > kSmallRows2) return false;
    tile = SmallTileNNFor<DF, 2>(g.trans_a, n == 2 * lanes, false, false, m);
  }
  tile(g, 0, 0, n, ProductSpan{});
  return true;
}

// C[i0..i1, j0..j1] of g on the small path (UseSmallPath said so), for every product of
// span: 256-bit vectors for at most 8 columns (twice the FMAs per cycle of 512-bit ones where
// those are split in two, as on Zen 4), else one or two full vectors.
inline void GemmSmall(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                      const ProductSpan& span = ProductSpan{}) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), cols = j1 - j0;
  if (cols <= 8 && lanes > 8) {
    SmallBlock<hn::Full256<float>, 1>(hn::Full256<float>(), g, i0, i1, j0, cols, span);
  } else if (cols <= lanes) {
    SmallBlock<DF, 1>(d, g, i0, i1, j0, cols, span);
  } else if (cols <= 2 * lanes) {
    SmallBlock<DF, 2>(d, g, i0, i1, j0, cols, span);
  } else {  // four whole vectors: GemmDirect's short-k blocks (B not transposed)
    SmallBlock<DF, 4>(d, g, i0, i1, j0, cols, span);
  }
}

#endif  // ATTNKIT_HAVE_SMALL_GEMM

}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_OPS_GEMM_SMALL_INL_H_
