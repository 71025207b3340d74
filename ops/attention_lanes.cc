// Attention probabilities with batch entries as lanes (see attention.h): for the lessons'
// short sequences (T = 8 or 10) a vector holds one value of Lanes(d) batch entries, so every
// FMA of Q·Kᵀ and every softmax operation works on all lanes (keys as lanes left 6 of 16
// lanes empty at T = 10, and the softmax of short rows moved them between layouts once
// more) and the softmax's max and sum over keys are vertical. A group is Lanes(d)
// consecutive batch entries: per head, their k and q rows move into [row][column][lane]
// tiles through 8 × 8 register transposes, the scores and their softmax stay in registers,
// and the probabilities move back the same way. (The values product y = P·V keeps the short
// path of ops/attention.cc, whose head-dim lanes are full: with V and y moved too, the
// transposes cost more than the lanes won at 64 value columns. The backward likewise: tried,
// no faster.)
//
// Each probability is computed by the same operations in the same order as the short path's
// scores (a sum over the head dims in ascending order, the first term a multiply, FMAs after
// it) and ops/softmax.cc's short rows, so both paths give the same bits and a batch entry's
// result does not depend on which path, range or thread computed it.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/attention.h"
#include "ops/softmax.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attention_lanes.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

#if ATTNKIT_HAVE_TRANSPOSE8
constexpr int64_t kLanesMaxQueries = 32;
constexpr int64_t kLanesMaxHeadDim = 32;
constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(DF()));
// Keys whose scores (and probabilities) stay in registers next to the other operands: all
// 16 on AVX-512's 32 registers, 12 within AVX2's 16.
constexpr int64_t kRegisterKeys = kL >= 16 ? 16 : 12;

// dst[c·kL + l] = src[l·lds + c] for the kL lanes l and columns c < n (n >= 8).
HWY_INLINE void RowsToLanes(const float* HWY_RESTRICT src, int64_t lds, int64_t n, float* HWY_RESTRICT dst) {
  BlockRowsToLanes(src, lds, kL, n, dst);
}

HWY_INLINE bool Fits(const AttentionDims& m, const AttentionMasking& mk) {
  return !mk.mask && !m.ids && m.tk >= 1 && m.tk <= kRegisterKeys && m.tq >= 1 &&
         m.tq <= kLanesMaxQueries && m.tq * m.tk >= 8 && m.dh >= 8 && m.dh % 8 == 0 && m.dh <= kLanesMaxHeadDim;
}

// The probabilities of group g (batch entries [g·kL, (g + 1)·kL)), every head:
// softmax(scale·Q·Kᵀ) with causal scores forbidden when mk says so.
template <int TK>
HWY_NOINLINE void GroupProbs(const float* q, const float* k, float* probs, const AttentionDims& m,
                             const AttentionMasking& mk, int64_t g) {
  const DF d;
  const int64_t tq = m.tq, dh = m.dh, b0 = g * kL, tt = tq * TK;
  HWY_ALIGN float ks[TK * kLanesMaxHeadDim * kL];  // [tk][dh][kL]
  HWY_ALIGN float qs[kLanesMaxHeadDim * kL];       // [dh][kL], one query row
  HWY_ALIGN float ps[kLanesMaxQueries * TK * kL];  // [tq·tk][kL]
  const auto vscale = hn::Set(d, mk.scale), vmasked = hn::Set(d, kMaskedScore);
  const bool causal = mk.causal;
  for (int64_t h = 0; h < m.heads; ++h) {
    for (int j = 0; j < TK; ++j) RowsToLanes(k + (b0 * TK + j) * m.d + h * dh, TK * m.d, dh, ks + j * dh * kL);
    for (int64_t i = 0; i < tq; ++i) {
      RowsToLanes(q + (b0 * tq + i) * m.d + h * dh, tq * m.d, dh, qs);
      hn::Vec<DF> s[TK];
      {
        const auto qv = hn::Load(d, qs);
        for (int j = 0; j < TK; ++j) s[j] = hn::Mul(qv, hn::Load(d, ks + j * dh * kL));
      }
      for (int64_t c = 1; c < dh; ++c) {
        const auto qv = hn::Load(d, qs + c * kL);
        for (int j = 0; j < TK; ++j) s[j] = hn::MulAdd(qv, hn::Load(d, ks + (j * dh + c) * kL), s[j]);
      }
      // As ops/softmax.cc's short rows: z = scale·s (forbidden: -1e9), exp(z − max), / sum.
      auto vmax = hn::Set(d, -HUGE_VALF);
      for (int j = 0; j < TK; ++j) {
        s[j] = hn::Mul(s[j], vscale);
        if (causal && j > i) s[j] = vmasked;
        vmax = hn::Max(vmax, s[j]);
      }
      auto vsum = hn::Zero(d);
      for (int j = 0; j < TK; ++j) {
        s[j] = ExpNonPositiveOrZero(d, hn::Sub(s[j], vmax));
        vsum = hn::Add(vsum, s[j]);
      }
      const auto inv = hn::Div(hn::Set(d, 1.0f), vsum);
      float* pi = ps + i * TK * kL;
      for (int j = 0; j < TK; ++j) hn::Store(hn::Mul(s[j], inv), d, pi + j * kL);
    }
    BlockLanesToRows(ps, kL, tt, probs + (b0 * m.heads + h) * tt, m.heads * tt);  // (tt >= 8: Fits)
  }
}

#endif  // ATTNKIT_HAVE_TRANSPOSE8

int64_t AttentionLanes(const AttentionDims& m, const AttentionMasking& mk) {
#if ATTNKIT_HAVE_TRANSPOSE8
  return Fits(m, mk) ? kL : 0;
#else
  (void)m, (void)mk;
  return 0;  // no register transposes on this target: the short path takes these dims
#endif
}

void AttentionLanesProbs(const float* q, const float* k, float* probs, const AttentionDims& m,
                         const AttentionMasking& mk, int64_t g0, int64_t g1) {
#if ATTNKIT_HAVE_TRANSPOSE8
  if (!Fits(m, mk)) return;
  WithCount<static_cast<int>(kRegisterKeys)>(m.tk, [&](auto tk) {
    for (int64_t g = g0; g < g1; ++g) GroupProbs<decltype(tk)::value>(q, k, probs, m, mk, g);
  });
#else
  (void)q, (void)k, (void)probs, (void)m, (void)mk, (void)g0, (void)g1;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {

HWY_EXPORT(AttentionLanes);
HWY_EXPORT(AttentionLanesProbs);

int64_t attention_lanes(const AttentionDims& m, const AttentionMasking& mk) {
  return HWY_DYNAMIC_DISPATCH(AttentionLanes)(m, mk);
}

void attention_lanes_probs(const float* q, const float* k, float* probs, const AttentionDims& m,
                           const AttentionMasking& mk, int64_t g0, int64_t g1) {
  HWY_DYNAMIC_DISPATCH(AttentionLanesProbs)(q, k, probs, m, mk, g0, g1);
}

}  // namespace attnkit
#endif  // HWY_ONCE
