// Elementwise math over broadcast operands, and sums over dims, vector by vector (see
// ForEachVector in ops_simd-inl.h).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/math.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/math.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Operands fn reads (a; a, b; or a, b, c).
constexpr int Arity(MathFn fn) {
  switch (fn) {
    case MathFn::kAdd: case MathFn::kSub: case MathFn::kMul: case MathFn::kDiv:
    case MathFn::kTanhBackward: case MathFn::kSigmoidBackward: case MathFn::kGeluBackward:
      return 2;
    case MathFn::kDivBackward:
      return 3;
    default:
      return 1;
  }
}

// x where x is NaN, else r: the clamps below (Max, Min) would turn a NaN into a finite value,
// and a NaN must reach the loss for training to report it.
HWY_INLINE VF KeepNaN(VF x, VF r) { return hn::IfThenElse(hn::IsNaN(x), x, r); }

// e^x. Below -120 Exp's int32 range reduction could overflow; e^-120 is 0 in float anyway
// (ExpNonPositive). Above 104 (Exp's valid range) the result is +inf, as it is from 88.73 on.
HWY_INLINE VF ExpAny(DF d, VF x) {
  const VF r = hn::Exp(d, hn::Min(hn::Max(x, hn::Set(d, -120.0f)), hn::Set(d, 104.0f)));
  return KeepNaN(x, r);
}

// tanh x. Highway's Tanh converts float to int in its range reduction, which NaN and huge
// inputs must not reach (undefined behaviour on the scalar targets): |x| is clamped to 10,
// where tanh is ±1 in float, and NaN passes through.
HWY_INLINE VF TanhAny(DF d, VF x) {
  const VF r = hn::Tanh(d, hn::Min(hn::Max(x, hn::Set(d, -10.0f)), hn::Set(d, 10.0f)));
  return KeepNaN(x, r);
}

// ln x for x > 0 (Highway's Log); ln 0 = -inf, ln of a negative number NaN, as in std::log.
HWY_INLINE VF LogAny(DF d, VF x) {
  const VF zero = hn::Zero(d);
  const VF r = hn::Log(d, hn::Max(x, hn::Set(d, 1e-38f)));  // positive normals only
  const VF inf = hn::Set(d, HUGE_VALF);
  VF out = hn::IfThenElse(hn::Eq(x, zero), hn::Neg(inf), r);
  out = hn::IfThenElse(hn::Eq(x, inf), inf, out);
  // Positive denormals: ln x = ln(x · 2^64) − 64 ln 2 (the scaled value is a normal float).
  const auto denormal = hn::And(hn::Gt(x, zero), hn::Lt(x, hn::Set(d, 1.17549435e-38f)));
  const VF scaled = hn::Sub(hn::Log(d, hn::Mul(hn::Max(x, hn::Set(d, 1e-45f)), hn::Set(d, 18446744073709551616.0f))),
                            hn::Set(d, 44.3614195558365f));
  out = hn::IfThenElse(denormal, scaled, out);
  return hn::IfThenElse(hn::Or(hn::Lt(x, zero), hn::IsNaN(x)), hn::Set(d, NAN), out);
}

// 1 / (1 + e^-x) without overflow: with e = e^-|x| <= 1, 1/(1+e) for x >= 0 and e/(1+e) below.
HWY_INLINE VF Sigmoid(DF d, VF x) {
  const VF e = hn::Exp(d, hn::Max(hn::Neg(hn::Abs(x)), hn::Set(d, -120.0f)));
  const VF q = hn::Div(hn::Set(d, 1.0f), hn::Add(hn::Set(d, 1.0f), e));
  return KeepNaN(x, hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(e, q), q));
}

// Φ(x) = erfc(−x/√2) / 2, the standard normal CDF. erfc(z) for z >= 0 is Numerical Recipes'
// erfcc (a Chebyshev fit, fractional error below 1.2e-7 in exact arithmetic): the far tail
// Φ(x) for x << 0 keeps its relative accuracy, and Φ(x) = 1 − erfc(x/√2)/2 for x >= 0.
HWY_INLINE VF NormalCdf(DF d, VF x) {
  const VF z = hn::Mul(hn::Abs(x), hn::Set(d, 0.70710678118654752f));
  const VF one = hn::Set(d, 1.0f);
  const VF t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.5f), z, one));
  VF p = hn::Set(d, 0.17087277f);
  p = hn::MulAdd(p, t, hn::Set(d, -0.82215223f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.48851587f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.13520398f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.27886807f));
  p = hn::MulAdd(p, t, hn::Set(d, -0.18628806f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.09678418f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.37409196f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.00002368f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.26551223f));
  const VF arg = hn::Max(hn::NegMulAdd(z, z, p), hn::Set(d, -120.0f));
  const VF half_erfc = hn::Mul(hn::Mul(hn::Set(d, 0.5f), t), hn::Exp(d, arg));
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), half_erfc, hn::Sub(one, half_erfc));
}

// φ(x) = e^(−x²/2) / √(2π), the standard normal density.
HWY_INLINE VF NormalPdf(DF d, VF x) {
  const VF arg = hn::Max(hn::Mul(hn::Set(d, -0.5f), hn::Mul(x, x)), hn::Set(d, -120.0f));
  return hn::Mul(hn::Exp(d, arg), hn::Set(d, 0.39894228040143268f));
}

template <MathFn F>
HWY_INLINE VF Apply(DF d, VF a, VF b, VF c, VF s) {
  if constexpr (F == MathFn::kCopy) return a;
  if constexpr (F == MathFn::kAdd) return hn::Add(a, b);
  if constexpr (F == MathFn::kSub) return hn::Sub(a, b);
  if constexpr (F == MathFn::kMul) return hn::Mul(a, b);
  if constexpr (F == MathFn::kDiv) return hn::Div(a, b);
  if constexpr (F == MathFn::kAddScalar) return hn::Add(a, s);
  if constexpr (F == MathFn::kMulScalar) return hn::Mul(a, s);
  if constexpr (F == MathFn::kRsubScalar) return hn::Sub(s, a);
  if constexpr (F == MathFn::kDivScalar) return hn::Div(a, s);
  if constexpr (F == MathFn::kRdivScalar) return hn::Div(s, a);
  if constexpr (F == MathFn::kExp) return ExpAny(d, a);
  if constexpr (F == MathFn::kLog) return LogAny(d, a);
  if constexpr (F == MathFn::kTanh) return TanhAny(d, a);
  if constexpr (F == MathFn::kSigmoid) return Sigmoid(d, a);
  if constexpr (F == MathFn::kGelu) return hn::Mul(a, NormalCdf(d, a));
  if constexpr (F == MathFn::kTanhBackward) return hn::Mul(a, hn::NegMulAdd(b, b, hn::Set(d, 1.0f)));
  if constexpr (F == MathFn::kSigmoidBackward) return hn::Mul(hn::Mul(a, b), hn::Sub(hn::Set(d, 1.0f), b));
  if constexpr (F == MathFn::kGeluBackward) return hn::Mul(a, hn::MulAdd(b, NormalPdf(d, b), NormalCdf(d, b)));
  if constexpr (F == MathFn::kDivBackward) return hn::Neg(hn::Div(hn::Mul(a, b), c));
}

template <MathFn F>
void ElementwiseT(const Strided& sp, const float* a, const float* b, const float* c, float scalar,
                  float* out, bool accumulate, Slice sl) {
  constexpr int kArity = Arity(F);
  const DF d;
  const VF vs = hn::Set(d, scalar);
  const int r = sp.rank;
  const int64_t inner = sp.dims[r - 1];
  // Whole vectors per slice where possible (a partial vector would give the same bits).
  const auto [lo, hi] = slice_range_grain(sp.numel(), 16, sl);
  const float* src[3] = {a, b, c};
  HWY_ALIGN float splat[3][hn::MaxLanes(d)];
  for (int64_t i = lo; i < hi;) {
    const int64_t row = i / inner, j0 = i % inner, j1 = std::min(inner, j0 + (hi - i));
    int64_t off[3] = {0, 0, 0};
    int64_t rem = row;
    for (int k = r - 2; k >= 0; --k) {
      const int64_t idx = rem % sp.dims[k];
      rem /= sp.dims[k];
      for (int p = 0; p < kArity; ++p) off[p] += idx * sp.stride[p][k];
    }
    // An operand broadcast along the inner dim reads one value: a vector of it, not stepped.
    const float* ptr[3] = {nullptr, nullptr, nullptr};
    int64_t inc[3] = {0, 0, 0};
    for (int p = 0; p < kArity; ++p) {
      if (sp.stride[p][r - 1] == 0) {
        hn::Store(hn::Set(d, src[p][off[p]]), d, splat[p]);
        ptr[p] = splat[p];
      } else {
        ptr[p] = src[p] + off[p];
        inc[p] = 1;
      }
    }
    float* orow = out + row * inner;
    WithFlag(accumulate, [&](auto kAccumulate) {
      ForEachVector(d, orow, j0, j1, [&](int64_t j, size_t m) {
        const VF va = LoadUpTo(d, ptr[0] + inc[0] * j, m);
        VF vb = va, vc = va;
        if constexpr (kArity >= 2) vb = LoadUpTo(d, ptr[1] + inc[1] * j, m);
        if constexpr (kArity >= 3) vc = LoadUpTo(d, ptr[2] + inc[2] * j, m);
        const VF y = Apply<F>(d, va, vb, vc, vs);
        if constexpr (decltype(kAccumulate)::value) {
          return hn::Add(LoadUpTo(d, orow + j, m), y);
        } else {
          return y;
        }
      });
    });
    i += j1 - j0;
  }
}

void Elementwise(MathFn fn, const Strided& sp, const float* a, const float* b, const float* c,
                 float scalar, float* out, bool accumulate, Slice sl) {
  switch (fn) {
#define ATTNKIT_MATH_CASE(f) \
  case MathFn::f: return ElementwiseT<MathFn::f>(sp, a, b, c, scalar, out, accumulate, sl);
    ATTNKIT_MATH_CASE(kCopy)
    ATTNKIT_MATH_CASE(kAdd)
    ATTNKIT_MATH_CASE(kSub)
    ATTNKIT_MATH_CASE(kMul)
    ATTNKIT_MATH_CASE(kDiv)
    ATTNKIT_MATH_CASE(kAddScalar)
    ATTNKIT_MATH_CASE(kMulScalar)
    ATTNKIT_MATH_CASE(kRsubScalar)
    ATTNKIT_MATH_CASE(kDivScalar)
    ATTNKIT_MATH_CASE(kRdivScalar)
    ATTNKIT_MATH_CASE(kExp)
    ATTNKIT_MATH_CASE(kLog)
    ATTNKIT_MATH_CASE(kTanh)
    ATTNKIT_MATH_CASE(kSigmoid)
    ATTNKIT_MATH_CASE(kGelu)
    ATTNKIT_MATH_CASE(kTanhBackward)
    ATTNKIT_MATH_CASE(kSigmoidBackward)
    ATTNKIT_MATH_CASE(kGeluBackward)
    ATTNKIT_MATH_CASE(kDivBackward)
#undef ATTNKIT_MATH_CASE
  }
}

// The kept (out stride != 0) and summed dims of a reduction space, each list padded in front
// to two dims of size 1, with x's (contiguous) strides.
struct ReduceDims {
  int64_t kdim[2] = {1, 1}, kstride[2] = {0, 0};
  int64_t rdim[2] = {1, 1}, rstride[2] = {0, 0};
};

void ReduceSum(const Strided& sp, const float* x, float scale, float divisor, float* out,
               bool accumulate, Slice sl) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int r = sp.rank;
  int64_t xs[4];
  xs[r - 1] = 1;
  for (int k = r - 2; k >= 0; --k) xs[k] = xs[k + 1] * sp.dims[k + 1];
  // The inner dim is handled apart: vectors along it when it is kept, a run summed when not.
  const bool inner_kept = sp.stride[0][r - 1] != 0;
  const int64_t inner = sp.dims[r - 1];
  ReduceDims rd;
  int nk = 0, nr = 0;
  for (int k = 0; k < r - 1; ++k) {
    // Coalesced dims alternate between kept and summed: at most two of each besides the inner.
    if (sp.stride[0][k] != 0) {
      rd.kdim[nk] = sp.dims[k], rd.kstride[nk] = xs[k], ++nk;
    } else {
      rd.rdim[nr] = sp.dims[k], rd.rstride[nr] = xs[k], ++nr;
    }
  }
  // Right-align the lists (the outer of two dims first).
  if (nk == 1) rd.kdim[1] = rd.kdim[0], rd.kstride[1] = rd.kstride[0], rd.kdim[0] = 1, rd.kstride[0] = 0;
  if (nr == 1) rd.rdim[1] = rd.rdim[0], rd.rstride[1] = rd.rstride[0], rd.rdim[0] = 1, rd.rstride[0] = 0;
  const VF vscale = hn::Set(d, scale), vdivisor = hn::Set(d, divisor);
  const int64_t outer_kept = rd.kdim[0] * rd.kdim[1];
  const int64_t n_out = outer_kept * (inner_kept ? inner : 1);
  WithFlag(accumulate, [&](auto kAccumulate) {
    constexpr bool kAcc = decltype(kAccumulate)::value;
    if (inner_kept) {
      const auto [lo, hi] = slice_range_grain(n_out, 16, sl);
      for (int64_t i = lo; i < hi;) {
        const int64_t row = i / inner, j0 = i % inner, j1 = std::min(inner, j0 + (hi - i));
        const float* xrow = x + (row / rd.kdim[1]) * rd.kstride[0] + (row % rd.kdim[1]) * rd.kstride[1];
        float* orow = out + row * inner;
        for (int64_t j = j0; j < j1; j += N) {
          const size_t m = static_cast<size_t>(std::min(N, j1 - j));
          VF acc = hn::Zero(d);
          // Terms in order: summed dims row-major, whatever the slice.
          for (int64_t q0 = 0; q0 < rd.rdim[0]; ++q0)
            for (int64_t q1 = 0; q1 < rd.rdim[1]; ++q1)
              acc = hn::Add(acc, LoadUpTo(d, xrow + q0 * rd.rstride[0] + q1 * rd.rstride[1] + j, m));
          VF y = hn::Div(hn::Mul(acc, vscale), vdivisor);
          if constexpr (kAcc) y = hn::Add(LoadUpTo(d, orow + j, m), y);
          if (m == static_cast<size_t>(N)) {
            hn::StoreU(y, d, orow + j);
          } else {
            StoreTail(d, y, orow + j, m);
          }
        }
        i += j1 - j0;
      }
    } else {
      const auto [lo, hi] = slice_range(n_out, sl);
      for (int64_t t = lo; t < hi; ++t) {
        const float* xt = x + (t / rd.kdim[1]) * rd.kstride[0] + (t % rd.kdim[1]) * rd.kstride[1];
        // Lane-wise partial sums over every run, in order, then one sum across the lanes.
        VF acc = hn::Zero(d);
        for (int64_t q0 = 0; q0 < rd.rdim[0]; ++q0)
          for (int64_t q1 = 0; q1 < rd.rdim[1]; ++q1) {
            const float* run = xt + q0 * rd.rstride[0] + q1 * rd.rstride[1];
            for (int64_t j = 0; j < inner; j += N)
              acc = hn::Add(acc, LoadUpTo(d, run + j, static_cast<size_t>(std::min(N, inner - j))));
          }
        const float y = hn::GetLane(hn::SumOfLanes(d, acc)) * scale / divisor;
        if constexpr (kAcc) {
          out[t] += y;
        } else {
          out[t] = y;
        }
      }
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(Elementwise);
HWY_EXPORT(ReduceSum);

Strided coalesce(const Strided& in, int operands) {
  Strided o;
  o.rank = 0;
  for (int i = 0; i < in.rank; ++i) {
    if (in.dims[i] == 1) continue;
    if (o.rank > 0) {
      const int k = o.rank - 1;
      bool merge = true;
      for (int p = 0; p < operands; ++p) merge = merge && o.stride[p][k] == in.stride[p][i] * in.dims[i];
      if (merge) {
        o.dims[k] *= in.dims[i];
        for (int p = 0; p < operands; ++p) o.stride[p][k] = in.stride[p][i];
        continue;
      }
    }
    o.dims[o.rank] = in.dims[i];
    for (int p = 0; p < operands; ++p) o.stride[p][o.rank] = in.stride[p][i];
    ++o.rank;
  }
  if (o.rank == 0) {  // a single element: one dim of 1, every operand read at offset 0
    o.rank = 1;
    o.dims[0] = 1;
    for (int p = 0; p < operands; ++p) o.stride[p][0] = 1;
  }
  return o;
}

void elementwise(MathFn fn, const Strided& s, const float* a, const float* b, const float* c,
                 float scalar, float* out, bool accumulate, Slice sl) {
  HWY_DYNAMIC_DISPATCH(Elementwise)(fn, s, a, b, c, scalar, out, accumulate, sl);
}

void reduce_sum(const Strided& s, const float* x, float scale, float divisor, float* out,
                bool accumulate, Slice sl) {
  HWY_DYNAMIC_DISPATCH(ReduceSum)(s, x, scale, divisor, out, accumulate, sl);
}
}  // namespace attnkit
#endif
