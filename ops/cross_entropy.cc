// Cross-entropy fused with log-softmax.
#include <cmath>
#include <cstdint>

#include "ops/cross_entropy.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cross_entropy.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// Row max (as a broadcast vector) and Σ exp(logit − max) of one row.
struct RowStats {
  hn::Vec<DF> vmax;
  float sum;
};

HWY_INLINE RowStats ComputeRowStats(const float* row, int64_t classes) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vlowest = hn::Set(d, -HUGE_VALF);
  auto vmax = vlowest;
  int64_t j = 0;
  for (; j + N <= classes; j += N) vmax = hn::Max(vmax, hn::LoadU(d, row + j));
  const size_t tail = static_cast<size_t>(classes - j);
  if (tail) vmax = hn::Max(vmax, hn::IfThenElse(hn::FirstN(d, tail), LoadTail(d, row + j, tail), vlowest));
  vmax = hn::MaxOfLanes(d, vmax);
  auto vsum = hn::Zero(d);
  for (j = 0; j + N <= classes; j += N) {
    vsum = hn::Add(vsum, ExpNonPositive(d, hn::Sub(hn::LoadU(d, row + j), vmax)));
  }
  if (tail) {
    vsum = hn::Add(vsum, hn::IfThenElseZero(hn::FirstN(d, tail),
                                            ExpNonPositive(d, hn::Sub(LoadTail(d, row + j, tail), vmax))));
  }
  return {vmax, hn::GetLane(hn::SumOfLanes(d, vsum))};
}

void CrossEntropyForward(const float* logits, const int32_t* targets, float* row_loss,
                         int64_t rows, int64_t classes, Slice s) {
  const auto [r0, r1] = slice_range(rows, s);
  for (int64_t r = r0; r < r1; ++r) {
    if (targets[r] < 0) {
      row_loss[r] = 0.0f;
      continue;
    }
    const float* row = logits + r * classes;
    const RowStats st = ComputeRowStats(row, classes);
    // logsumexp − logit[t] = log(sum) − (logit[t] − max): the max cancels exactly.
    row_loss[r] = std::log(st.sum) - (row[targets[r]] - hn::GetLane(st.vmax));
  }
}

// In the forward pass loss = logsumexp(z) − z[t], so dloss/dz = softmax(z) − onehot(t).
void CrossEntropyBackward(const float* logits, const int32_t* targets, float* dlogits,
                          int64_t rows, int64_t classes, float scale, bool accumulate,
                          Slice s) {
  const DF d;
  const auto [r0, r1] = slice_range(rows, s);
  for (int64_t r = r0; r < r1; ++r) {
    float* out = dlogits + r * classes;
    const int32_t t = targets[r];
    if (t < 0) {
      if (!accumulate) ForEachVector(d, out, 0, classes, [&](int64_t, size_t) { return hn::Zero(d); });
      continue;
    }
    const float* row = logits + r * classes;
    const RowStats st = ComputeRowStats(row, classes);
    const auto vscale_inv = hn::Set(d, scale / st.sum), vscale = hn::Set(d, scale);
    const auto vt = hn::Set(d, static_cast<float>(t));
    ForEachVector(d, out, 0, classes, [&](int64_t j, size_t n) {
      const auto scaled_p = hn::Mul(ExpNonPositive(d, hn::Sub(LoadUpTo(d, row + j, n), st.vmax)), vscale_inv);
      const auto v = hn::Sub(scaled_p, hn::IfThenElseZero(hn::Eq(hn::Iota(d, static_cast<float>(j)), vt), vscale));
      return accumulate ? hn::Add(LoadUpTo(d, out + j, n), v) : v;
    });
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(CrossEntropyForward);
HWY_EXPORT(CrossEntropyBackward);

void cross_entropy_forward(const float* logits, const int32_t* targets, float* row_loss,
                           int64_t rows, int64_t classes, Slice s) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyForward)(logits, targets, row_loss, rows, classes, s);
}
void cross_entropy_backward(const float* logits, const int32_t* targets, float* dlogits,
                            int64_t rows, int64_t classes, float scale, bool accumulate,
                            Slice s) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyBackward)(logits, targets, dlogits, rows, classes, scale,
                                             accumulate, s);
}
}  // namespace attnkit
#endif
