// Row softmax with scale and mask fused. Rows of at most kShortRow keys (attention over a
// handful of tokens) are processed Lanes(d) rows at a time in a transposed layout, so every
// vector op does useful work and there are no cross-lane reductions; longer rows use the
// usual passes over the row (scale+mask+max, exp+sum, normalize).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

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
#ifndef ATTNKIT_SOFTMAX_TRANSPOSED_MAX  // experiment knob: longest row for the transposed path
#define ATTNKIT_SOFTMAX_TRANSPOSED_MAX kShortRow
#endif

// The forbidden keys of one row r of the [groups·tq] rows.
struct RowMask {
  const uint8_t* flags = nullptr;  // tk flags, or nullptr
  int64_t first_causal = 0;        // keys j >= first_causal are forbidden (tk if none)
  bool any = false;

  // Row i of group g.
  RowMask(const SoftmaxMask& m, int64_t g, int64_t i, int64_t tq, int64_t tk) {
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
    const auto e = ExpNonPositiveOrZero(d, hn::Sub(hn::LoadU(d, y + j), vmax));
    hn::StoreU(e, d, y + j);
    vsum = hn::Add(vsum, e);
  }
  if (tail) {
    const auto e = hn::IfThenElseZero(
        hn::FirstN(d, tail), ExpNonPositiveOrZero(d, hn::Sub(LoadTail(d, y + j, tail), vmax)));
    StoreTail(d, e, y + j, tail);
    vsum = hn::Add(vsum, e);
  }
  const auto inv = hn::Div(hn::Set(d, 1.0f), hn::SumOfLanes(d, vsum));
  for (j = 0; j + N <= tk; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, y + j), inv), d, y + j);
  if (tail) StoreTail(d, hn::Mul(LoadTail(d, y + j, tail), inv), y + j, tail);
}

// Blocks of Lanes(d) consecutive rows with tk <= kShortRow, in a transposed layout: lane l
// holds row rb + l, t[j·N + l] its key j. A short last block repeats its last row in the spare
// lanes, so every row goes through exactly the same lane operations wherever the slice
// boundaries fall (and results do not depend on the slice count). Where 256-bit vectors exist
// (AVX2, AVX-512), whole blocks with at least 8 keys move by 8 × 8 register transposes, 8 rows
// at a time; the rest by gathers.
class ShortRowBlocks {
 public:
  using D = hn::ScalableTag<float>;
  using DI = hn::RebindToSigned<D>;
  static constexpr size_t kMaxN = hn::MaxLanes(D());
  // Floats of one transposed block.
  static constexpr size_t kBlockFloats = kShortRow * kMaxN;

  ShortRowBlocks(int64_t groups, int64_t tq, int64_t tk, const SoftmaxMask& mask)
      : N_(static_cast<int64_t>(hn::Lanes(D()))), tq_(tq), tk_(tk), mask_(mask),
        any_mask_(mask.data != nullptr || mask.causal) {
    if (mask.data) flags_size_ = ((groups - 1) / mask.group_div + 1) * tq * tk;
    for (int64_t k = 0; k < tk * N_; ++k) {
      transpose_back_[k] = static_cast<int32_t>((k % tk) * N_ + k / tk);
    }
  }
  int64_t lanes() const { return N_; }
  bool any_mask() const { return any_mask_; }

  // Prepares rows [rb, rb + count), count <= lanes().
  void start(int64_t rb, int64_t count) {
    const DI di;
    rb_ = rb;
    count_ = count;
    if (!Transposable()) {
      for (int64_t l = 0; l < N_; ++l) {
        row_offset_[l] = static_cast<int32_t>(std::min(l, count - 1) * tk_);
      }
      offsets_ = hn::Load(di, row_offset_);
    }
    if (!any_mask_) return;
    // Rows rb, rb + 1, … are query i of group g, i + 1 of g, …: step without dividing.
    int64_t g = rb / tq_, i = rb % tq_;
    const uint8_t* flags = FlagsRow(g, i);
    const uint32_t all = (1u << tk_) - 1;
    for (int64_t l = 0; l < count; ++l) {
      uint32_t bits = 0;
      if (flags) {
        // 16 bytes at a time while they stay inside the mask.
        bits = flags - mask_.data + 16 <= flags_size_ ? NonZeroByteBits16(flags) & all
                                                      : NonZeroByteBits(flags, tk_);
      }
      forbidden_bits_[l] = static_cast<int32_t>(bits);
      query_[l] = static_cast<int32_t>(i);
      if (++i == tq_) {
        i = 0, ++g;
        flags = FlagsRow(g, i);
      } else if (flags) {
        flags += tk_;
      }
    }
    for (int64_t l = count; l < N_ && l < static_cast<int64_t>(kMaxN); ++l) {
      forbidden_bits_[l] = forbidden_bits_[count - 1];
      query_[l] = query_[count - 1];
    }
    bits_ = hn::Load(di, forbidden_bits_);
    if (mask_.causal) {  // keys j > i: all bits from min(i + 1, tk) up
      const auto one = hn::Set(di, 1);
      const auto first =
          hn::Min(hn::Add(hn::Load(di, query_), one), hn::Set(di, static_cast<int32_t>(tk_)));
      const auto below = hn::Sub(one << first, one);
      bits_ = hn::Or(bits_, hn::AndNot(below, hn::Set(di, static_cast<int32_t>(all))));
    }
  }

  // dst[j·N + l] = key j of row rb + l of a [rows, tk] array.
  void load(const float* base, float* HWY_RESTRICT dst) const {
    const float* block = base + rb_ * tk_;
#if ATTNKIT_HAVE_TRANSPOSE8
    if (Transposable()) {
      BlockRowsToLanes(block, N_, tk_, dst);
      return;
    }
#endif
    for (int64_t j = 0; j < tk_; ++j) {
      hn::Store(hn::GatherIndex(D(), block + j, offsets_), D(), dst + j * N_);
    }
  }
  // Lanes whose key j is forbidden (only when any_mask()).
  hn::Mask<D> forbidden(int64_t j) const {
    const DI di;
    const auto bit = hn::And(bits_, hn::Set(di, int32_t{1} << j));
    return hn::RebindMask(D(), hn::Ne(bit, hn::Zero(di)));
  }
  // out rows of the block := t (or += t), back in row-major order. t may be overwritten.
  void store_rows(float* HWY_RESTRICT t, float* out, bool accumulate) const {
    const D d;
    float* ob = out + rb_ * tk_;
#if ATTNKIT_HAVE_TRANSPOSE8
    if (Transposable()) {
      if (accumulate) {
        HWY_ALIGN float old[kBlockFloats];
        BlockRowsToLanes(ob, N_, tk_, old);
        for (int64_t j = 0; j < tk_; ++j) {
          hn::Store(hn::Add(hn::Load(d, old + j * N_), hn::Load(d, t + j * N_)), d, t + j * N_);
        }
      }
      BlockLanesToRows(t, N_, tk_, ob);
      return;
    }
#endif
    const DI di;
    const int64_t total = count_ * tk_;
    int64_t k = 0;
    // accumulate is tested outside the loops (see WithFlag in ops_simd-inl.h).
    if (accumulate) {
      for (; k + N_ <= total; k += N_)
        hn::StoreU(hn::Add(hn::LoadU(d, ob + k), hn::GatherIndex(d, t, hn::Load(di, transpose_back_ + k))), d, ob + k);
    } else {
      for (; k + N_ <= total; k += N_) hn::StoreU(hn::GatherIndex(d, t, hn::Load(di, transpose_back_ + k)), d, ob + k);
    }
    if (k < total) {
      const size_t n = static_cast<size_t>(total - k);
      auto v = hn::GatherIndex(d, t, hn::Load(di, transpose_back_ + k));
      if (accumulate) {
        StoreTail(d, hn::Add(LoadTail(d, ob + k, n), v), ob + k, n);
      } else {
        StoreTail(d, v, ob + k, n);
      }
    }
  }

 private:
  // A whole block (8 or 16 rows) with at least 8 keys: 8 × 8 register transposes instead of
  // gathers.
  bool Transposable() const {
#if ATTNKIT_HAVE_TRANSPOSE8
    return count_ == N_ && N_ % 8 == 0 && tk_ >= 8;
#else
    return false;
#endif
  }
  const uint8_t* FlagsRow(int64_t g, int64_t i) const {
    return mask_.data ? mask_.data + ((g / mask_.group_div) * tq_ + i) * tk_ : nullptr;
  }

  HWY_ALIGN int32_t transpose_back_[kBlockFloats];  // row-major index k → t index
  HWY_ALIGN int32_t row_offset_[kMaxN];
  HWY_ALIGN int32_t forbidden_bits_[kMaxN] = {};
  HWY_ALIGN int32_t query_[kMaxN] = {};
  int64_t flags_size_ = 0;  // bytes of mask_.data
  int64_t N_, tq_, tk_;
  const SoftmaxMask& mask_;
  bool any_mask_;
  int64_t rb_ = 0, count_ = 0;
  hn::Vec<DI> offsets_ = hn::Zero(DI()), bits_ = hn::Zero(DI());
};

static void SoftmaxShortRows(const float* x, float* y, int64_t groups, int64_t r0, int64_t r1,
                             int64_t tq, int64_t tk, float scale, const SoftmaxMask& mask) {
  const hn::ScalableTag<float> d;
  ShortRowBlocks blocks(groups, tq, tk, mask);
  const int64_t N = blocks.lanes();
  HWY_ALIGN float t[ShortRowBlocks::kBlockFloats];
  const auto vscale = hn::Set(d, scale), vmasked = hn::Set(d, kMaskedScore);
  for (int64_t rb = r0; rb < r1; rb += N) {
    blocks.start(rb, std::min(N, r1 - rb));
    blocks.load(x, t);
    auto vmax = hn::Set(d, -HUGE_VALF);
    for (int64_t j = 0; j < tk; ++j) {
      auto z = hn::Mul(hn::Load(d, t + j * N), vscale);
      if (blocks.any_mask()) z = hn::IfThenElse(blocks.forbidden(j), vmasked, z);
      hn::Store(z, d, t + j * N);
      vmax = hn::Max(vmax, z);
    }
    auto vsum = hn::Zero(d);
    for (int64_t j = 0; j < tk; ++j) {
      const auto e = ExpNonPositiveOrZero(d, hn::Sub(hn::Load(d, t + j * N), vmax));
      hn::Store(e, d, t + j * N);
      vsum = hn::Add(vsum, e);
    }
    const auto inv = hn::Div(hn::Set(d, 1.0f), vsum);
    for (int64_t j = 0; j < tk; ++j) hn::Store(hn::Mul(hn::Load(d, t + j * N), inv), d, t + j * N);
    blocks.store_rows(t, y, false);
  }
}

// Rows [r0, r1) of the groups·tq rows. Each row's result does not depend on r0 and r1.
static void SoftmaxForwardRows(const float* x, float* y, int64_t groups, int64_t r0, int64_t r1,
                               int64_t tq, int64_t tk, float scale, const SoftmaxMask& mask) {
  if (tk <= ATTNKIT_SOFTMAX_TRANSPOSED_MAX) {
    SoftmaxShortRows(x, y, groups, r0, r1, tq, tk, scale, mask);
    return;
  }
  int64_t g = r0 / tq, i = r0 % tq;  // row r = query i of group g
  for (int64_t r = r0; r < r1; ++r) {
    SoftmaxRow(x + r * tk, y + r * tk, tk, scale, RowMask(mask, g, i, tq, tk));
    if (++i == tq) i = 0, ++g;
  }
}

void SoftmaxForward(const float* x, float* y, int64_t groups, int64_t tq, int64_t tk,
                    float scale, const SoftmaxMask& mask, Slice s) {
  if (tk <= 0) return;
  const auto [r0, r1] = slice_range(groups * tq, s);
  SoftmaxForwardRows(x, y, groups, r0, r1, tq, tk, scale, mask);
}

// y = scale·x + add, then the softmax of y in place with scale 1 (a multiply by 1 is exact, so
// forbidden scores and the rest go exactly as in SoftmaxForward), kChunk rows at a time while
// they are in cache. A row with no allowed finite score (every allowed one −inf) would come
// out NaN or uniform depending on the target: it is set to zeros instead.
void SoftmaxForwardAdditive(const float* x, const float* add, int64_t add_group_div, float* y,
                            int64_t groups, int64_t tq, int64_t tk, float scale,
                            const SoftmaxMask& mask, Slice s) {
  if (tk <= 0) return;
  constexpr int64_t kChunk = 64;
  const hn::ScalableTag<float> d;
  const auto vscale = hn::Set(d, scale);
  const auto [r0, r1] = slice_range(groups * tq, s);
  bool dead[kChunk];
  for (int64_t c0 = r0; c0 < r1; c0 += kChunk) {
    const int64_t c1 = std::min(r1, c0 + kChunk);
    int64_t g = c0 / tq, i = c0 % tq;  // row r = query i of group g
    for (int64_t r = c0; r < c1; ++r) {
      const float* xr = x + r * tk;
      const float* ar = add + ((g / add_group_div) * tq + i) * tk;
      float* yr = y + r * tk;
      ForEachVector(d, yr, 0, tk, [&](int64_t j, size_t n) {
        return hn::MulAdd(LoadUpTo(d, xr + j, n), vscale, LoadUpTo(d, ar + j, n));
      });
      const RowMask rm(mask, g, i, tq, tk);
      bool any = false;
      for (int64_t j = 0; j < rm.first_causal && !any; ++j)
        any = yr[j] != -HUGE_VALF && !(rm.flags && rm.flags[j]);
      dead[r - c0] = !any;
      if (++i == tq) i = 0, ++g;
    }
    SoftmaxForwardRows(y, y, groups, c0, c1, tq, tk, 1.0f, mask);
    for (int64_t r = c0; r < c1; ++r)
      if (dead[r - c0]) std::fill(y + r * tk, y + (r + 1) * tk, 0.0f);
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
  auto grad = [&](int64_t j, size_t n, hn::Vec<decltype(d)> vy, hn::Vec<decltype(d)> vdy) {
    auto g = hn::Mul(hn::Mul(vy, vscale), hn::Sub(vdy, vdot));
    if (rm.any) g = hn::IfThenZeroElse(rm.forbidden(d, j, n), g);
    return g;
  };
  if (accumulate) {
    for (int64_t j = 0; j < full; j += N)
      hn::StoreU(hn::Add(hn::LoadU(d, dx + j), grad(j, N, hn::LoadU(d, y + j), hn::LoadU(d, dy + j))), d, dx + j);
    if (tail)
      StoreTail(d, hn::Add(LoadTail(d, dx + full, tail), grad(full, tail, LoadTail(d, y + full, tail), LoadTail(d, dy + full, tail))),
                dx + full, tail);
  } else {
    for (int64_t j = 0; j < full; j += N)
      hn::StoreU(grad(j, N, hn::LoadU(d, y + j), hn::LoadU(d, dy + j)), d, dx + j);
    if (tail)
      StoreTail(d, grad(full, tail, LoadTail(d, y + full, tail), LoadTail(d, dy + full, tail)), dx + full, tail);
  }
}

// SoftmaxBackwardRow for blocks of short rows (see ShortRowBlocks).
static void SoftmaxBackwardShortRows(const float* y, const float* dy, float* dx, int64_t groups,
                                     int64_t r0, int64_t r1, int64_t tq, int64_t tk,
                                     float scale, const SoftmaxMask& mask, bool accumulate) {
  const hn::ScalableTag<float> d;
  ShortRowBlocks blocks(groups, tq, tk, mask);
  const int64_t N = blocks.lanes();
  HWY_ALIGN float ty[ShortRowBlocks::kBlockFloats];
  HWY_ALIGN float t[ShortRowBlocks::kBlockFloats];  // dy, then dx
  const auto vscale = hn::Set(d, scale);
  for (int64_t rb = r0; rb < r1; rb += N) {
    blocks.start(rb, std::min(N, r1 - rb));
    blocks.load(y, ty);
    blocks.load(dy, t);
    auto vdot = hn::Zero(d);
    for (int64_t j = 0; j < tk; ++j) {
      vdot = hn::MulAdd(hn::Load(d, t + j * N), hn::Load(d, ty + j * N), vdot);
    }
    for (int64_t j = 0; j < tk; ++j) {
      auto g = hn::Mul(hn::Mul(hn::Load(d, ty + j * N), vscale),
                       hn::Sub(hn::Load(d, t + j * N), vdot));
      if (blocks.any_mask()) g = hn::IfThenZeroElse(blocks.forbidden(j), g);
      hn::Store(g, d, t + j * N);
    }
    blocks.store_rows(t, dx, accumulate);  // after every read of dy: dx may alias it
  }
}

// SoftmaxBackwardRow for rows that fit one vector (tk <= Lanes(d)), one masked vector per row:
// the backward needs no row in lanes (its only reduction is one dot product per row), so on
// 16-lane vectors this beats the transposed blocks, whose 8 × 8 transposes of y, dy and dx
// cost more shuffles than a SumOfLanes per row. kAccumulate and kMasked are template
// arguments: no runtime flag is tested inside the vector code.
#if HWY_TARGET <= HWY_AVX3
// Every lane := the sum of the lanes of its 256-bit half, in the same order in every lane.
HWY_INLINE hn::Vec<hn::Full512<float>> HalfSums(hn::Vec<hn::Full512<float>> v) {
  v = hn::Add(v, hn::Shuffle2301(v));
  v = hn::Add(v, hn::Shuffle1032(v));
  return hn::Add(v, hn::SwapAdjacentBlocks(v));
}
#endif

template <bool kAccumulate, bool kMasked>
static void SoftmaxBackwardVectorRows(const float* y, const float* dy, float* dx, int64_t groups,
                                      int64_t r0, int64_t r1, int64_t tq, int64_t tk,
                                      float scale, const SoftmaxMask& mask) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vscale = hn::Set(d, scale);
  const uint32_t all = (1u << tk) - 1;
  const int64_t flag_bytes = mask.data ? ((groups - 1) / mask.group_div + 1) * tq * tk : 0;
  int64_t g = r0 / tq, i = r0 % tq;  // row r = query i of group g
  // Bit j set when key j of the next row is forbidden (as ShortRowBlocks::start finds them);
  // steps to the row after it.
  auto next_row_bits = [&]() {
    uint32_t bits = 0;
    if (mask.data) {
      const int64_t at = ((g / mask.group_div) * tq + i) * tk;
      bits = at + 16 <= flag_bytes ? NonZeroByteBits16(mask.data + at) & all
                                   : NonZeroByteBits(mask.data + at, tk);
    }
    if (mask.causal) bits |= all & ~((2u << std::min(i, tk - 1)) - 1);  // keys j > i
    if (++i == tq) i = 0, ++g;
    return bits;
  };
  auto forbidden = [&](uint32_t bits) {
    uint8_t bytes[8] = {static_cast<uint8_t>(bits), static_cast<uint8_t>(bits >> 8)};
    return hn::LoadMaskBits(d, bytes);
  };
  int64_t r = r0;
#if HWY_TARGET <= HWY_AVX3
  if (N == 16 && tk == 8) {
    // Two rows per vector; the dot products summed within each 256-bit half.
    for (; r + 2 <= r1; r += 2) {
      const int64_t o = r * tk;
      const auto vy = hn::LoadU(d, y + o);
      const auto vdy = hn::LoadU(d, dy + o);
      const auto dot = HalfSums(hn::Mul(vdy, vy));
      auto grad = hn::Mul(hn::Mul(vy, vscale), hn::Sub(vdy, dot));
      if constexpr (kMasked) {
        const uint32_t lo = next_row_bits();
        grad = hn::IfThenZeroElse(forbidden(lo | next_row_bits() << 8), grad);
      }
      if constexpr (kAccumulate) grad = hn::Add(hn::LoadU(d, dx + o), grad);
      hn::StoreU(grad, d, dx + o);
    }
  }
#endif
  const auto live = hn::FirstN(d, static_cast<size_t>(tk));
  for (; r < r1; ++r) {
    const int64_t o = r * tk;
    const auto vy = hn::MaskedLoad(live, d, y + o);
    const auto vdy = hn::MaskedLoad(live, d, dy + o);
    auto dot = hn::Mul(vdy, vy);
#if HWY_TARGET <= HWY_AVX3
    // A row of 8 alone sums as it does beside another: bitwise the same whatever the pairing.
    if (N == 16 && tk == 8) {
      dot = HalfSums(dot);
    } else {
      dot = hn::SumOfLanes(d, dot);
    }
#else
    dot = hn::SumOfLanes(d, dot);
#endif
    auto grad = hn::Mul(hn::Mul(vy, vscale), hn::Sub(vdy, dot));
    if constexpr (kMasked) grad = hn::IfThenZeroElse(forbidden(next_row_bits()), grad);
    if constexpr (kAccumulate) grad = hn::Add(hn::MaskedLoad(live, d, dx + o), grad);
    hn::BlendedStore(grad, live, d, dx + o);
  }
  (void)N;
}

void SoftmaxBackward(const float* y, const float* dy, float* dx, int64_t groups, int64_t tq,
                     int64_t tk, float scale, const SoftmaxMask& mask, bool accumulate,
                     Slice s) {
  if (tk <= 0) return;
  // (Plain locals, not structured bindings: the lambdas below capture them, which clang rejects.)
  const std::pair<int64_t, int64_t> range = slice_range(groups * tq, s);
  const int64_t r0 = range.first, r1 = range.second;
  if (hn::Lanes(hn::ScalableTag<float>()) >= 16 && tk <= static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()))) {
    const bool masked = mask.data != nullptr || mask.causal;
    WithFlag(accumulate, [&](auto acc) {
      WithFlag(masked, [&](auto msk) {
        SoftmaxBackwardVectorRows<decltype(acc)::value, decltype(msk)::value>(y, dy, dx, groups, r0, r1, tq, tk, scale, mask);
      });
    });
    return;
  }
  if (tk <= ATTNKIT_SOFTMAX_TRANSPOSED_MAX) {
    SoftmaxBackwardShortRows(y, dy, dx, groups, r0, r1, tq, tk, scale, mask, accumulate);
    return;
  }
  int64_t g = r0 / tq, i = r0 % tq;  // row r = query i of group g
  for (int64_t r = r0; r < r1; ++r) {
    SoftmaxBackwardRow(y + r * tk, dy + r * tk, dx + r * tk, tk, scale,
                       RowMask(mask, g, i, tq, tk), accumulate);
    if (++i == tq) i = 0, ++g;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(SoftmaxForward);
HWY_EXPORT(SoftmaxBackward);
HWY_EXPORT(SoftmaxForwardAdditive);

void softmax_forward_additive(const float* x, const float* add, int64_t add_group_div, float* y,
                              int64_t groups, int64_t tq, int64_t tk, float scale,
                              const SoftmaxMask& mask, Slice s) {
  HWY_DYNAMIC_DISPATCH(SoftmaxForwardAdditive)(x, add, add_group_div, y, groups, tq, tk, scale,
                                               mask, s);
}

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
