// Row softmax with scale and mask fused. Rows of at most kShortRow keys (attention over a
// handful of tokens) are processed Lanes(d) rows at a time in a transposed layout, so every
// vector op does useful work and there are no cross-lane reductions; longer rows use the
// usual passes over the row (scale+mask+max, exp+sum, normalize).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/softmax.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/softmax.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kShortRow = 16;

// The forbidden keys of one row r of the [groups·tq] rows.
struct RowMask {
  const uint8_t* flags = nullptr;  // tk flags, or nullptr
  int64_t first_causal = 0;        // keys j >= first_causal are forbidden (tk if none)
  bool any = false;

  RowMask(const SoftmaxMask& m, int64_t r, int64_t tq, int64_t tk) {
    const int64_t g = r / tq, i = r % tq;
    if (m.data) flags = m.data + ((g / m.group_div) * tq + i) * tk;
    first_causal = m.causal ? std::min(i + 1, tk) : tk;
    any = flags != nullptr || first_causal < tk;
  }

  // Forbidden lanes among keys [j, j + n), n <= Lanes(d).
  template <class D>
  HWY_INLINE hn::Mask<D> forbidden(D d, int64_t j, size_t n) const {
    auto m = hn::Ge(hn::Iota(d, static_cast<float>(j)), hn::Set(d, static_cast<float>(first_causal)));
    if (flags) m = hn::Or(m, LoadFlags(d, flags + j, n));
    return m;
  }

  // Bit j set = key j forbidden (tk <= kShortRow).
  uint32_t bits(int64_t tk) const {
    uint32_t b = 0;
    if (flags) {
      for (int64_t j = 0; j < tk; ++j) b |= static_cast<uint32_t>(flags[j] != 0) << j;
    }
    const uint32_t all = (1u << tk) - 1;
    b |= all & ~((1u << first_causal) - 1);
    return b;
  }
};

// ------------------------------------------------------------------ forward

// One row of any length: z = forbidden ? -1e9 : scale·x, then softmax(z).
static void SoftmaxRow(const float* x, float* y, int64_t tk, float scale, const RowMask& rm) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vscale = hn::Set(d, scale), vmasked = hn::Set(d, kMaskedScore);
  const auto vlowest = hn::Set(d, -HUGE_VALF);
  auto vmax = vlowest;
  int64_t j = 0;
  for (; j + N <= tk; j += N) {
    auto z = hn::Mul(hn::LoadU(d, x + j), vscale);
    if (rm.any) z = hn::IfThenElse(rm.forbidden(d, j, N), vmasked, z);
    hn::StoreU(z, d, y + j);
    vmax = hn::Max(vmax, z);
  }
  const size_t tail = static_cast<size_t>(tk - j);
  if (tail) {
    auto z = hn::Mul(LoadTail(d, x + j, tail), vscale);
    if (rm.any) z = hn::IfThenElse(rm.forbidden(d, j, tail), vmasked, z);
    StoreTail(d, z, y + j, tail);
    vmax = hn::Max(vmax, hn::IfThenElse(hn::FirstN(d, tail), z, vlowest));
  }
  vmax = hn::MaxOfLanes(d, vmax);

  auto vsum = hn::Zero(d);
  for (j = 0; j + N <= tk; j += N) {
    const auto e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, y + j), vmax));
    hn::StoreU(e, d, y + j);
    vsum = hn::Add(vsum, e);
  }
  if (tail) {
    const auto e = hn::IfThenElseZero(hn::FirstN(d, tail),
                                      ExpNonPositive(d, hn::Sub(LoadTail(d, y + j, tail), vmax)));
    StoreTail(d, e, y + j, tail);
    vsum = hn::Add(vsum, e);
  }
  const auto inv = hn::Div(hn::Set(d, 1.0f), hn::SumOfLanes(d, vsum));
  for (j = 0; j + N <= tk; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, y + j), inv), d, y + j);
  if (tail) StoreTail(d, hn::Mul(LoadTail(d, y + j, tail), inv), y + j, tail);
}

// Rows [r0, r1) with tk <= kShortRow, Lanes(d) rows at a time: lane l holds row rb + l, and
// t[j·N + l] its key j. A short last block repeats its last row in the spare lanes, so every
// row is computed by exactly the same lane operations wherever the slice boundaries fall.
static void SoftmaxShortRows(const float* x, float* y, int64_t r0, int64_t r1, int64_t tq,
                             int64_t tk, float scale, const SoftmaxMask& mask) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  constexpr size_t kMaxN = hn::MaxLanes(d);
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  HWY_ALIGN float t[kShortRow * kMaxN];
  HWY_ALIGN int32_t transpose_back[kShortRow * kMaxN];  // y index k of the block → t index
  HWY_ALIGN int32_t row_offset[kMaxN];
  HWY_ALIGN int32_t forbidden_bits[kMaxN];
  for (int64_t k = 0; k < tk * N; ++k) {
    transpose_back[k] = static_cast<int32_t>((k % tk) * N + k / tk);
  }
  const bool any_mask = mask.data != nullptr || mask.causal;
  const auto vscale = hn::Set(d, scale), vmasked = hn::Set(d, kMaskedScore);

  for (int64_t rb = r0; rb < r1; rb += N) {
    const int64_t count = std::min(N, r1 - rb);
    for (int64_t l = 0; l < N; ++l) {
      const int64_t r = std::min(l, count - 1);
      row_offset[l] = static_cast<int32_t>(r * tk);
      forbidden_bits[l] = any_mask ? static_cast<int32_t>(RowMask(mask, rb + r, tq, tk).bits(tk)) : 0;
    }
    const auto offsets = hn::Load(di, row_offset);
    const auto bits = hn::Load(di, forbidden_bits);
    const float* xb = x + rb * tk;

    auto vmax = hn::Set(d, -HUGE_VALF);
    for (int64_t j = 0; j < tk; ++j) {
      auto z = hn::Mul(hn::GatherIndex(d, xb + j, offsets), vscale);
      if (any_mask) {
        const auto bit = hn::And(bits, hn::Set(di, int32_t{1} << j));
        z = hn::IfThenElse(hn::RebindMask(d, hn::Ne(bit, hn::Zero(di))), vmasked, z);
      }
      hn::Store(z, d, t + j * N);
      vmax = hn::Max(vmax, z);
    }
    auto vsum = hn::Zero(d);
    for (int64_t j = 0; j < tk; ++j) {
      const auto e = ExpNonPositive(d, hn::Sub(hn::Load(d, t + j * N), vmax));
      hn::Store(e, d, t + j * N);
      vsum = hn::Add(vsum, e);
    }
    const auto inv = hn::Div(hn::Set(d, 1.0f), vsum);
    for (int64_t j = 0; j < tk; ++j) hn::Store(hn::Mul(hn::Load(d, t + j * N), inv), d, t + j * N);

    float* yb = y + rb * tk;
    const int64_t total = count * tk;
    int64_t k = 0;
    for (; k + N <= total; k += N) {
      hn::StoreU(hn::GatherIndex(d, t, hn::Load(di, transpose_back + k)), d, yb + k);
    }
    if (k < total) {
      StoreTail(d, hn::GatherIndex(d, t, hn::Load(di, transpose_back + k)), yb + k,
                static_cast<size_t>(total - k));
    }
  }
}

void SoftmaxForward(const float* x, float* y, int64_t groups, int64_t tq, int64_t tk,
                    float scale, const SoftmaxMask& mask, Slice s) {
  if (tk <= 0) return;
  const auto [r0, r1] = slice_range(groups * tq, s);
  if (tk <= kShortRow) {
    SoftmaxShortRows(x, y, r0, r1, tq, tk, scale, mask);
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    SoftmaxRow(x + r * tk, y + r * tk, tk, scale, RowMask(mask, r, tq, tk));
  }
}

// ------------------------------------------------------------------ backward

// In the forward pass y = softmax(z), z = scale·x (or -1e9 where forbidden), so
// dz = y⊙(dy − Σ dy⊙y), dx = scale·dz where allowed and 0 where forbidden.
static void SoftmaxBackwardRow(const float* y, const float* dy, float* dx, int64_t tk,
                               float scale, const RowMask& rm, bool accumulate) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const size_t tail = static_cast<size_t>(tk % N);
  const int64_t full = tk - static_cast<int64_t>(tail);
  auto vdot = hn::Zero(d);
  for (int64_t j = 0; j < full; j += N) {
    vdot = hn::MulAdd(hn::LoadU(d, dy + j), hn::LoadU(d, y + j), vdot);
  }
  if (tail) vdot = hn::MulAdd(LoadTail(d, dy + full, tail), LoadTail(d, y + full, tail), vdot);
  vdot = hn::SumOfLanes(d, vdot);

  const auto vscale = hn::Set(d, scale);
  auto grad = [&](int64_t j, size_t n, hn::Vec<decltype(d)> vy, hn::Vec<decltype(d)> vdy,
                  hn::Vec<decltype(d)> vold) {
    auto g = hn::Mul(hn::Mul(vy, vscale), hn::Sub(vdy, vdot));
    if (rm.any) g = hn::IfThenZeroElse(rm.forbidden(d, j, n), g);
    return accumulate ? hn::Add(vold, g) : g;
  };
  for (int64_t j = 0; j < full; j += N) {
    const auto old = accumulate ? hn::LoadU(d, dx + j) : hn::Zero(d);
    hn::StoreU(grad(j, N, hn::LoadU(d, y + j), hn::LoadU(d, dy + j), old), d, dx + j);
  }
  if (tail) {
    const auto old = accumulate ? LoadTail(d, dx + full, tail) : hn::Zero(d);
    StoreTail(d, grad(full, tail, LoadTail(d, y + full, tail), LoadTail(d, dy + full, tail), old),
              dx + full, tail);
  }
}

void SoftmaxBackward(const float* y, const float* dy, float* dx, int64_t groups, int64_t tq,
                     int64_t tk, float scale, const SoftmaxMask& mask, bool accumulate,
                     Slice s) {
  if (tk <= 0) return;
  const auto [r0, r1] = slice_range(groups * tq, s);
  for (int64_t r = r0; r < r1; ++r) {
    SoftmaxBackwardRow(y + r * tk, dy + r * tk, dx + r * tk, tk, scale, RowMask(mask, r, tq, tk),
                       accumulate);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(SoftmaxForward);
HWY_EXPORT(SoftmaxBackward);

void softmax_forward(const float* x, float* y, int64_t groups, int64_t tq, int64_t tk,
                     float scale, const SoftmaxMask& mask, Slice s) {
  HWY_DYNAMIC_DISPATCH(SoftmaxForward)(x, y, groups, tq, tk, scale, mask, s);
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t groups, int64_t tq,
                      int64_t tk, float scale, const SoftmaxMask& mask, bool accumulate,
                      Slice s) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackward)(y, dy, dx, groups, tq, tk, scale, mask, accumulate, s);
}
}  // namespace attnkit
#endif
