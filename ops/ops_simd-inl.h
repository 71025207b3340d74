// Per-target helpers shared by the ops kernels (included once per Highway target from each
// kernel .cc after hwy/foreach_target.h): tails that never touch memory past the end, the
// forbidden-score mask of a row segment, and exp clamped to its valid range.
#if defined(ATTNKIT_OPS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_OPS_SIMD_INL_H_
#undef ATTNKIT_OPS_SIMD_INL_H_
#else
#define ATTNKIT_OPS_SIMD_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

// A lambda inside a vector kernel: compiled for the kernel's target and inlined into it.
#ifndef ATTNKIT_INLINE_LAMBDA
#define ATTNKIT_INLINE_LAMBDA HWY_ATTR __attribute__((always_inline))
#endif

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls f(std::true_type()) or f(std::false_type()) as flag says, so a kernel's lambda can test
// the flag with `if constexpr`. A runtime bool must never choose between two vectors inside a
// vector lambda (`flag ? Add(old, v) : v`): g++ 12 at -O3 has turned that into a masked add
// on AVX-512 whose write mask was the bool itself (only lane 0 added).
template <class F>
HWY_INLINE void WithFlag(bool flag, const F& f) {
  if (flag) {
    f(std::true_type());
  } else {
    f(std::false_type());
  }
}

// Calls f(std::integral_constant<int, n>()) for 1 <= n <= kMax (<= 16): a kernel's runtime
// count (vectors per block, rows of a tile, keys in registers) as a template argument;
// nothing for other counts.
template <int kMax, class F>
HWY_INLINE void WithCount(int64_t n, const F& f) {
  static_assert(kMax >= 1 && kMax <= 16, "counts 1 to 16");
  switch (n) {
#define ATTNKIT_COUNT_CASE(K)                                    \
  case K:                                                        \
    if constexpr (K <= kMax) f(std::integral_constant<int, K>()); \
    return;
    ATTNKIT_COUNT_CASE(1) ATTNKIT_COUNT_CASE(2) ATTNKIT_COUNT_CASE(3) ATTNKIT_COUNT_CASE(4)
    ATTNKIT_COUNT_CASE(5) ATTNKIT_COUNT_CASE(6) ATTNKIT_COUNT_CASE(7) ATTNKIT_COUNT_CASE(8)
    ATTNKIT_COUNT_CASE(9) ATTNKIT_COUNT_CASE(10) ATTNKIT_COUNT_CASE(11) ATTNKIT_COUNT_CASE(12)
    ATTNKIT_COUNT_CASE(13) ATTNKIT_COUNT_CASE(14) ATTNKIT_COUNT_CASE(15) ATTNKIT_COUNT_CASE(16)
#undef ATTNKIT_COUNT_CASE
    default:
      return;
  }
}

// AVX-512 stores and loads any subset of lanes with one fast instruction (a mask register);
// AVX2's vmaskmov is slow on AMD and SSE4 has none, so those targets copy ragged tails through
// a stack buffer or overlap whole vectors instead.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr bool kFastMaskedStore = true;
#else
inline constexpr bool kFastMaskedStore = false;
#endif

// Loads p[0, n) (n < Lanes(d)) and zeros in the other lanes. AVX-512 masks the load; Highway
// 1.0.3's MaskedLoad is a full aligned load on SSSE3/SSE4, which can fault at the end of a
// buffer, so the other targets go through a stack copy.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const hn::TFromD<D>* p, size_t n) {
  if constexpr (kFastMaskedStore) {
    return hn::MaskedLoad(hn::FirstN(d, n), d, p);  // fault-free for masked-off lanes
  } else {
    HWY_ALIGN hn::TFromD<D> buf[hn::MaxLanes(d)] = {};
    std::memcpy(buf, p, n * sizeof(hn::TFromD<D>));
    return hn::Load(d, buf);
  }
}

// Stores the first n lanes of v to p[0, n) without touching p[n, ...).
template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, hn::TFromD<D>* p, size_t n) {
  if constexpr (kFastMaskedStore) {
    hn::BlendedStore(v, hn::FirstN(d, n), d, p);
  } else {
    HWY_ALIGN hn::TFromD<D> buf[hn::MaxLanes(d)];
    hn::Store(v, d, buf);
    std::memcpy(p, buf, n * sizeof(hn::TFromD<D>));
  }
}

// A full vector at p if n == Lanes(d), else the zero-padded tail p[0, n).
template <class D>
HWY_INLINE hn::Vec<D> LoadUpTo(D d, const hn::TFromD<D>* p, size_t n) {
  return n == hn::Lanes(d) ? hn::LoadU(d, p) : LoadTail(d, p, n);
}

// Stores v whole at p if n == Lanes(d), else its first n lanes (StoreTail).
template <class D>
HWY_INLINE void StoreUpTo(D d, hn::Vec<D> v, hn::TFromD<D>* p, size_t n) {
  if (n == hn::Lanes(d)) {
    hn::StoreU(v, d, p);
  } else {
    StoreTail(d, v, p, n);
  }
}

// out[j, j + n) = op(j, n) over [begin, end), vector by vector, the last one partial. The
// partial vector goes through the same lane operations as the full ones, so a value's bits
// never depend on where a slice boundary falls.
template <class D, class Op>
HWY_INLINE void ForEachVector(D d, hn::TFromD<D>* out, int64_t begin, int64_t end, const Op& op) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = begin;
  for (; j + N <= end; j += N) hn::StoreU(op(j, static_cast<size_t>(N)), d, out + j);
  if (j < end) {
    const size_t tail = static_cast<size_t>(end - j);
    StoreTail(d, op(j, tail), out + j, tail);
  }
}

// Lanes whose uint8 flag in p[0, n) is non-zero (n <= Lanes(d); lanes >= n are false).
template <class D>
HWY_INLINE hn::Mask<D> LoadFlags(D d, const uint8_t* p, size_t n) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::Rebind<int32_t, D> di;
  hn::Vec<decltype(d8)> bytes;
  if (n == hn::Lanes(d)) {
    bytes = hn::LoadU(d8, p);
  } else {
    HWY_ALIGN uint8_t buf[hn::MaxLanes(d8)] = {};
    std::memcpy(buf, p, n);
    bytes = hn::Load(d8, buf);
  }
  const auto flags = hn::PromoteTo(di, bytes);
  return hn::RebindMask(d, hn::Ne(flags, hn::Zero(di)));
}

// x86 targets with 256-bit vectors (AVX2, and AVX-512 through AVX-512VL) transpose 8 × 8
// blocks in registers, whatever their full vector length; the others copy element by element.
#undef ATTNKIT_HAVE_TRANSPOSE8  // this file is included once per target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define ATTNKIT_HAVE_TRANSPOSE8 1
#else
#define ATTNKIT_HAVE_TRANSPOSE8 0
#endif

#if ATTNKIT_HAVE_TRANSPOSE8
// f(j) for the 8-column blocks j = 0, 8, 16, … of cols >= 8 columns; a ragged last block is
// moved back to end at cols, overlapping the one before it (its columns are written twice,
// with the same values).
template <class F>
HWY_INLINE void ForEachBlockOf8(int64_t cols, const F& f) {
  for (int64_t j = 0;; j += 8) {
    j = j < cols - 8 ? j : cols - 8;
    f(j);
    if (j + 8 >= cols) break;
  }
}

// 8 × 8 float block transposed in registers: dst[c·ldd + r] = src[r·lds + c]. Gathers are slow
// on AMD (Zen 3: one 8-lane gather costs about as much as this whole transpose), so blocks of
// 8 short rows move between row-major and one-row-per-lane layouts through these.
using V8 = hn::Vec<hn::Full256<float>>;

// The two in-block steps of an 8 × 8 transpose, for vectors of any width whose 256-bit halves
// are independent 8 × 8 blocks: afterwards u[c] (c < 4) holds lane c of rows 0..3 of r in its
// even 128-bit blocks and lane c + 4 in its odd ones, u[4 + c] the same of rows 4..7.
// Transpose8x8 and Transpose16x8 differ only in the block moves after these.
template <class D>
HWY_INLINE void TransposeWithinBlocks(D d, const hn::Vec<D> (&r)[8], hn::Vec<D> (&u)[8]) {
  const hn::Repartition<double, D> dd;
  hn::Vec<D> t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = hn::InterleaveLower(d, r[i], r[i + 1]);
    t[i + 1] = hn::InterleaveUpper(d, r[i], r[i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {
    for (int i = 0; i < 2; ++i) {
      const auto a = hn::BitCast(dd, t[h + i]), b = hn::BitCast(dd, t[h + 2 + i]);
      u[h + 2 * i] = hn::BitCast(d, hn::InterleaveLower(dd, a, b));
      u[h + 2 * i + 1] = hn::BitCast(d, hn::InterleaveUpper(dd, a, b));
    }
  }
}

// out[c] = lane c of each of the 8 vectors in r (an 8 × 8 transpose in registers).
HWY_INLINE void Transpose8x8(const V8 (&r)[8], V8 (&out)[8]) {
  const hn::Full256<float> d;
  V8 u[8];
  TransposeWithinBlocks(d, r, u);
  for (int c = 0; c < 4; ++c) {
    out[c] = hn::ConcatLowerLower(d, u[4 + c], u[c]);
    out[c + 4] = hn::ConcatUpperUpper(d, u[4 + c], u[c]);
  }
}

#if HWY_TARGET <= HWY_AVX3
// Two 8 × 8 transposes at once in 512-bit vectors, laid out so that a 16-row block comes out one
// row per lane: r[q] holds k = 0..7 of rows q (lanes 0..7) and 4 + q (lanes 8..15) for q < 4, of
// rows 4 + q and 8 + q for q >= 4; out[c] lane l = row l, k = c. Per-128-bit unpacks as in
// Transpose8x8, then one 128-bit block shuffle per output (whose block order the row layout of
// r undoes): 24 shuffles where two Transpose8x8 and their Combine take 56.
HWY_INLINE void Transpose16x8(const hn::Vec<hn::Full512<float>> (&r)[8], hn::Vec<hn::Full512<float>> (&out)[8]) {
  const hn::Full512<float> d;
  using V = hn::Vec<decltype(d)>;
  V u[8];
  TransposeWithinBlocks(d, r, u);
  // u[c] blocks: (k = c, rows of r[0..3] lower), (k = c + 4, same), (k = c, upper), (k = c + 4,
  // upper); u[4 + c] likewise for r[4..7]. out[c] = blocks 0, 2 of u[c], then of u[4 + c].
  for (int c = 0; c < 4; ++c) {
    out[c] = V{_mm512_shuffle_f32x4(u[c].raw, u[4 + c].raw, _MM_SHUFFLE(2, 0, 2, 0))};
    out[c + 4] = V{_mm512_shuffle_f32x4(u[c].raw, u[4 + c].raw, _MM_SHUFFLE(3, 1, 3, 1))};
  }
}

// The inverse of Transpose16x8: v[c] lane l = row l, k = c; out in Transpose16x8's input layout
// (out[q] = k = 0..7 of rows q | 4 + q for q < 4, of rows 4 + q | 8 + q for q >= 4). After the
// in-block steps u[c] holds, in its 128-bit blocks, v[0..3] of rows c, 4 + c, 8 + c, 12 + c and
// u[4 + c] the same of v[4..7]: one two-source permute per output joins the halves of a row.
HWY_INLINE void Transpose8x16(const hn::Vec<hn::Full512<float>> (&v)[8], hn::Vec<hn::Full512<float>> (&out)[8]) {
  const hn::Full512<float> d;
  using V = hn::Vec<decltype(d)>;
  V u[8];
  TransposeWithinBlocks(d, v, u);
  const __m512i pick_lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i pick_hi = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int c = 0; c < 4; ++c) {
    out[c] = V{_mm512_permutex2var_ps(u[c].raw, pick_lo, u[4 + c].raw)};      // rows c | 4 + c
    out[4 + c] = V{_mm512_permutex2var_ps(u[c].raw, pick_hi, u[4 + c].raw)};  // rows 8 + c | 12 + c
  }
}

// The row in the lower half of Transpose16x8's input r[q] (the upper half holds 4 rows further).
HWY_INLINE int64_t Transpose16x8LowerRow(int q) { return q < 4 ? q : 4 + q; }
#endif

HWY_INLINE void TransposeBlock8x8(const float* HWY_RESTRICT src, int64_t lds,
                                  float* HWY_RESTRICT dst, int64_t ldd) {
  const hn::Full256<float> d;
  V8 rows[8], cols[8];
  for (int i = 0; i < 8; ++i) rows[i] = hn::LoadU(d, src + i * lds);
  Transpose8x8(rows, cols);
  for (int c = 0; c < 8; ++c) hn::StoreU(cols[c], d, dst + c * ldd);
}

// dst[c·ldd + r] = src[r·lds + c] for r < rows, c < cols, both at least 8, in 8 × 8 blocks; a
// ragged last block of rows or columns overlaps the one before it and rewrites the same values.
HWY_INLINE void TransposeOverlapping8(const float* HWY_RESTRICT src, int64_t lds, int64_t rows, int64_t cols,
                                      float* HWY_RESTRICT dst, int64_t ldd) {
  for (int64_t r0 = 0;; r0 += 8) {
    r0 = r0 < rows - 8 ? r0 : rows - 8;
    ForEachBlockOf8(cols, [&](int64_t c0) { TransposeBlock8x8(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd); });
    if (r0 + 8 >= rows) break;
  }
}

// 8 rows of cols >= 8 floats (row stride lds) to columns: dst[j·ldd + l] = src[l·lds + j]. A
// ragged last block of columns overlaps the one before it and rewrites the same values.
HWY_INLINE void TransposeRowsToLanes8(const float* HWY_RESTRICT src, int64_t lds, int64_t cols,
                                      float* HWY_RESTRICT dst, int64_t ldd) {
  ForEachBlockOf8(cols, [&](int64_t j) { TransposeBlock8x8(src + j, lds, dst + j * ldd, ldd); });
}

// The inverse: dst[l·ldd + j] = src[j·lds + l] for 8 rows l of cols >= 8 floats.
HWY_INLINE void TransposeLanesToRows8(const float* HWY_RESTRICT src, int64_t lds, int64_t cols,
                                      float* HWY_RESTRICT dst, int64_t ldd) {
  ForEachBlockOf8(cols, [&](int64_t j) { TransposeBlock8x8(src + j * lds, lds, dst + j, ldd); });
}
#endif

#if ATTNKIT_HAVE_TRANSPOSE8
// A block of n rows (n a multiple of 8: one row per lane of 8- or 16-lane vectors) of cols >= 8
// floats, lds apart, into lanes: dst[j·n + l] = src[l·lds + j], 8 rows at a time.
HWY_INLINE void BlockRowsToLanes(const float* HWY_RESTRICT src, int64_t lds, int64_t n, int64_t cols,
                                 float* HWY_RESTRICT dst) {
#if HWY_TARGET <= HWY_AVX3
  if (n == 16) {
    // Both 8-row halves in one Transpose16x8, then whole 16-lane stores (the block is read
    // back by 16-lane loads, which do not forward from two 8-lane stores).
    const hn::Full512<float> d16;
    const hn::Full256<float> d8;
    ForEachBlockOf8(cols, [&](int64_t j) {
      hn::Vec<decltype(d16)> r[8], t[8];
      for (int q = 0; q < 8; ++q) {
        const int64_t lo = Transpose16x8LowerRow(q);
        r[q] = hn::Combine(d16, hn::LoadU(d8, src + (lo + 4) * lds + j), hn::LoadU(d8, src + lo * lds + j));
      }
      Transpose16x8(r, t);
      for (int c = 0; c < 8; ++c) hn::StoreU(t[c], d16, dst + (j + c) * 16);
    });
    return;
  }
#endif
  for (int64_t g = 0; g < n; g += 8) TransposeRowsToLanes8(src + g * lds, lds, cols, dst + g, n);
}

HWY_INLINE void BlockRowsToLanes(const float* HWY_RESTRICT src, int64_t n, int64_t cols,
                                 float* HWY_RESTRICT dst) {
  BlockRowsToLanes(src, cols, n, cols, dst);
}

// The inverse: dst[l·ldd + j] = src[j·n + l] (rows of cols >= 8 floats, ldd apart).
HWY_INLINE void BlockLanesToRows(const float* HWY_RESTRICT src, int64_t n, int64_t cols,
                                 float* HWY_RESTRICT dst, int64_t ldd) {
#if HWY_TARGET <= HWY_AVX3
  if (n == 16) {
    // Whole 16-lane loads (the block was just written by 16-lane stores, and 8-lane loads of
    // their upper halves do not forward from them), then Transpose8x16's row pairs.
    const hn::Full512<float> d16;
    const hn::Full256<float> d8;
    ForEachBlockOf8(cols, [&](int64_t j) {
      hn::Vec<decltype(d16)> v[8], r[8];
      for (int c = 0; c < 8; ++c) v[c] = hn::LoadU(d16, src + (j + c) * 16);
      Transpose8x16(v, r);
      for (int q = 0; q < 8; ++q) {
        const int64_t lo = Transpose16x8LowerRow(q);
        hn::StoreU(hn::LowerHalf(d8, r[q]), d8, dst + lo * ldd + j);
        hn::StoreU(hn::UpperHalf(d8, r[q]), d8, dst + (lo + 4) * ldd + j);
      }
    });
    return;
  }
#endif
  for (int64_t g = 0; g < n; g += 8) TransposeLanesToRows8(src + g, n, cols, dst + g * ldd, ldd);
}

HWY_INLINE void BlockLanesToRows(const float* HWY_RESTRICT src, int64_t n, int64_t cols,
                                 float* HWY_RESTRICT dst) {
  BlockLanesToRows(src, n, cols, dst, cols);
}
#endif

// Bit j set when p[j] != 0, for n <= 16 bytes: eight bytes at a time without a loop over
// them (a byte's high bit is set iff it is non-zero, then a multiply gathers the bits).
HWY_INLINE uint32_t NonZeroByteBits(const uint8_t* p, int64_t n) {
  uint64_t w[2] = {0, 0};
  if (n >= 8) {  // fixed-size loads: bytes [0, 8) and [n - 8, n) shifted down to [8, n)
    std::memcpy(&w[0], p, 8);
    std::memcpy(&w[1], p + n - 8, 8);
    w[1] = n == 8 ? 0 : w[1] >> (8 * (16 - n));
  } else {
    for (int64_t i = 0; i < n; ++i) w[0] |= static_cast<uint64_t>(p[i]) << (8 * i);
  }
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7fULL, kOnes = 0x0101010101010101ULL;
  uint32_t bits = 0;
  for (int h = 0; h < 2; ++h) {
    const uint64_t high = ((w[h] & kLow7) + kLow7) | w[h];  // bit 7 of byte i: byte i != 0
    const uint64_t flags = (high >> 7) & kOnes;              // 0 or 1 in each byte
    bits |= static_cast<uint32_t>((flags * 0x0102040810204080ULL) >> 56) << (8 * h);
  }
  return bits;
}

// NonZeroByteBits(p, 16) for a p whose 16 bytes may all be read: one compare and movemask.
HWY_INLINE uint32_t NonZeroByteBits16(const uint8_t* p) {
#if HWY_TARGET != HWY_SCALAR
  const hn::Full128<uint8_t> d8;
  uint8_t zero_bits[8];
  hn::StoreMaskBits(d8, hn::Eq(hn::LoadU(d8, p), hn::Zero(d8)), zero_bits);
  return ~(static_cast<uint32_t>(zero_bits[0]) | static_cast<uint32_t>(zero_bits[1]) << 8) &
         0xffffu;
#else
  return NonZeroByteBits(p, 16);
#endif
}

// e^x for x in [-87, 0] (results normal floats): Cody–Waite reduction x = n·ln2 + r with
// |r| <= ln2/2, Cephes' expf polynomial for e^r, and 2^n put straight into the exponent bits.
// Softmax ratios e^x = y1 / y0 come out within 1.9·2^-24 of the double e^x over [-80, 0], as
// with hn::Exp (2.0·2^-24; test_softmax checks 2.5). About half the
// instructions of hn::Exp, which also handles overflow, denormal results and the split
// exponent of |n| > 126 (this range needs none of them); the softmax and cross-entropy
// exponentials were ~15 us of neighbor-sum's step on AVX-512.
template <class D, class V>
HWY_INLINE V ExpNonPositiveNormal(D d, V x) {
  const hn::RebindToSigned<D> di;
  // n = round(x·log2e): adding 1.5·2^23 rounds to an integer held in the low mantissa bits.
  const V magic = hn::Set(d, 12582912.0f);
  const V t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), magic);
  const V n = hn::Sub(t, magic);
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);  // ln2 = 0.693359375 − 2.12194440e-4
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  // e^r ≈ 1 + r·(1 + r·p), the last step one FMA (Cephes' 1 + r + r²·p, a Mul, an FMA and an
  // Add, rounds twice near 1: softmax ratios 5.2·2^-24 off at worst instead of 1.9).
  const V one = hn::Set(d, 1.0f);
  const V y = hn::MulAdd(hn::MulAdd(p, r, one), r, one);
  // 2^n: t's bits are 0x4B400000 + n; the exponent field wants n + 127.
  const auto bits = hn::Add(hn::BitCast(di, t), hn::Set(di, 127 - 0x4B400000));
  return hn::Mul(y, hn::BitCast(d, hn::ShiftLeft<23>(bits)));
}

// e^x for x <= 0 (shifted scores and logits), exactly 0 below -80 (e^-80 ≈ 1.8e-35) without
// computing it: masked scores (-1e9) and the far tail of a row need no exponential, and
// below about -87 the reconstruction would leave the normal range.
template <class D, class V>
HWY_INLINE V ExpNonPositiveOrZero(D d, V x) {
  const V lowest = hn::Set(d, -80.0f);
  return hn::IfThenZeroElse(hn::Lt(x, lowest), ExpNonPositiveNormal(d, hn::Max(x, lowest)));
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // include guard
