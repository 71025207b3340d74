// Fused short-sequence attention backward (see attention.h). Keys are rows and queries are
// lanes (dPᵀ, Pᵀ, dSᵀ are [tk, tq padded to whole vectors]), so the softmax backward's sums
// over keys are vertical, Lanes queries at a time, with no cross-lane reductions. The four
// products are one register-blocked primitive, RowsTimesMatrix (R output rows × V vectors of
// accumulators, one broadcast coefficient times one matrix row per step), with different
// strides:
//   dPᵀ = V·dyᵀ   rows = keys,    coefficients = v rows,     matrix = dyᵀ (transposed here)
//   dQ = dS·K     rows = queries, coefficients = dSᵀ columns, matrix = k rows
//   dK = dSᵀ·Q    rows = keys,    coefficients = dSᵀ rows,    matrix = q rows
//   dV = Pᵀ·dy    rows = keys,    coefficients = Pᵀ rows,     matrix = dy rows
// Rows are computed R at a time for independent FMA chains; each row's accumulation runs over
// the same sequence of operations for any R, so results do not depend on the blocking.
// Head-summed attentions (AttentionDims::sum_heads: the training value fold, one dy for all
// heads, values up to 128 columns wide per head) get dPᵀ of all of an entry's heads from dot
// products along the value columns instead (SummedScoresT): dy and V read as rows, no
// transpose of dy and no broadcast per FMA.
// Sequence lanes and head-dim lanes each take the full vector or 8 lanes, whichever pads less
// (see UseFull), so T = 8 and head sizes of 8, 24, 40 stay on this path on 16-lane AVX-512.
// The forward pass keeps the GEMM path: its scores and softmax vectorize short rows across
// all products without padding, where this layout would pad query lanes and transpose.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "ops/softmax.h"

#if defined(__SANITIZE_ADDRESS__)
#define ATTNKIT_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNKIT_ASAN_BUILD 1
#endif
#endif
#ifndef ATTNKIT_ASAN_BUILD
#define ATTNKIT_ASAN_BUILD 0
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attention.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
// 8 lanes where vectors are wider (AVX-512): sequences of 8 tokens and head sizes of 8, 24 or
// 40 fill these and would leave half of a 16-lane vector empty.
using D8 = hn::CappedTag<float, 8>;

constexpr int64_t kMaxKeys = 16;     // tk
constexpr int64_t kMaxQueries = 64;  // tq
constexpr int64_t kMaxVectors = 8;   // sequence vectors (tq, tk padded), and a product's column block
constexpr size_t kMaxLanes = hn::MaxLanes(DF());
constexpr int64_t kMaxHeadDim = 128;  // dh and dvh (whole vectors): 128 value columns of a folded head
constexpr int64_t kMaxSummedRows = 64;  // heads · tk of a head-summed backward's dot-product scores

template <class D>
HWY_INLINE int64_t LanesOf(D d) {
  return static_cast<int64_t>(hn::Lanes(d));
}

// Makes the compiler hold v in a register: an operand loaded once and read by several FMAs
// would otherwise be folded into each of them as a memory operand (one load per FMA).
// Only x86 SIMD targets (EMU128's and SCALAR's vectors are not registers), and not in
// AddressSanitizer builds (clang keeps such locals in memory there and rejects the operand).
template <class V>
HWY_INLINE void KeepInRegister(V& v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3 && !ATTNKIT_ASAN_BUILD
  asm("" : "+v"(v.raw));
#else
  (void)v;
#endif
}

// out[r·ldo + v·N + lane] (+)= Σ_{l < len} coef[r·crs + l·cls] · mat[l·ms + v·N + lane]
// for r < R, v < V, with N = Lanes(d).
template <int R, int V, class D>
HWY_INLINE void RowsBlock(D d, const float* HWY_RESTRICT coef, int64_t crs, int64_t cls, int64_t len,
                          const float* HWY_RESTRICT mat, int64_t ms, float* HWY_RESTRICT out,
                          int64_t ldo, bool add) {
  const int64_t N = LanesOf(d);
  // The first term starts the sums (len >= 1): zero-initialized accumulator arrays were set
  // with a `rep stos` on the stack and loaded back, a sixth of this function's time.
  hn::Vec<D> acc[R][V];
  {
    hn::Vec<D> row[V];
    for (int v = 0; v < V; ++v) row[v] = hn::LoadU(d, mat + v * N);
    for (int r = 0; r < R; ++r) {
      const auto c = hn::Set(d, coef[r * crs]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Mul(c, row[v]);
    }
  }
  for (int64_t l = 1; l < len; ++l) {
    hn::Vec<D> row[V];
    for (int v = 0; v < V; ++v) {
      row[v] = hn::LoadU(d, mat + l * ms + v * N);
      // One load for the R FMAs that read it (the compiler folds it into each of them: R
      // loads per vector, and with 2 rows of 8 vectors loads were what the loop waited on).
      if constexpr (R > 1) KeepInRegister(row[v]);
    }
    for (int r = 0; r < R; ++r) {
      const auto c = hn::Set(d, coef[r * crs + l * cls]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(c, row[v], acc[r][v]);
    }
  }
  if (add) {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) {
        float* o = out + r * ldo + v * N;
        hn::StoreU(hn::Add(hn::LoadU(d, o), acc[r][v]), d, o);
      }
  } else {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) hn::StoreU(acc[r][v], d, out + r * ldo + v * N);
  }
}

// The last `rows` (< K + 1) rows of RowsOf, as one block of that many rows: single-row
// blocks were one FMA chain each, bound by the FMA latency (at T = 10, two of the ten rows
// took as long as the other eight).
template <int K, int V, class D>
HWY_INLINE void RowsRest(D d, int64_t rows, const float* coef, int64_t crs, int64_t cls, int64_t len,
                         const float* mat, int64_t ms, float* out, int64_t ldo, bool add) {
  if constexpr (K > 0) {
    if (rows == K) return RowsBlock<K, V>(d, coef, crs, cls, len, mat, ms, out, ldo, add);
    RowsRest<K - 1, V>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
  }
}

template <int V, class D>
HWY_INLINE void RowsOf(D d, int64_t rows, const float* coef, int64_t crs, int64_t cls, int64_t len,
                       const float* mat, int64_t ms, float* out, int64_t ldo, bool add) {
  // Up to 12 accumulators, leaving room for the V matrix vectors and a broadcast in the 16
  // vector registers of AVX2 / SSE4 (32 on AVX-512).
  constexpr int kAccumulators = kMaxLanes >= 16 ? 12 : std::min(12, 14 - V);
  // (8 vectors: 2 rows on AVX-512, 16 accumulators + 8 matrix vectors of its 32 registers; one
  // row was 9 loads per 8 FMAs.)
  constexpr int R = kMaxLanes >= 16 && V == 8 ? 2 : V >= kAccumulators ? 1 : kAccumulators / V;
  int64_t r = 0;
  for (; r + R <= rows; r += R)
    RowsBlock<R, V>(d, coef + r * crs, crs, cls, len, mat, ms, out + r * ldo, ldo, add);
  RowsRest<R - 1, V>(d, rows - r, coef + r * crs, crs, cls, len, mat, ms, out + r * ldo, ldo, add);
}

// `rows` rows of `vecs` vectors of Lanes(d) each, in blocks of at most kMaxVectors; see RowsBlock.
template <class D>
HWY_NOINLINE void RowsTimesMatrix(D d, int64_t rows, int64_t vecs, const float* coef, int64_t crs, int64_t cls,
                                  int64_t len, const float* mat, int64_t ms, float* out, int64_t ldo, bool add) {
  const int64_t N = LanesOf(d);
  for (; vecs > kMaxVectors; vecs -= kMaxVectors, mat += kMaxVectors * N, out += kMaxVectors * N)
    RowsOf<kMaxVectors>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
  switch (vecs) {
    case 1: return RowsOf<1>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
    case 2: return RowsOf<2>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
    case 3: return RowsOf<3>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
    case 4: return RowsOf<4>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
    case 5: return RowsOf<5>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
    case 6: return RowsOf<6>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
    case 7: return RowsOf<7>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
    default: return RowsOf<8>(d, rows, coef, crs, cls, len, mat, ms, out, ldo, add);
  }
}

// dQ = dS·K and dK = dSᵀ·Q of one product together, column vector by column vector: both read
// coefficient dS[i, j] (st[j·ts + i]), so one pass over (i, j) feeds each from the one scalar,
// an embedded broadcast per FMA, with the TQ + TK accumulators in registers (two RowsBlocks
// of 10 rows × 1 vector took ~1.5 cycles an FMA on Zen 4: their setup and stores around
// 10-step chains). Each element's chain is RowsBlock's: its first term a multiply, the rest FMAs
// in order (dQ over j, dK over i), then added to the output with add_q / add_k: the same bits.
template <int TQ, int TK, class D>
HWY_INLINE void ScoresGradBlocks(D d, const float* HWY_RESTRICT st, int64_t ts, const float* HWY_RESTRICT qp,
                                 const float* HWY_RESTRICT kp, int64_t ld, int64_t vecs, float* HWY_RESTRICT dq,
                                 float* HWY_RESTRICT dk, bool add_q, bool add_k) {
  const int64_t N = LanesOf(d);
  for (int64_t v = 0; v < vecs; ++v) {
    const int64_t col = v * N;
    // Key j outer: query i's row of Q stays in a register for every j, key j's row of K for
    // its pass, and the coefficients of one key are one row of st (a pointer and constant
    // offsets; per-(i, j) addresses of st and K took more registers than there are).
    hn::Vec<D> aq[TQ], ak[TK], qr[TQ];
    for (int i = 0; i < TQ; ++i) qr[i] = hn::LoadU(d, qp + i * ld + col);
    {
      const auto kr = hn::LoadU(d, kp + col);
      const auto c0 = hn::Set(d, st[0]);
      aq[0] = hn::Mul(c0, kr);
      auto a = hn::Mul(c0, qr[0]);
      for (int i = 1; i < TQ; ++i) {
        const auto c = hn::Set(d, st[i]);
        aq[i] = hn::Mul(c, kr);
        a = hn::MulAdd(c, qr[i], a);
      }
      ak[0] = a;
    }
    for (int j = 1; j < TK; ++j) {
      const float* sj = st + j * ts;
      const auto kr = hn::LoadU(d, kp + j * ld + col);
      const auto c0 = hn::Set(d, sj[0]);
      aq[0] = hn::MulAdd(c0, kr, aq[0]);
      auto a = hn::Mul(c0, qr[0]);
      for (int i = 1; i < TQ; ++i) {
        const auto c = hn::Set(d, sj[i]);
        aq[i] = hn::MulAdd(c, kr, aq[i]);
        a = hn::MulAdd(c, qr[i], a);
      }
      ak[j] = a;
    }
    // (The runtime flags chosen outside the vector expressions: see STYLE / the AVX-512 note.)
    if (add_q) {
      for (int i = 0; i < TQ; ++i) hn::StoreU(hn::Add(hn::LoadU(d, dq + i * ld + col), aq[i]), d, dq + i * ld + col);
    } else {
      for (int i = 0; i < TQ; ++i) hn::StoreU(aq[i], d, dq + i * ld + col);
    }
    if (add_k) {
      for (int j = 0; j < TK; ++j) hn::StoreU(hn::Add(hn::LoadU(d, dk + j * ld + col), ak[j]), d, dk + j * ld + col);
    } else {
      for (int j = 0; j < TK; ++j) hn::StoreU(ak[j], d, dk + j * ld + col);
    }
  }
}

// Whether ScoresGrad takes these dims: both counts up to 12 (24 accumulators of AVX-512's 32
// registers; AVX2's 16 hold too few).
constexpr int64_t kScoresGradMax = kMaxLanes >= 16 ? 12 : 0;

template <class D>
HWY_NOINLINE void ScoresGrad(D d, int64_t tq, int64_t tk, const float* st, int64_t ts, const float* qp,
                             const float* kp, int64_t ld, int64_t vecs, float* dq, float* dk, bool add_q, bool add_k) {
  if constexpr (kScoresGradMax > 0) {
    WithCount<kScoresGradMax>(tq, [&](auto q) {
      WithCount<kScoresGradMax>(tk, [&](auto k) {
        ScoresGradBlocks<decltype(q)::value, decltype(k)::value>(d, st, ts, qp, kp, ld, vecs, dq, dk, add_q, add_k);
      });
    });
  } else {
    (void)d, (void)tq, (void)tk, (void)st, (void)ts, (void)qp, (void)kp, (void)ld, (void)vecs, (void)dq, (void)dk;
    (void)add_q, (void)add_k;
  }
}

// The short path's limits for sequence lanes of Lanes(dt) (keys of the scores, queries of
// the backward) and head-dim lanes of Lanes(dh).
template <class DT, class DH>
HWY_INLINE bool Fits(DT dt, DH dhd, const AttentionDims& m) {
  const int64_t NT = LanesOf(dt), NH = LanesOf(dhd);
  const int64_t tqp = (m.tq + NT - 1) / NT * NT, tkp = (m.tk + NT - 1) / NT * NT;
  return m.tk >= 1 && m.tk <= kMaxKeys && m.tq >= 1 && m.tq <= kMaxQueries && tqp / NT <= kMaxVectors &&
         tkp / NT <= kMaxVectors && m.dh % NH == 0 && m.dvh % NH == 0 && m.dh >= NH && m.dvh >= NH &&
         m.dh <= kMaxHeadDim && m.dvh <= kMaxHeadDim;
}

// dst[c·ldd + r] = src[r·lds + c] for r < rows, c < cols, and zeros for r in [rows, pad_to).
// Where 256-bit vectors exist, tiles of at least 8 × 8 move in 8 × 8 blocks through register
// shuffles (the scalar loop was a quarter of the kernel's time).
template <class D>
HWY_INLINE void TransposeTile(D d, const float* HWY_RESTRICT src, int64_t lds, int64_t rows, int64_t cols,
                              float* HWY_RESTRICT dst, int64_t ldd, int64_t pad_to) {
  // Padding first: whole zero vectors over [pad_to − N, pad_to) when rows > pad_to − N (the
  // usual case), rewritten below where they cover real rows.
  const int64_t N = LanesOf(d);
  const bool vector_pad = pad_to > rows && pad_to % N == 0 && rows >= pad_to - N;
  for (int64_t c = 0; c < cols; ++c) {
    float* out = dst + c * ldd;
    if (vector_pad) {
      hn::StoreU(hn::Zero(d), d, out + pad_to - N);
    } else {
      for (int64_t r = rows; r < pad_to; ++r) out[r] = 0.0f;
    }
  }
#if ATTNKIT_HAVE_TRANSPOSE8
  // Whole 8 × 8 blocks; a ragged last block of rows or columns overlaps the one before it and
  // rewrites the same values (the scalar copies of a 10 × 16 tile's last two rows were most of
  // the fused backward's own time at T = 10).
  if (rows >= 8 && cols >= 8) return TransposeOverlapping8(src, lds, rows, cols, dst, ldd);
#endif
  for (int64_t c = 0; c < cols; ++c) {
    float* out = dst + c * ldd;
    for (int64_t r = 0; r < rows; ++r) out[r] = src[r * lds + c];
  }
}

// Forbidden scores of batch entry b transposed like the scores (keys are rows, queries are
// lanes: [tk, tqp], non-zero = forbidden), or nullptr if none.
static const uint8_t* TransposedMask(const AttentionDims& m, const AttentionMasking& mk, int64_t b,
                                     int64_t tqp, uint8_t* HWY_RESTRICT buf) {
  if (!mk.mask && !mk.causal) return nullptr;
  const uint8_t* flags = mk.mask ? mk.mask + b * m.tq * m.tk : nullptr;
  for (int64_t j = 0; j < m.tk; ++j) {
    for (int64_t i = 0; i < m.tq; ++i)
      buf[j * tqp + i] = static_cast<uint8_t>((mk.causal && j > i) || (flags && flags[i * m.tk + j]));
    for (int64_t i = m.tq; i < tqp; ++i) buf[j * tqp + i] = 0;
  }
  return buf;
}

// Lane q of the result: the sum of acc[q]'s lanes, for K = Lanes(d) accumulators, by a fixed
// tree: within each 128-bit block lanes (0 + 2) and (1 + 3), then their sum, then the blocks
// pairwise ((0 + 1) + (2 + 3) for four). Every accumulator's lanes are added in the same order
// whatever its position, so a sum depends only on its own lanes. The block steps use in-block
// unpacks (a 2-source permute per accumulator pair and level, with a register copy each, was
// ~30% of SummedScoresT's time on Zen 4).
template <int K, class D>
HWY_INLINE hn::Vec<D> LaneSums(D d, const hn::Vec<D> (&acc)[K]) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  return acc[0];
#else
  using V = hn::Vec<D>;
  static_assert(K >= 4 && K <= 16, "one accumulator per lane of 4 to 16");
  const hn::Repartition<double, D> dd;
  // [a0 + a2, b0 + b2, a1 + a3, b1 + b3] per block for each pair (a, b).
  V s1[K / 2];
#pragma GCC unroll 8
  for (int q = 0; q < K / 2; ++q)
    s1[q] = hn::Add(hn::InterleaveLower(d, acc[2 * q], acc[2 * q + 1]), hn::InterleaveUpper(d, acc[2 * q], acc[2 * q + 1]));
  // Each block's sums of accumulators 4q .. 4q + 3, in that order.
  V s2[K / 4];
#pragma GCC unroll 4
  for (int q = 0; q < K / 4; ++q) {
    const auto x = hn::BitCast(dd, s1[2 * q]), y = hn::BitCast(dd, s1[2 * q + 1]);
    s2[q] = hn::Add(hn::BitCast(d, hn::InterleaveLower(dd, x, y)), hn::BitCast(d, hn::InterleaveUpper(dd, x, y)));
  }
  if constexpr (K == 4) {
    return s2[0];
  } else if constexpr (K == 8) {  // two blocks: [lower blocks | upper blocks] + the same of the others
    return hn::Add(hn::ConcatLowerLower(d, s2[1], s2[0]), hn::ConcatUpperUpper(d, s2[1], s2[0]));
  } else {
#if HWY_TARGET <= HWY_AVX3
    // Four blocks: blocks 0 and 2 of x then of y, plus blocks 1 and 3, twice.
    auto pairs = [](V x, V y) {
      return V{_mm512_add_ps(_mm512_shuffle_f32x4(x.raw, y.raw, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(x.raw, y.raw, _MM_SHUFFLE(3, 1, 3, 1)))};
    };
    return pairs(pairs(s2[0], s2[1]), pairs(s2[2], s2[3]));
#else
    static_assert(K != 16, "16 lanes are AVX-512's");
    return s2[0];
#endif
  }
#endif
}

// out[c·ldo + r] = a_r · b_c (dot products over len, whole vectors of d) for r < R and the
// first `cols` of c < C, R·C = Lanes(d): one FMA chain per lane and dot, then LaneSums.
template <int R, int C, class D>
HWY_INLINE void DotTileT(D d, const float* const* HWY_RESTRICT ar, const float* const* HWY_RESTRICT br,
                         int64_t len, float* HWY_RESTRICT out, int64_t ldo, int64_t cols) {
  constexpr int K = static_cast<int>(hn::MaxLanes(D()));
  static_assert(R * C == K, "one accumulator per lane");
  const int64_t N = LanesOf(d);
  hn::Vec<D> acc[K];  // acc[c·R + r]
  {
    hn::Vec<D> a[R];
    for (int r = 0; r < R; ++r) a[r] = hn::LoadU(d, ar[r]);
    for (int c = 0; c < C; ++c) {
      const auto bv = hn::LoadU(d, br[c]);
      for (int r = 0; r < R; ++r) acc[c * R + r] = hn::Mul(a[r], bv);
    }
  }
  for (int64_t e = N; e < len; e += N) {
    hn::Vec<D> a[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      a[r] = hn::LoadU(d, ar[r] + e);
      if constexpr (C > 1) KeepInRegister(a[r]);  // (one load for its C FMAs)
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      auto bv = hn::LoadU(d, br[c] + e);
      if constexpr (R > 1) KeepInRegister(bv);  // (one load for its R FMAs)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[c * R + r] = hn::MulAdd(a[r], bv, acc[c * R + r]);
    }
  }
  const auto sums = LaneSums<K>(d, acc);
  if constexpr (R == K) {  // one key row: its queries are the vector
    hn::StoreU(sums, d, out);
#if HWY_TARGET != HWY_SCALAR
  } else if constexpr (2 * R == K) {  // two key rows: a half each
    const hn::Half<D> dh;
    hn::StoreU(hn::LowerHalf(dh, sums), dh, out);
    if (cols > 1) hn::StoreU(hn::UpperHalf(dh, sums), dh, out + ldo);
#endif
  } else {
    HWY_ALIGN float lanes[K];
    hn::Store(sums, d, lanes);
    for (int c = 0; c < C; ++c) {  // a key row's R queries: one copy of R·4 bytes each
      if (c >= cols) break;
      std::memcpy(out + c * ldo, lanes + c * R, R * sizeof(float));
    }
  }
}

// dPᵀ of the heads [h0, h1) of batch entry b of a head-summed attention (every head reads the
// one dy): st[(h − h0)·tk + j][i] = dy_i · v_hj over the dvh value columns, here for the
// queries [q0, q1) (query lanes up to the next multiple of R past q1 get query q1 − 1's values;
// tqp, a multiple of R, is st's row stride) and the key rows [c_begin, c_end) of the heads'
// (h − h0)·tk + j, whose values are at vrow[(h − h0)·tk + j] (SummedKeyRows). Dot products
// along the value columns: the rows of dy and of V are read as they are, no transposes; tiles
// of R queries × C key rows, R·C lanes.
template <int R, int C, class D>
HWY_NOINLINE void SummedScoresT(D d, const float* dyb, int64_t ldy, const float* const* vrow, int64_t len,
                                int64_t q0, int64_t q1, int64_t c_begin, int64_t c_end, float* st, int64_t tqp) {
  // The call's key rows in a local copy, which the tiles' vector stores (may-alias types)
  // cannot change: read through the parameter, which for all the compiler knows they could,
  // neighbor-sum's attention backward took 57.8 µs against 55.0.
  const float* rows[kMaxSummedRows];
  for (int64_t kr = c_begin; kr < c_end; ++kr) rows[kr - c_begin] = vrow[kr];
  for (int64_t i0 = q0; i0 < q1; i0 += R) {
    const float* ar[R];
    for (int r = 0; r < R; ++r) ar[r] = dyb + std::min<int64_t>(i0 + r, q1 - 1) * ldy;
    for (int64_t c0 = c_begin; c0 < c_end; c0 += C) {
      const float* br[C];
      for (int c = 0; c < C; ++c) br[c] = rows[std::min<int64_t>(c0 + c, c_end - 1) - c_begin];
      DotTileT<R, C>(d, ar, br, len, st + c0 * tqp + i0, tqp, c_end - c0);
    }
  }
}

// The values of key row kr = (h − h0)·tk + j of SummedScoresT, for kr < rows: head h's columns
// of the entry's value row j (erows[j]). Found once per entry and used by its three calls: a
// division per row and tile was ~30% of SummedScoresT's time (neighbor-sum, 16 lanes).
HWY_INLINE void SummedKeyRows(const float* const* erows, const AttentionDims& m, int64_t h0, int64_t rows,
                              const float** vrow) {
  int64_t h = h0, j = 0;
  for (int64_t kr = 0; kr < rows; ++kr) {
    vrow[kr] = erows[j] + h * m.dvh;
    if (++j == m.tk) j = 0, ++h;
  }
}

// The tiles of SummedScoresT for `rows` key rows and tq queries (K = Lanes(d); R a power of two
// dividing the query lanes nt, C = K / R): first, optionally, the queries [0, q_split) (a
// multiple of K / 2) in tiles of K / 2 queries × 2 key rows, whose sums are stored as two
// half vectors; then the other queries in R1 × C1 tiles over the first rows − rows % C1 key
// rows and R2 × C2 over the rest — the plan of least cost, a tile costing steps · max(K FMAs,
// R + C loads) for its steps vectors of dot products, plus its stores (1 or 2 vectors when
// R >= K / 2, else R values for each of its C key rows). Neighbor-sum's 10 queries × 20 key
// rows on 16 lanes: 10 tiles of 8 × 2 (queries 0..7), 3 of 2 × 8 (queries 8, 9; the last of 4 key rows).
struct SummedTiles {
  int64_t q_split = 0;                // queries [0, q_split): tiles of K / 2 × 2 over every key row
  int64_t r1 = 1, r2 = 1, split = 0;  // queries [q_split, tq): key rows [0, split) take R1, [split, rows) R2
};
template <class D>
HWY_INLINE SummedTiles PlanSummedTiles(D d, int64_t tq, int64_t rows, int64_t nt, int64_t steps) {
  const int64_t K = LanesOf(d);
  auto cost = [&](int64_t r, int64_t queries, int64_t row_count, bool whole) {
    const int64_t c = K / r, col_tiles = whole ? row_count / c : (row_count + c - 1) / c;
    const int64_t stores = 2 * r >= K ? c : c * r;
    return (queries + r - 1) / r * col_tiles * (steps * std::max(K, r + c) + stores);
  };
  // The best R1, R2 plan of queries [q0, tq), and its cost.
  auto plan_rest = [&](int64_t q0, SummedTiles* best) {
    int64_t best_cost = -1;
    for (int64_t r1 = 1; r1 <= K && r1 <= nt; r1 *= 2) {
      const int64_t split = rows - rows % (K / r1);
      for (int64_t r2 = 1; r2 <= K && r2 <= nt; r2 *= 2) {
        const int64_t c =
            cost(r1, tq - q0, split, true) + (split < rows ? cost(r2, tq - q0, rows - split, false) : 0);
        if (best_cost < 0 || c < best_cost) best->r1 = r1, best->r2 = r2, best->split = split, best_cost = c;
        if (split == rows) break;  // (no rest: r2 does not matter)
      }
    }
    return best_cost;
  };
  SummedTiles best;
  const int64_t best_cost = plan_rest(0, &best);
  const int64_t half = K / 2, q_split = tq / half * half;
  if (half >= 1 && half <= nt && q_split > 0) {
    SummedTiles halves;
    halves.q_split = q_split;
    const int64_t c = cost(half, q_split, rows, false) + (q_split < tq ? plan_rest(q_split, &halves) : 0);
    if (c < best_cost) best = halves;
  }
  return best;
}

template <class D>
HWY_INLINE void SummedScoresTiled(D d, int64_t r, const float* dyb, int64_t ldy, const float* const* vrow,
                                  int64_t len, int64_t q0, int64_t q1, int64_t c_begin, int64_t c_end, float* st,
                                  int64_t tqp) {
  constexpr int K = static_cast<int>(hn::MaxLanes(D()));
  if (c_end <= c_begin || q1 <= q0) return;
  WithCount<16>(r, [&](auto rr) {
    constexpr int RR = decltype(rr)::value;
    if constexpr (RR <= K && K % RR == 0 && (RR & (RR - 1)) == 0)
      SummedScoresT<RR, K / RR>(d, dyb, ldy, vrow, len, q0, q1, c_begin, c_end, st, tqp);
  });
}

// Scratch of one call, on the stack.
struct ShortScratch {
  union {
    HWY_ALIGN float rows_t[kMaxHeadDim * kMaxQueries];       // dyᵀ of the head, [dvh, tqp]
    HWY_ALIGN float summed_st[kMaxSummedRows * kMaxQueries];  // head-summed: dPᵀ of an entry's heads
  };
  HWY_ALIGN float st[kMaxKeys * kMaxQueries];         // dPᵀ, then dSᵀ, [tk, tqp]
  HWY_ALIGN float pt[kMaxKeys * kMaxQueries];         // Pᵀ, [tk, tqp]
  HWY_ALIGN uint8_t forbidden[kMaxKeys * kMaxQueries];
};

// Queries are lanes of dt, head dims lanes of dhd.
template <class DT, class DH>
HWY_NOINLINE void ShortBackward(DT dt, DH dhd, const float* q, const float* k, const float* v, const float* probs,
                                const float* dy, float* dq, float* dk, float* dv, bool accumulate_q,
                                bool accumulate_k, bool accumulate_v, const AttentionDims& m,
                                const AttentionMasking& mk, int64_t p0, int64_t p1) {
  const int64_t N = LanesOf(dt), NH = LanesOf(dhd);
  const int64_t tqp = (m.tq + N - 1) / N * N, tt = m.tq * m.tk;
  const auto vscale = hn::Set(dt, mk.scale);
  ShortScratch x;
  // Head-summed (every head reads the one dy): dPᵀ of an entry's heads at once as dot
  // products along the value columns (SummedScoresT) into summed_st, [heads·tk, tqp].
  const bool summed = m.sum_heads && m.heads * m.tk <= kMaxSummedRows;
  SummedTiles tiles;
  int64_t tiles_rows = -1;  // the key rows `tiles` was planned for
  float* summed_st = x.summed_st;  // (shares rows_t's space: a head-summed backward needs no dyᵀ)
  // Query lanes past tq: zeros, or the copies of the last query's values the tiles write (the
  // whole rows zeroed in one call: the tiles write every lane below tq before it is read).
  if (summed) std::memset(summed_st, 0, static_cast<size_t>(m.heads * m.tk * tqp) * sizeof(float));
  const int64_t ldy = m.y_row();  // (sum_heads: every head reads the one dy)
  const int64_t b_first = p0 / m.heads, h_first_of_range = p0 % m.heads;
  int64_t b = b_first, h = h_first_of_range - 1;  // (stepped with p: no division per product)
  const float* erows[kMaxKeys];  // batch entry b's value rows (all heads)
  const float* ev = nullptr;     // and the same rows dv apart (a copy with v_ids; not when summed)
  float* tile = summed || !m.v_ids ? nullptr : value_tile(m);
  for (int64_t p = p0; p < p1; ++p) {
    const bool new_entry = p == p0 || h + 1 == m.heads;
    if (++h == m.heads) h = 0, ++b;
    if (new_entry && summed) {
      for (int64_t l = 0; l < m.tk; ++l) erows[l] = m.value_row(v, b, l);
    } else if (new_entry) {
      ev = m.entry_values(v, b, tile);
    }
    const float* qp = q + b * m.tq * m.d + h * m.dh;
    const float* kp = k + b * m.tk * m.d + h * m.dh;
    const float* vp = ev ? ev + h * m.dvh : nullptr;
    const float* dyp = dy + b * m.tq * ldy + h * m.y_head();
    // dPᵀ = V·dyᵀ; Pᵀ.
    float* st = x.st;
    if (summed) {
      const int64_t h_first = b == b_first ? h_first_of_range : 0;  // the range's first head of entry b
      if (h == h_first) {
        const int64_t h_end = std::min<int64_t>(m.heads, h_first + (p1 - p)), rows = (h_end - h_first) * m.tk;
        if (rows != tiles_rows) tiles = PlanSummedTiles(dhd, m.tq, rows, N, m.dvh / NH), tiles_rows = rows;
        const float* vrow[kMaxSummedRows];
        SummedKeyRows(erows, m, h_first, rows, vrow);
        const int64_t qs = tiles.q_split, len = m.dvh;
        SummedScoresTiled(dhd, NH / 2, dyp, ldy, vrow, len, 0, qs, 0, rows, summed_st, tqp);
        SummedScoresTiled(dhd, tiles.r1, dyp, ldy, vrow, len, qs, m.tq, 0, tiles.split, summed_st, tqp);
        SummedScoresTiled(dhd, tiles.r2, dyp, ldy, vrow, len, qs, m.tq, tiles.split, rows, summed_st, tqp);
      }
      st = summed_st + (h - h_first) * m.tk * tqp;
    } else {
      TransposeTile(dt, dyp, ldy, m.tq, m.dvh, x.rows_t, tqp, tqp);
      RowsTimesMatrix(dt, m.tk, tqp / N, vp, m.dv, 1, m.dvh, x.rows_t, tqp, x.st, tqp, false);
    }
    TransposeTile(dt, probs + p * tt, m.tk, m.tq, m.tk, x.pt, tqp, tqp);
    // dS = scale·P⊙(dP − Σ_j dP⊙P), 0 where forbidden (as softmax_backward), per query lane.
    const uint8_t* forbidden = TransposedMask(m, mk, b, tqp, x.forbidden);
    for (int64_t u = 0; u < tqp; u += N) {
      auto vdot = hn::Zero(dt);
      for (int64_t j = 0; j < m.tk; ++j)
        vdot = hn::MulAdd(hn::Load(dt, st + j * tqp + u), hn::Load(dt, x.pt + j * tqp + u), vdot);
      for (int64_t j = 0; j < m.tk; ++j) {
        float* ds = st + j * tqp + u;
        auto g = hn::Mul(hn::Mul(hn::Load(dt, x.pt + j * tqp + u), vscale), hn::Sub(hn::Load(dt, ds), vdot));
        if (forbidden) g = hn::IfThenZeroElse(LoadFlags(dt, forbidden + j * tqp + u, static_cast<size_t>(N)), g);
        hn::Store(g, dt, ds);
      }
    }
    // dQ = dS·K (coefficient (i, j) = st[j·tqp + i]), dK = dSᵀ·Q, dV = Pᵀ·dy.
    if (dq && dk && m.tq <= kScoresGradMax && m.tk <= kScoresGradMax) {
      ScoresGrad(dhd, m.tq, m.tk, st, tqp, qp, kp, m.d, m.dh / NH, dq + b * m.tq * m.d + h * m.dh,
                 dk + b * m.tk * m.d + h * m.dh, accumulate_q, accumulate_k);
    } else {
      if (dq)
        RowsTimesMatrix(dhd, m.tq, m.dh / NH, st, 1, tqp, m.tk, kp, m.d, dq + b * m.tq * m.d + h * m.dh,
                        m.d, accumulate_q);
      if (dk)
        RowsTimesMatrix(dhd, m.tk, m.dh / NH, st, tqp, 1, m.tq, qp, m.d, dk + b * m.tk * m.d + h * m.dh,
                        m.d, accumulate_k);
    }
    if (dv)
      RowsTimesMatrix(dhd, m.tk, m.dvh / NH, x.pt, tqp, 1, m.tq, dyp, ldy,
                      dv + b * m.tk * m.dv + h * m.dvh, m.dv, accumulate_v);
  }
}

// The forward's two products per (batch, head), without a GEMM call each: S = Q·Kᵀ with Kᵀ
// transposed into a stack tile (keys are lanes of dt), and y = P·V (head dims lanes of dhd).
template <class DT>
HWY_NOINLINE void ShortScores(DT dt, const float* q, const float* k, float* scores, const AttentionDims& m,
                              int64_t p0, int64_t p1) {
  const int64_t N = LanesOf(dt);
  const int64_t tkp = (m.tk + N - 1) / N * N, tt = m.tq * m.tk;
  HWY_ALIGN float kt[kMaxHeadDim * kMaxKeys];  // Kᵀ of the head, [dh, tkp]
  HWY_ALIGN float st[kMaxQueries * kMaxKeys];  // S with padded rows, [tq, tkp]
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t b = p / m.heads, h = p % m.heads;
    TransposeTile(dt, k + b * m.tk * m.d + h * m.dh, m.d, m.tk, m.dh, kt, tkp, tkp);
    RowsTimesMatrix(dt, m.tq, tkp / N, q + b * m.tq * m.d + h * m.dh, m.d, 1, m.dh, kt, tkp, st, tkp, false);
    float* out = scores + p * tt;
    for (int64_t i = 0; i < m.tq; ++i) std::memcpy(out + i * m.tk, st + i * tkp, static_cast<size_t>(m.tk) * 4);
  }
}

template <class D>
HWY_NOINLINE void SummedRows(D d, int64_t rows, int64_t vecs, const float* coef, int64_t hs, int64_t tk,
                             int64_t heads, const float* const* vrows, const float* const* srows, int64_t scol,
                             float* out, int64_t ldo, bool relu);

// Whether ShortValues takes products [p0, p1) as whole head-summed entries (SummedRows).
HWY_INLINE bool SummedValuesFit(const AttentionDims& m, int64_t p0, int64_t p1) {
  return m.sum_heads && p0 % m.heads == 0 && p1 % m.heads == 0 && m.heads * m.tk <= kMaxSummedRows &&
         m.tq <= kMaxQueries;
}

template <class DH>
HWY_NOINLINE void ShortValues(DH dhd, const float* probs, const float* v, float* y, const AttentionDims& m,
                              int64_t p0, int64_t p1) {
  const int64_t N = LanesOf(dhd), ldy = m.y_row();
  const auto zero = hn::Zero(dhd);
  if (SummedValuesFit(m, p0, p1)) {
    // Whole batch entries: Σ_h P_h·V_h (+ y's contents with accumulate, or the start table's
    // rows) in one chain of FMAs per output vector (SummedRows), instead of each head adding
    // its product to y.
    const float* vrows[kMaxSummedRows];
    const float* yrows[kMaxQueries];
    const int64_t tt = m.tq * m.tk;
    for (int64_t b = p0 / m.heads; b < p1 / m.heads; ++b) {
      for (int64_t h = 0; h < m.heads; ++h)
        for (int64_t l = 0; l < m.tk; ++l) vrows[h * m.tk + l] = m.value_row(v, b, l) + h * m.dvh;
      float* yb = y + b * m.tq * ldy;
      if (m.start) {  // (v_ids: the start table's rows of the entry's (token, position) pairs)
        for (int64_t i = 0; i < m.tq; ++i) yrows[i] = m.start + (static_cast<int64_t>(m.v_ids[b * m.tk + i]) * m.tk + i) * ldy;
      } else {
        for (int64_t i = 0; i < m.tq; ++i) yrows[i] = yb + i * ldy;
      }
      SummedRows(dhd, m.tq, m.dvh / N, probs + b * m.heads * tt, tt, m.tk, m.heads, vrows,
                 m.accumulate || m.start ? yrows : nullptr, 0, yb, ldy, m.relu);
    }
    return;
  }
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t b = p / m.heads, h = p % m.heads;
    float* yp = y + b * m.tq * ldy + h * m.y_head();
    RowsTimesMatrix(dhd, m.tq, m.dvh / N, probs + p * m.tq * m.tk, m.tk, 1, m.tk,
                    m.entry_values(v, b, value_tile(m)) + h * m.dvh, m.dv, yp, ldy, m.y_add(h));
    if (!m.relu || !m.y_last(h)) continue;
    for (int64_t i = 0; i < m.tq; ++i)  // (dvh is whole vectors here)
      for (int64_t c = 0; c < m.dvh; c += N) {
        float* o = yp + i * ldy + c;
        hn::StoreU(hn::Max(hn::LoadU(dhd, o), zero), dhd, o);
      }
  }
}

// The indexed forward (AttentionDims::ids): q, k, v rows are read from per-(token, position)
// tables. Scores: each head's q and k rows are copied into stack tiles, then as ShortScores.
constexpr int64_t kMaxIndexedRows = 256;  // heads · tk value rows of one batch entry

template <class DT>
HWY_NOINLINE void IndexedScores(DT dt, const float* q, const float* k, float* scores, const AttentionDims& m,
                                int64_t b0, int64_t b1) {
  const int64_t N = LanesOf(dt);
  const int64_t tkp = (m.tk + N - 1) / N * N, tt = m.tq * m.tk;
  const size_t row_bytes = static_cast<size_t>(m.dh) * sizeof(float);
  HWY_ALIGN float qh[kMaxKeys * kMaxHeadDim];  // the head's q rows, [tq, dh]
  HWY_ALIGN float kh[kMaxKeys * kMaxHeadDim];  // and k rows, [tk, dh]
  HWY_ALIGN float kt[kMaxHeadDim * kMaxKeys];  // Kᵀ, [dh, tkp]
  HWY_ALIGN float st[kMaxKeys * kMaxKeys];     // S with padded rows, [tq, tkp]
  int64_t rows[kMaxKeys];
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t t = 0; t < m.tq; ++t) rows[t] = m.table_row(b, t);
    for (int64_t h = 0; h < m.heads; ++h) {
      for (int64_t t = 0; t < m.tq; ++t) {
        std::memcpy(qh + t * m.dh, q + rows[t] * m.d + h * m.dh, row_bytes);
        std::memcpy(kh + t * m.dh, k + rows[t] * m.d + h * m.dh, row_bytes);
      }
      TransposeTile(dt, kh, m.dh, m.tk, m.dh, kt, tkp, tkp);
      RowsTimesMatrix(dt, m.tq, tkp / N, qh, m.dh, 1, m.dh, kt, tkp, st, tkp, false);
      float* out = scores + (b * m.heads + h) * tt;
      for (int64_t i = 0; i < m.tq; ++i) std::memcpy(out + i * m.tk, st + i * tkp, static_cast<size_t>(m.tk) * 4);
    }
  }
}

// Probabilities of batch entries [b0, b1) from the table (AttentionDims::score_table):
// p_ij = E[r_i, c_j] / Σ_j E[r_i, c_j] over the allowed keys, TK = tk keys (at most
// kMaxKeys), unrolled: the entries stay in registers (16-lane gathers, and vectors loaded
// from a row buffer, were slower on Zen 4). A row whose allowed keys all underflowed in the
// table (or that has none) sends its (sequence, head) block to the plain softmax, its scores
// computed from the q and k rows.
template <int TK>
HWY_NOINLINE void TableProbs(const float* q, const float* k, float* probs, const AttentionDims& m,
                             const AttentionMasking& mk, int64_t b0, int64_t b1) {
  const int64_t tt = m.tq * TK, R = m.table_rows;
  const bool masked = mk.mask || mk.causal;
  int64_t keys[TK];
  for (int64_t b = b0; b < b1; ++b) {
    for (int j = 0; j < TK; ++j) keys[j] = m.table_row(b, j);
    const uint8_t* mb = mk.mask ? mk.mask + b * tt : nullptr;
    for (int64_t h = 0; h < m.heads; ++h) {
      const float* table = m.score_table + h * R * R;
      float* HWY_RESTRICT out = probs + (b * m.heads + h) * tt;
      bool exact = false;
      for (int64_t i = 0; i < m.tq; ++i) {
        const float* HWY_RESTRICT row = table + m.table_row(b, i) * R;
        float vals[TK];
        for (int j = 0; j < TK; ++j) vals[j] = row[keys[j]];
        if (masked)
          for (int j = 0; j < TK; ++j)
            if ((mk.causal && j > i) || (mb && mb[i * TK + j])) vals[j] = 0.0f;
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int j = 0; j < TK; ++j) part[j % 4] += vals[j];
        const float sum = (part[0] + part[1]) + (part[2] + part[3]);
        if (!(sum >= 1e-30f)) {
          exact = true;
          break;
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < TK; ++j) out[i * TK + j] = vals[j] * inv;
      }
      if (!exact) continue;
      for (int64_t i = 0; i < m.tq; ++i)
        for (int j = 0; j < TK; ++j) {
          const float* qr = q + m.table_row(b, i) * m.d + h * m.dh;
          const float* kr = k + keys[j] * m.d + h * m.dh;
          float s = 0.0f;
          for (int64_t c = 0; c < m.dh; ++c) s += qr[c] * kr[c];
          out[i * TK + j] = s;
        }
      SoftmaxMask mask;
      mask.data = mb;
      mask.causal = mk.causal;
      softmax_forward(out, out, 1, m.tq, TK, mk.scale, mask);
    }
  }
}

template <int TK>
HWY_INLINE void TableProbsUpTo(const float* q, const float* k, float* probs, const AttentionDims& m,
                               const AttentionMasking& mk, int64_t b0, int64_t b1) {
  if (m.tk == TK) return TableProbs<TK>(q, k, probs, m, mk, b0, b1);
  if constexpr (TK > 1) TableProbsUpTo<TK - 1>(q, k, probs, m, mk, b0, b1);
}

// out[r·ldo + col + v·N + lane] = start_r + Σ_{h < heads} Σ_{l < tk} coef[h·hs + r·tk + l] ·
// vrows[h·tk + l][col + v·N + lane] for r < R, v < V (start_r: srows[r][scol + col + …] or 0),
// then max(·, 0) with relu. One FMA chain per element, in the same order for any blocking.
template <int R, int V, class D>
HWY_INLINE void SummedBlock(D d, const float* HWY_RESTRICT coef, int64_t hs, int64_t tk, int64_t heads,
                            const float* const* vrows, int64_t col, const float* const* srows, int64_t scol,
                            float* HWY_RESTRICT out, int64_t ldo, bool relu) {
  const int64_t N = LanesOf(d);
  hn::Vec<D> acc[R][V];
  if (srows) {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = hn::LoadU(d, srows[r] + scol + col + v * N);
  } else {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
  }
  for (int64_t h = 0; h < heads; ++h) {
    const float* ph = coef + h * hs;
    const float* const* vr = vrows + h * tk;
    for (int64_t l = 0; l < tk; ++l) {
      hn::Vec<D> row[V];
      for (int v = 0; v < V; ++v) row[v] = hn::LoadU(d, vr[l] + col + v * N);
      for (int r = 0; r < R; ++r) {
        const auto c = hn::Set(d, ph[r * tk + l]);
        for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(c, row[v], acc[r][v]);
      }
    }
  }
  if (relu) {
    const auto zero = hn::Zero(d);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Max(acc[r][v], zero);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) hn::StoreU(acc[r][v], d, out + r * ldo + col + v * N);
}

// Register blocks: 32 vector registers where vectors have 16 lanes (AVX-512), else 16.
constexpr int kSummedRows = kMaxLanes >= 16 ? 4 : 2;
constexpr int kSummedVecs = 4;

template <int R, class D>
HWY_INLINE void SummedRowBlock(D d, int64_t vecs, const float* coef, int64_t hs, int64_t tk, int64_t heads,
                               const float* const* vrows, const float* const* srows, int64_t scol, float* out,
                               int64_t ldo, bool relu) {
  const int64_t N = LanesOf(d);
  int64_t v = 0;
  for (; v + kSummedVecs <= vecs; v += kSummedVecs)
    SummedBlock<R, kSummedVecs>(d, coef, hs, tk, heads, vrows, v * N, srows, scol, out, ldo, relu);
  switch (vecs - v) {
    case 1: return SummedBlock<R, 1>(d, coef, hs, tk, heads, vrows, v * N, srows, scol, out, ldo, relu);
    case 2: return SummedBlock<R, 2>(d, coef, hs, tk, heads, vrows, v * N, srows, scol, out, ldo, relu);
    case 3: return SummedBlock<R, 3>(d, coef, hs, tk, heads, vrows, v * N, srows, scol, out, ldo, relu);
    default: return;
  }
}

// `rows` query rows of `vecs` vectors, see SummedBlock (coef: the first row's; srows: one
// pointer per row or nullptr).
template <class D>
HWY_NOINLINE void SummedRows(D d, int64_t rows, int64_t vecs, const float* coef, int64_t hs, int64_t tk,
                             int64_t heads, const float* const* vrows, const float* const* srows, int64_t scol,
                             float* out, int64_t ldo, bool relu) {
  constexpr int R = kSummedRows;
  int64_t r = 0;
  for (; r + R <= rows; r += R)
    SummedRowBlock<R>(d, vecs, coef + r * tk, hs, tk, heads, vrows, srows ? srows + r : nullptr, scol,
                      out + r * ldo, ldo, relu);
  if (R > 2 && r + 2 <= rows) {  // (T = 10: 4 + 4 + 2 rows)
    SummedRowBlock<2>(d, vecs, coef + r * tk, hs, tk, heads, vrows, srows ? srows + r : nullptr, scol,
                      out + r * ldo, ldo, relu);
    r += 2;
  }
  for (; r < rows; ++r)
    SummedRowBlock<1>(d, vecs, coef + r * tk, hs, tk, heads, vrows, srows ? srows + r : nullptr, scol,
                      out + r * ldo, ldo, relu);
}

template <class DH>
HWY_NOINLINE void IndexedValues(DH dhd, const float* probs, const float* v, float* y, const AttentionDims& m,
                                int64_t b0, int64_t b1) {
  const int64_t N = LanesOf(dhd), ldy = m.y_row(), tt = m.tq * m.tk, vecs = m.dvh / N;
  const float* vrows[kMaxIndexedRows];
  const float* srows[kMaxKeys];
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t l = 0; l < m.tk; ++l) {
      const float* row = v + m.table_row(b, l) * m.dv;
      for (int64_t h = 0; h < m.heads; ++h) vrows[h * m.tk + l] = row + h * m.dvh;
    }
    if (m.start)
      for (int64_t r = 0; r < m.tq; ++r) srows[r] = m.start + m.table_row(b, r) * ldy;
    const float* pb = probs + b * m.heads * tt;
    float* yb = y + b * m.tq * ldy;
    if (m.sum_heads) {
      SummedRows(dhd, m.tq, vecs, pb, tt, m.tk, m.heads, vrows, m.start ? srows : nullptr, 0, yb, ldy, m.relu);
      continue;
    }
    for (int64_t h = 0; h < m.heads; ++h)
      SummedRows(dhd, m.tq, vecs, pb + h * tt, tt, m.tk, 1, vrows + h * m.tk, m.start ? srows : nullptr,
                 h * m.dvh, yb + h * m.dvh, ldy, m.relu);
  }
}

// Which vector width a dimension of `len` lanes uses: the full vector, unless 8 lanes pad
// it less (T = 8 on 16-lane AVX-512) — or only 8 lanes divide it (head sizes 8, 24, 40).
HWY_INLINE bool UseFull(int64_t len, bool must_divide) {
  const int64_t NF = LanesOf(DF()), N8 = LanesOf(D8());
  if (NF == N8) return true;
  if (must_divide) return len % NF == 0;
  return (len + NF - 1) / NF * NF <= (len + N8 - 1) / N8 * N8;
}

// Calls f(dt, dhd) with the sequence-lane tag chosen for seq_len lanes and the head-dim tag
// chosen for dh and dvh, and returns true; false, calling nothing, when the short path does
// not take the dims with those tags.
template <class F>
HWY_INLINE bool WithTags(int64_t seq_len, const AttentionDims& m, const F& f) {
  auto run = [&](auto dt, auto dhd) {
    if (!Fits(dt, dhd, m)) return false;
    f(dt, dhd);
    return true;
  };
  const bool full_h = UseFull(m.dh, true) && UseFull(m.dvh, true);
  if (UseFull(seq_len, false)) return full_h ? run(DF(), DF()) : run(DF(), D8());
  return full_h ? run(D8(), DF()) : run(D8(), D8());
}

// The value table's gradient of a training attention with values from a table
// (AttentionDims::v_ids): for key positions [l0, l1), table row v_ids[b·tk + l]·tk + l, head
// h's columns, gets Σ_i P[b, h, i, l]·dy[b, i] added for every batch entry b in order — the
// same sums in the same order as the backward's dv rows scattered by an embedding backward.
// Positions own disjoint table rows, so position ranges can run on different threads.
//
// out[r][col + v·N + lane] += Σ_{i < len} coef[r][i·cls] · mat[i·ms + col + v·N + lane] for
// r < R, v < V: R output rows (table rows of an entry's (position, head) pairs) that read the
// same matrix rows (dy), one FMA chain per element started by its first term.
template <int R, int V, class D>
HWY_INLINE void TableRowsBlock(D d, const float* const* HWY_RESTRICT coef, int64_t cls, int64_t len,
                               const float* HWY_RESTRICT mat, int64_t ms, int64_t col, float* const* out) {
  const int64_t N = LanesOf(d);
  hn::Vec<D> acc[R][V];
  {
    hn::Vec<D> row[V];
    for (int v = 0; v < V; ++v) row[v] = hn::LoadU(d, mat + col + v * N);
    for (int r = 0; r < R; ++r) {
      const auto c = hn::Set(d, coef[r][0]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Mul(c, row[v]);
    }
  }
  for (int64_t i = 1; i < len; ++i) {
    hn::Vec<D> row[V];
    for (int v = 0; v < V; ++v) {
      row[v] = hn::LoadU(d, mat + i * ms + col + v * N);
      if constexpr (R > 1) KeepInRegister(row[v]);  // (one load for its R FMAs)
    }
    for (int r = 0; r < R; ++r) {
      const auto c = hn::Set(d, coef[r][i * cls]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(c, row[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      float* o = out[r] + col + v * N;
      hn::StoreU(hn::Add(hn::LoadU(d, o), acc[r][v]), d, o);
    }
}

// Rows of TableRowsBlock over `vecs` whole vectors of columns, kSummedVecs at a time: on
// AVX-512 4 rows × 4 vectors (4 loads and 4 broadcasts a step for 16 FMAs; 2 rows × 8 vectors
// took 10 for 16, and ran at ~70% of the FMA rate on Zen 4).
template <int R, class D>
HWY_NOINLINE void TableRowsVecs(D d, int64_t vecs, const float* const* coef, int64_t cls, int64_t len,
                              const float* mat, int64_t ms, float* const* out) {
  const int64_t N = LanesOf(d);
  int64_t v = 0;
  for (; v + kSummedVecs <= vecs; v += kSummedVecs)
    TableRowsBlock<R, kSummedVecs>(d, coef, cls, len, mat, ms, v * N, out);
  switch (vecs - v) {
    case 1: return TableRowsBlock<R, 1>(d, coef, cls, len, mat, ms, v * N, out);
    case 2: return TableRowsBlock<R, 2>(d, coef, cls, len, mat, ms, v * N, out);
    case 3: return TableRowsBlock<R, 3>(d, coef, cls, len, mat, ms, v * N, out);
    default: return;
  }
}

// Columns [c, c + NV·N) of one (token, position) row o of StartTableRows: the rows x[e] of
// its entries summed in registers (tail: the last vector's lanes, or N).
template <int NV, class D>
HWY_INLINE void StartRowColumns(D d, const float* const* HWY_RESTRICT x, int64_t count, float* HWY_RESTRICT o,
                                int64_t c, bool accumulate, size_t tail) {
  const int64_t N = LanesOf(d);
  hn::Vec<D> acc[NV];
  if (tail == static_cast<size_t>(N)) {
    if (accumulate) {  // (the flag tested outside the vector expressions)
      for (int k = 0; k < NV; ++k) acc[k] = hn::LoadU(d, o + c + k * N);
    } else {
      for (int k = 0; k < NV; ++k) acc[k] = hn::Zero(d);
    }
    for (int64_t e = 0; e < count; ++e)
      for (int k = 0; k < NV; ++k) acc[k] = hn::Add(acc[k], hn::LoadU(d, x[e] + c + k * N));
    for (int k = 0; k < NV; ++k) hn::StoreU(acc[k], d, o + c + k * N);
    return;
  }
  static_assert(NV >= 1, "");
  for (int k = 0; k < NV; ++k) {
    const size_t n = k == NV - 1 ? tail : static_cast<size_t>(N);
    if (accumulate) {
      acc[k] = LoadUpTo(d, o + c + k * N, n);
    } else {
      acc[k] = hn::Zero(d);
    }
    for (int64_t e = 0; e < count; ++e) acc[k] = hn::Add(acc[k], LoadUpTo(d, x[e] + c + k * N, n));
    if (n == static_cast<size_t>(N)) {
      hn::StoreU(acc[k], d, o + c + k * N);
    } else {
      StoreTail(d, acc[k], o + c + k * N, n);
    }
  }
}

// A start table's gradient (AttentionDims::start with v_ids): row v·tk + l of dstart is the sum
// of dy[b, l] over the entries b (in order) whose token at position l is v, from zero or, with
// accumulate, from the row's contents: the sums of a scatter-add of dy's rows, in its order.
// Position-major, with each (token, position) row's sum in registers: a scatter over the whole
// table per entry (read-modify-write of 51 KB of rows, on neighbor-sum) took 6.4 us of a step
// on Zen 4, this 4.
template <class D>
HWY_NOINLINE void StartTableRows(D d, const float* dy, float* dstart, const AttentionDims& m, int64_t batch,
                                 int64_t vocab, int64_t l0, int64_t l1, bool accumulate) {
  const int64_t N = LanesOf(d), ldy = m.y_row();
  thread_local std::vector<const float*> rows;  // grow once: no allocation per step after the first
  thread_local std::vector<int32_t> ends;
  if (rows.size() < static_cast<size_t>(batch)) rows.resize(static_cast<size_t>(batch));
  if (ends.size() < static_cast<size_t>(vocab)) ends.resize(static_cast<size_t>(vocab));
  for (int64_t l = l0; l < l1; ++l) {
    // The entries' rows by their token at l, each token's in order (a counting sort).
    std::fill_n(ends.begin(), vocab, 0);
    for (int64_t b = 0; b < batch; ++b) ++ends[static_cast<size_t>(m.v_ids[b * m.tk + l])];
    int32_t at = 0;
    for (int64_t v = 0; v < vocab; ++v) at += std::exchange(ends[static_cast<size_t>(v)], at);
    for (int64_t b = 0; b < batch; ++b)
      rows[static_cast<size_t>(ends[static_cast<size_t>(m.v_ids[b * m.tk + l])]++)] = dy + (b * m.tq + l) * ldy;
    int32_t begin = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const int32_t end = ends[static_cast<size_t>(v)];
      float* o = dstart + (v * m.tk + l) * ldy;
      const float* const* x = rows.data() + begin;
      for (int64_t c = 0; c < ldy; c += 8 * N) {
        const int64_t vecs = std::min<int64_t>(8, (ldy - c + N - 1) / N);
        const size_t tail = static_cast<size_t>(std::min(N, ldy - c - (vecs - 1) * N));
        WithCount<8>(vecs, [&](auto nv) {
          StartRowColumns<decltype(nv)::value>(d, x, end - begin, o, c, accumulate, tail);
        });
      }
      begin = end;
    }
  }
}

template <class D>
HWY_NOINLINE void ValueTableRows(D d, const float* probs, const float* dy, float* dtable, const AttentionDims& m,
                                 int64_t batch, int64_t l0, int64_t l1) {
  const int64_t N = LanesOf(d), vecs = m.dvh / N, rest = vecs * N, ldy = m.y_row(), tt = m.tq * m.tk;
  // Rows that read the same dy rows: all of an entry's (position, head) pairs when the heads
  // share dy (sum_heads), else one head's positions at a time.
  const int64_t group_heads = m.sum_heads ? m.heads : 1;
  const int64_t positions = l1 - l0, rows = group_heads * positions;
  constexpr int64_t kMaxRows = kMaxKeys * 16;
  if (rows <= 0) return;
  const float* coef[kMaxRows];
  float* out[kMaxRows];
  int64_t pos[kMaxRows], coef_at[kMaxRows], col_at[kMaxRows];  // per row, the same for every entry
  for (int64_t h0 = 0; h0 < m.heads; h0 += group_heads)
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {  // (more heads than one call's rows)
      // Rows write disjoint elements, so visiting them in chunks leaves each one's order (by b).
      const int64_t n = std::min(kMaxRows, rows - r0);
      for (int64_t r = 0; r < n; ++r) {  // (divisions once here, not per entry)
        const int64_t h = h0 + (r0 + r) / positions, l = l0 + (r0 + r) % positions;
        pos[r] = l, coef_at[r] = h * tt + l, col_at[r] = h * m.dvh;
      }
      for (int64_t b = 0; b < batch; ++b) {  // (b outer: the entry's dy rows stay in L1 for its positions)
        const float* yh = dy + b * m.tq * ldy + h0 * m.y_head();
        const float* pb = probs + b * m.heads * tt;
        const int32_t* ib = m.v_ids + b * m.tk;
        for (int64_t r = 0; r < n; ++r) {
          coef[r] = pb + coef_at[r];  // P[b, h, i, l] at coef[r][i·tk]
          out[r] = dtable + (static_cast<int64_t>(ib[pos[r]]) * m.tk + pos[r]) * m.dv + col_at[r];
        }
        int64_t r = 0;
        if (vecs > 0) {
          constexpr int R = kSummedRows;
          for (; r + R <= n; r += R) TableRowsVecs<R>(d, vecs, coef + r, m.tk, m.tq, yh, ldy, out + r);
          if (R > 2 && r + 2 <= n) TableRowsVecs<2>(d, vecs, coef + r, m.tk, m.tq, yh, ldy, out + r), r += 2;
          for (; r < n; ++r) TableRowsVecs<1>(d, vecs, coef + r, m.tk, m.tq, yh, ldy, out + r);
        }
        for (r = 0; r < n; ++r)  // columns past the whole vectors
          for (int64_t c = rest; c < m.dvh; ++c) {
            float s = coef[r][0] * yh[c];
            for (int64_t i = 1; i < m.tq; ++i) s += coef[r][i * m.tk] * yh[i * ldy + c];
            out[r][c] += s;
          }
      }
    }
}

void AttentionValueTableBackward(const float* probs, const float* dy, float* dtable, const AttentionDims& m,
                                 int64_t batch, int64_t vocab, bool accumulate, int64_t l0, int64_t l1,
                                 float* dstart, bool accumulate_start) {
  if (dtable) {
    if (!accumulate && l0 == 0 && l1 == m.tk) {  // every position: the whole table, one call
      std::memset(dtable, 0, static_cast<size_t>(vocab * m.tk * m.dv) * sizeof(float));
    } else if (!accumulate) {
      for (int64_t t = 0; t < vocab; ++t)
        for (int64_t l = l0; l < l1; ++l)
          std::memset(dtable + (t * m.tk + l) * m.dv, 0, static_cast<size_t>(m.dv) * sizeof(float));
    }
    if (!UseFull(m.dvh, true) && m.dvh % LanesOf(D8()) == 0) {  // (head sizes 8, 24, 40 on 16 lanes)
      ValueTableRows(D8(), probs, dy, dtable, m, batch, l0, l1);
    } else {
      ValueTableRows(DF(), probs, dy, dtable, m, batch, l0, l1);
    }
  }
  // (After the value table's pass, which has just read dy.)
  if (dstart) StartTableRows(DF(), dy, dstart, m, batch, vocab, l0, l1, accumulate_start);
}

bool AttentionShortBackward(const float* q, const float* k, const float* v, const float* probs,
                            const float* dy, float* dq, float* dk, float* dv, bool accumulate_q,
                            bool accumulate_k, bool accumulate_v, const AttentionDims& m,
                            const AttentionMasking& mk, int64_t p0, int64_t p1) {
  return WithTags(m.tq, m, [&](auto dt, auto dhd) {  // queries are lanes
    ShortBackward(dt, dhd, q, k, v, probs, dy, dq, dk, dv, accumulate_q, accumulate_k, accumulate_v, m, mk, p0, p1);
  });
}

bool AttentionShortScores(const float* q, const float* k, float* scores, const AttentionDims& m,
                          int64_t p0, int64_t p1) {
  return WithTags(m.tk, m, [&](auto dt, auto) { ShortScores(dt, q, k, scores, m, p0, p1); });  // keys are lanes
}

bool AttentionShortValues(const float* probs, const float* v, float* y, const AttentionDims& m,
                          int64_t p0, int64_t p1) {
  // A start table (with v_ids) is read in place by SummedRows only; the caller copies its rows
  // into y for any other path (see attention_products.cc).
  if (m.start && !SummedValuesFit(m, p0, p1)) return false;
  return WithTags(m.tq, m, [&](auto, auto dhd) { ShortValues(dhd, probs, v, y, m, p0, p1); });
}

bool AttentionIndexedFits(const AttentionDims& m) {
  if (m.tq != m.tk || m.tk > kMaxKeys || m.heads * m.tk > kMaxIndexedRows || m.accumulate) return false;
  bool scores = m.score_table != nullptr, values = false;
  WithTags(m.tk, m, [&](auto, auto) { scores = true; });
  WithTags(m.tq, m, [&](auto, auto) { values = true; });
  return scores && values;
}

void AttentionIndexedScores(const float* q, const float* k, float* scores, const AttentionDims& m, int64_t b0,
                            int64_t b1) {
  WithTags(m.tk, m, [&](auto dt, auto) { IndexedScores(dt, q, k, scores, m, b0, b1); });
}

void AttentionIndexedTableProbs(const float* q, const float* k, float* probs, const AttentionDims& m,
                                const AttentionMasking& mk, int64_t b0, int64_t b1) {
  TableProbsUpTo<kMaxKeys>(q, k, probs, m, mk, b0, b1);  // (1 <= tk <= kMaxKeys: Fits)
}

void AttentionIndexedValues(const float* probs, const float* v, float* y, const AttentionDims& m, int64_t b0,
                            int64_t b1) {
  WithTags(m.tq, m, [&](auto, auto dhd) { IndexedValues(dhd, probs, v, y, m, b0, b1); });
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(AttentionShortBackward);
HWY_EXPORT(AttentionShortScores);
HWY_EXPORT(AttentionShortValues);
HWY_EXPORT(AttentionIndexedFits);
HWY_EXPORT(AttentionIndexedScores);
HWY_EXPORT(AttentionIndexedValues);
HWY_EXPORT(AttentionIndexedTableProbs);
HWY_EXPORT(AttentionValueTableBackward);

void attention_value_table_backward(const float* probs, const float* dy, float* dtable, const AttentionDims& m,
                                    int64_t batch, int64_t vocab, bool accumulate, int64_t l0, int64_t l1,
                                    float* dstart, bool accumulate_start) {
  HWY_DYNAMIC_DISPATCH(AttentionValueTableBackward)(probs, dy, dtable, m, batch, vocab, accumulate, l0, l1, dstart,
                                                    accumulate_start);
}

void attention_indexed_table_probs(const float* q, const float* k, float* probs, const AttentionDims& m,
                                   const AttentionMasking& mk, int64_t b0, int64_t b1) {
  HWY_DYNAMIC_DISPATCH(AttentionIndexedTableProbs)(q, k, probs, m, mk, b0, b1);
}

bool attention_indexed_fits(const AttentionDims& m) { return HWY_DYNAMIC_DISPATCH(AttentionIndexedFits)(m); }
void attention_indexed_scores(const float* q, const float* k, float* scores, const AttentionDims& m, int64_t b0,
                              int64_t b1) {
  HWY_DYNAMIC_DISPATCH(AttentionIndexedScores)(q, k, scores, m, b0, b1);
}
void attention_indexed_values(const float* probs, const float* v, float* y, const AttentionDims& m, int64_t b0,
                              int64_t b1) {
  HWY_DYNAMIC_DISPATCH(AttentionIndexedValues)(probs, v, y, m, b0, b1);
}

bool attention_short_scores(const float* q, const float* k, float* scores, const AttentionDims& m,
                            int64_t p0, int64_t p1) {
  return HWY_DYNAMIC_DISPATCH(AttentionShortScores)(q, k, scores, m, p0, p1);
}
bool attention_short_values(const float* probs, const float* v, float* y, const AttentionDims& m,
                            int64_t p0, int64_t p1) {
  return HWY_DYNAMIC_DISPATCH(AttentionShortValues)(probs, v, y, m, p0, p1);
}

bool attention_short_backward(const float* q, const float* k, const float* v, const float* probs,
                              const float* dy, float* dq, float* dk, float* dv, bool accumulate_q,
                              bool accumulate_k, bool accumulate_v, const AttentionDims& m,
                              const AttentionMasking& mk, int64_t p0, int64_t p1) {
  return HWY_DYNAMIC_DISPATCH(AttentionShortBackward)(q, k, v, probs, dy, dq, dk, dv, accumulate_q,
                                                      accumulate_k, accumulate_v, m, mk, p0, p1);
}
}  // namespace attnkit
#endif
