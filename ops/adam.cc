// Adam / AdamW over one flat parameter block, as torch.optim.Adam(W) (foreach=False) does it.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/adam.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/adam.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

void AdamUpdate(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamStep& step, Slice s) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // PyTorch forms these scalars in double and the tensor ops round them to float.
  const float step_size = static_cast<float>(double{step.lr} / double{step.bias_correction1});
  const float bc2_sqrt = static_cast<float>(std::sqrt(double{step.bias_correction2}));
  const float decay = step.decoupled ? static_cast<float>(1.0 - double{step.lr} * step.weight_decay) : 1.0f;
  const bool l2 = !step.decoupled && step.weight_decay != 0.0f;
  const auto vb1 = hn::Set(d, step.beta1), vb2 = hn::Set(d, step.beta2);
  const auto v1mb1 = hn::Set(d, 1.0f - step.beta1), v1mb2 = hn::Set(d, 1.0f - step.beta2);
  const auto vwd = hn::Set(d, step.weight_decay), vdecay = hn::Set(d, decay);
  const auto vstep = hn::Set(d, step_size), vbc2 = hn::Set(d, bc2_sqrt), veps = hn::Set(d, step.eps);

  // The weight-decay form is a template flag of the loop, never a runtime test inside the
  // vector code (g++ 12 at -O3 has turned a runtime bool inside a vector lambda into a lane
  // mask on AVX-512).
  const auto run = [&](auto l2_tag, auto decoupled_tag) {
    constexpr bool kL2 = decltype(l2_tag)::value, kDecoupled = decltype(decoupled_tag)::value;
    const auto update = [&](float* p, const float* g, float* mp, float* vp, size_t len) {
      auto vp_ = LoadUpTo(d, p, len), vg = LoadUpTo(d, g, len);
      auto vm = LoadUpTo(d, mp, len), vv = LoadUpTo(d, vp, len);
      if constexpr (kL2) vg = hn::MulAdd(vwd, vp_, vg);
      if constexpr (kDecoupled) vp_ = hn::Mul(vp_, vdecay);
      vm = hn::MulAdd(vm, vb1, hn::Mul(vg, v1mb1));
      vv = hn::MulAdd(vv, vb2, hn::Mul(hn::Mul(vg, vg), v1mb2));
      const auto denom = hn::Add(hn::Div(hn::Sqrt(vv), vbc2), veps);
      vp_ = hn::NegMulAdd(vstep, hn::Div(vm, denom), vp_);
      if (len == static_cast<size_t>(N)) {
        hn::StoreU(vp_, d, p);
        hn::StoreU(vm, d, mp);
        hn::StoreU(vv, d, vp);
      } else {
        StoreTail(d, vp_, p, len);
        StoreTail(d, vm, mp, len);
        StoreTail(d, vv, vp, len);
      }
    };
    const auto [b, e] = slice_range(n, s);
    int64_t j = b;
    for (; j + N <= e; j += N) update(param + j, grad + j, m + j, v + j, static_cast<size_t>(N));
    if (j < e) update(param + j, grad + j, m + j, v + j, static_cast<size_t>(e - j));
  };
  if (step.decoupled) {
    run(std::false_type(), std::true_type());  // (AdamW: no L2 term)
  } else if (l2) {
    run(std::true_type(), std::false_type());
  } else {
    run(std::false_type(), std::false_type());
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(AdamUpdate);

void adam_update(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamStep& step, Slice s) {
  HWY_DYNAMIC_DISPATCH(AdamUpdate)(param, grad, m, v, n, step, s);
}

AdamStep adam_step_for(AdamStep hyper, int64_t t) {
  // In double, as PyTorch does with Python floats; 1 − β^t loses most of its bits in float
  // for small t only through the final rounding.
  hyper.bias_correction1 = static_cast<float>(1.0 - std::pow(double{hyper.beta1}, static_cast<double>(t)));
  hyper.bias_correction2 = static_cast<float>(1.0 - std::pow(double{hyper.beta2}, static_cast<double>(t)));
  return hyper;
}
}  // namespace attnkit
#endif
