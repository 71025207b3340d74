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

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads p[0, n) (n < Lanes(d)) and zeros in the other lanes. Highway 1.0.3's MaskedLoad is
// a full aligned load on SSSE3/SSE4, which can fault at the end of a buffer, so go through
// a stack copy instead.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const hn::TFromD<D>* p, size_t n) {
  HWY_ALIGN hn::TFromD<D> buf[hn::MaxLanes(d)] = {};
  std::memcpy(buf, p, n * sizeof(hn::TFromD<D>));
  return hn::Load(d, buf);
}

// Stores the first n lanes of v to p[0, n) without touching p[n, ...).
template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, hn::TFromD<D>* p, size_t n) {
  HWY_ALIGN hn::TFromD<D> buf[hn::MaxLanes(d)];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, n * sizeof(hn::TFromD<D>));
}

// A full vector at p if n == Lanes(d), else the zero-padded tail p[0, n).
template <class D>
HWY_INLINE hn::Vec<D> LoadUpTo(D d, const hn::TFromD<D>* p, size_t n) {
  return n == hn::Lanes(d) ? hn::LoadU(d, p) : LoadTail(d, p, n);
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

// exp(x) for x <= 0 (shifted scores). Inputs are clamped below -104, where Exp returns an
// exact 0, so the -1e9 of masked scores cannot overflow Exp's int32 range reduction.
template <class D, class V>
HWY_INLINE V ExpNonPositive(D d, V x) {
  return hn::Exp(d, hn::Max(x, hn::Set(d, -120.0f)));
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // include guard
