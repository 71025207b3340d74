// Per-target building blocks for A·B of 9 or 10 columns in quads of k, shared by the AVX-512
// small path (ops/gemm_small-inl.h: QuadTileNN, PairTileNN, KQuadTileNN) and the AVX2 direct
// path (ops/gemm_direct-inl.h: KQuadTileAvx2): B's columns 8 and 9 gathered four k-steps at a
// time, and the k-quads layout of all ten columns with its k loop. 256-bit x86 intrinsics
// throughout, so the code exists on the AVX2 and AVX-512 targets only; each caller keeps its
// own stores.

// Per-target part: toggled include guard, as Highway's foreach_target.h requires.
#if defined(ATTNKIT_OPS_GEMM_QUADS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_OPS_GEMM_QUADS_INL_H_
#undef ATTNKIT_OPS_GEMM_QUADS_INL_H_
#else
#define ATTNKIT_OPS_GEMM_QUADS_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"  // ATTNKIT_INLINE_LAMBDA

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {

#undef ATTNKIT_HAVE_GEMM_QUADS  // this file is included once per target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define ATTNKIT_HAVE_GEMM_QUADS 1
#else
#define ATTNKIT_HAVE_GEMM_QUADS 0
#endif

#if ATTNKIT_HAVE_GEMM_QUADS

// B(kk, 8) and, with kTwo, B(kk, 9) (else zero) in the low 64 bits, from p = B's row kk at
// column 8.
template <bool kTwo>
HWY_INLINE __m128d Pair89OfB(const float* HWY_RESTRICT p) {
  if constexpr (kTwo) {
    double pair;  // (memcpy: the floats read as one 64-bit value, which _mm_load_sd's double* is not)
    std::memcpy(&pair, p, sizeof(pair));
    return _mm_set_sd(pair);
  } else {
    return _mm_castps_pd(_mm_load_ss(p));
  }
}

// B(k0 + R0 + r, 8) and B(k0 + R0 + r, 9) (zero without kTwo) in 64-bit lane r, r < 4, zero
// for R0 + r >= kc unless kWhole; b = B's row k0 at column 8.
template <bool kTwo, bool kWhole, int R0>
HWY_INLINE __m256d Pairs89OfB(const float* HWY_RESTRICT b, int64_t ldb, int64_t kc) {
  __m128d q[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    if (kWhole || R0 + r < kc) {
      q[r] = Pair89OfB<kTwo>(b + (R0 + r) * ldb);
    } else {
      q[r] = _mm_setzero_pd();
    }
  }
  return _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_unpacklo_pd(q[0], q[1])), _mm_unpacklo_pd(q[2], q[3]), 1);
}

// Lanes 0..3: B(k0 + q, 8), lanes 4..7: B(k0 + q, 9) (zero without kTwo), for q < kc (zero
// past it); b = B's row k0 at column 8.
template <bool kTwo, bool kWhole>
HWY_INLINE __m256 Columns89QuadOfB(const float* HWY_RESTRICT b, int64_t ldb, int64_t kc) {
  const __m256d pairs = Pairs89OfB<kTwo, kWhole, 0>(b, ldb, kc);
  // (q, c) → (c, q)
  return _mm256_permutevar8x32_ps(_mm256_castpd_ps(pairs), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}

// Columns 8 and 9 of R rows from their quads vectors (v[r] lanes q and 4 + q: the sums over
// the k of kk % 4 = q), in fours: sums[w] lanes 0..3 = rows 4w..4w + 3's column 8, lanes 4..7
// their column 9, each (l0 + l1) + (l2 + l3) — the same tree for every row whatever its tile.
template <int R>
HWY_INLINE void Columns89Sums(const __m256 (&v)[R], __m256 (&sums)[(R + 3) / 4]) {
#pragma GCC unroll 3
  for (int w = 0; w < (R + 3) / 4; ++w) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256 h0 = _mm256_hadd_ps(v[4 * w], 4 * w + 1 < R ? v[4 * w + 1] : zero);
    const __m256 h1 = _mm256_hadd_ps(4 * w + 2 < R ? v[4 * w + 2] : zero, 4 * w + 3 < R ? v[4 * w + 3] : zero);
    sums[w] = _mm256_hadd_ps(h0, h1);
  }
}

// Row r's columns 8 (lane 0) and 9 (lane 1) from Columns89Sums' sums.
template <int R>
HWY_INLINE __m128 Columns89OfRow(const __m256 (&sums)[(R + 3) / 4], int r) {
  const int s = r & 3;
  return _mm256_castps256_ps128(_mm256_permutevar8x32_ps(sums[r / 4], _mm256_setr_epi32(s, s + 4, 0, 0, 0, 0, 0, 0)));
}

// The k-quads layout. Lane 4e + q of a row's 8-lane vector v sums A(r, kk)·B(kk, c) over the
// kk of kk % 4 = q, for column c = v + 4e (v = 0..3: columns 0..7) and c = 8 + e (v = 4), so a
// row's four A values of a quad are one 128-bit broadcast load for its five FMAs and every lane
// works. After the k loop each column's four lanes are added (l0 + l1) + (l2 + l3); for columns
// 0..7 three hadds of vectors 0..3 leave them in order.
// The k range of the k-quads paths (the AVX-512 small path's UseKQuadsNN and the AVX2 direct
// path's UseKQuadsNNAvx2): from k = 32, as below it packing B for each product costs more than
// it saves (see UseKQuadsNN); at most 256 (the packed buffer's size).
inline constexpr int64_t kKQuadsMinK = 32;
inline constexpr int64_t kKQuadsMaxK = 256;
// Floats of PackKQuadsOfB's output: 40 a quad (five 8-lane vectors), k <= kKQuadsMaxK.
inline constexpr int64_t kKQuadsPacked = 40 * (kKQuadsMaxK / 4);

// B's 9 or 10 columns (column 9 zero without kTwo) in the k-quads layout: quad w at
// packed + 40w, vector v at + 8v, zero past k (B's rows past k never read).
template <bool kTwo>
HWY_INLINE void PackKQuadsOfB(const float* HWY_RESTRICT b, int64_t ldb, int64_t k, float* HWY_RESTRICT packed) {
  const auto quad = [&](auto whole_tag, int64_t k0, int64_t kc) ATTNKIT_INLINE_LAMBDA {
    constexpr bool kWhole = decltype(whole_tag)::value;
    const float* HWY_RESTRICT bk = b + k0 * ldb;
    __m256 r[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) r[q] = kWhole || q < kc ? _mm256_loadu_ps(bk + q * ldb) : _mm256_setzero_ps();
    // 4 × 4 transposes within each 128-bit half: vector v = column v | column v + 4.
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    float* HWY_RESTRICT p = packed + 10 * k0;
    _mm256_store_ps(p, _mm256_shuffle_ps(t0, t2, 0x44));
    _mm256_store_ps(p + 8, _mm256_shuffle_ps(t0, t2, 0xEE));
    _mm256_store_ps(p + 16, _mm256_shuffle_ps(t1, t3, 0x44));
    _mm256_store_ps(p + 24, _mm256_shuffle_ps(t1, t3, 0xEE));
    _mm256_store_ps(p + 32, Columns89QuadOfB<kTwo, kWhole>(bk + 8, ldb, kc));
  };
  int64_t k0 = 0;
  for (; k0 + 4 <= k; k0 += 4) quad(std::true_type(), k0, 4);
  if (k0 < k) quad(std::false_type(), k0, k - k0);
}

// R rows of A (a at row 0, stride lda) times PackKQuadsOfB's packed over k: row8[r] = row r's
// columns 0..7 in order, each summed (l0 + l1) + (l2 + l3); col89[r] its vector 4 as the k
// loop left it (lanes q and 4 + q: columns 8 and 9), for Columns89Sums.
template <int R>
HWY_INLINE void KQuadSums(const float* HWY_RESTRICT packed, const float* HWY_RESTRICT a, int64_t lda, int64_t k,
                          __m256 (&row8)[R], __m256 (&col89)[R]) {
  __m256 acc[R][5];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 5
    for (int v = 0; v < 5; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  const float* HWY_RESTRICT p = packed;
  const float* HWY_RESTRICT ak = a;
  const auto step = [&](auto whole_tag, int64_t kc) ATTNKIT_INLINE_LAMBDA {
    constexpr bool kWhole = decltype(whole_tag)::value;
    __m256 bv[5];
#pragma GCC unroll 5
    for (int v = 0; v < 5; ++v) bv[v] = _mm256_load_ps(p + 8 * v);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      __m256 av;
      if constexpr (kWhole) {
        av = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(ak + r * lda));
      } else {  // the last kc < 4 k-steps: zero in A's lanes past k (B's are zero too)
        const __m128i in = _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(kc)), _mm_setr_epi32(0, 1, 2, 3));
        const __m128 quad = _mm_maskload_ps(ak + r * lda, in);
        av = _mm256_set_m128(quad, quad);
      }
#pragma GCC unroll 5
      for (int v = 0; v < 5; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    p += 40;
    ak += 4;
  };
  int64_t k0 = 0;
#pragma GCC unroll 1
  for (; k0 + 4 <= k; k0 += 4) step(std::true_type(), 4);
  if (k0 < k) step(std::false_type(), k - k0);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    row8[r] = _mm256_hadd_ps(_mm256_hadd_ps(acc[r][0], acc[r][1]), _mm256_hadd_ps(acc[r][2], acc[r][3]));
    col89[r] = acc[r][4];
  }
}

#endif  // ATTNKIT_HAVE_GEMM_QUADS

}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_OPS_GEMM_QUADS_INL_H_
