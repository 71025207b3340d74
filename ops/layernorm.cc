// Layer normalization over the last axis, forward and backward.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/layernorm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layernorm.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// Σ_j f(j, n) over [0, d) in vectors (f returns zeros in lanes >= n), reduced to one float.
template <class F>
HWY_INLINE float SumVectors(int64_t len, const F& f) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int64_t j = 0;
  for (; j + N <= len; j += N) acc = hn::Add(acc, f(j, static_cast<size_t>(N)));
  if (j < len) acc = hn::Add(acc, f(j, static_cast<size_t>(len - j)));
  return hn::GetLane(hn::SumOfLanes(d, acc));
}

// Mean first, then the variance around it (two passes: no cancellation for large means).
void LayernormForward(const float* x, const float* gamma, const float* beta, float* y,
                      float* mean, float* rstd, int64_t rows, int64_t dim, float eps, Slice s) {
  const DF d;
  const auto [r0, r1] = slice_range(rows, s);
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * dim;
    const float mu = SumVectors(dim, [&](int64_t j, size_t n) { return LoadUpTo(d, xr + j, n); }) * inv_dim;
    const auto vmu = hn::Set(d, mu);
    const float var = SumVectors(dim, [&](int64_t j, size_t n) {
      const auto c = hn::IfThenElseZero(hn::FirstN(d, n), hn::Sub(LoadUpTo(d, xr + j, n), vmu));
      return hn::Mul(c, c);
    }) * inv_dim;
    const float rs = 1.0f / std::sqrt(var + eps);
    mean[r] = mu;
    rstd[r] = rs;
    const auto vrs = hn::Set(d, rs);
    ForEachVector(d, y + r * dim, 0, dim, [&](int64_t j, size_t n) {
      const auto xhat = hn::Mul(hn::Sub(LoadUpTo(d, xr + j, n), vmu), vrs);
      return hn::MulAdd(xhat, LoadUpTo(d, gamma + j, n), LoadUpTo(d, beta + j, n));
    });
  }
}

// In the forward pass y = x̂·gamma + beta with x̂ = (x − mean)·rstd; with g = dy·gamma,
// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)). Rows [r0, r1). With dgamma (and dbeta), also
// dgamma += dy·x̂ and dbeta += dy row after row, while the row is in cache: over all rows in
// order that is LayernormBackwardParams's chain for every column, so the same bits.
static void BackwardRows(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* dy, float* dx, float* dgamma, float* dbeta, int64_t r0, int64_t r1,
                         int64_t dim, bool accumulate) {
  const DF d;
  const float inv_dim = 1.0f / static_cast<float>(dim);
  WithFlag(accumulate, [&](auto kAccumulate) {
    WithFlag(dgamma != nullptr, [&](auto kParams) {
      for (int64_t r = r0; r < r1; ++r) {
        const float *xr = x + r * dim, *dyr = dy + r * dim;
        float* dxr = dx + r * dim;
        const auto vmu = hn::Set(d, mean[r]), vrs = hn::Set(d, rstd[r]);
        auto xhat = [&](int64_t j, size_t n) { return hn::Mul(hn::Sub(LoadUpTo(d, xr + j, n), vmu), vrs); };
        auto g = [&](int64_t j, size_t n) { return hn::Mul(LoadUpTo(d, dyr + j, n), LoadUpTo(d, gamma + j, n)); };
        const float g_mean = SumVectors(dim, g) * inv_dim;
        const float gx_mean = SumVectors(dim, [&](int64_t j, size_t n) { return hn::Mul(g(j, n), xhat(j, n)); }) * inv_dim;
        const auto vg_mean = hn::Set(d, g_mean), vgx_mean = hn::Set(d, gx_mean);
        ForEachVector(d, dxr, 0, dim, [&](int64_t j, size_t n) {
          const auto vxhat = xhat(j, n);
          if constexpr (decltype(kParams)::value) {  // before dx's store: dx may be dy
            const auto vdy = LoadUpTo(d, dyr + j, n);
            StoreUpTo(d, hn::MulAdd(vdy, vxhat, LoadUpTo(d, dgamma + j, n)), dgamma + j, n);
            StoreUpTo(d, hn::Add(LoadUpTo(d, dbeta + j, n), vdy), dbeta + j, n);
          }
          const auto v = hn::Mul(vrs, hn::NegMulAdd(vxhat, vgx_mean, hn::Sub(g(j, n), vg_mean)));
          if constexpr (decltype(kAccumulate)::value) {
            return hn::Add(LoadUpTo(d, dxr + j, n), v);
          } else {
            return v;
          }
        });
      }
    });
  });
}

void LayernormBackwardInput(const float* x, const float* gamma, const float* mean,
                            const float* rstd, const float* dy, float* dx, int64_t rows,
                            int64_t dim, bool accumulate, Slice s) {
  const auto [r0, r1] = slice_range(rows, s);
  BackwardRows(x, gamma, mean, rstd, dy, dx, nullptr, nullptr, r0, r1, dim, accumulate);
}

// dx, dgamma and dbeta in one pass over x and dy (one slice: all rows in order).
void LayernormBackwardAll(const float* x, const float* gamma, const float* mean, const float* rstd,
                          const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim,
                          bool accumulate) {
  BackwardRows(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, 0, rows, dim, accumulate);
}

// dgamma = Σ_rows dy·x̂, dbeta = Σ_rows dy, each column summed over rows in order. Up to
// kBlocks vectors of columns at a time: one pass over the rows reads whole cache lines and
// keeps 2·kBlocks independent chains going (the same chains, and bits, as one at a time).
// Rows go in chunks of kRowChunk: every block of columns of a chunk is summed while the
// chunk's rows of x and dy are still in cache, so both are read from memory once, not once
// per block. Each chain is parked in dgamma/dbeta between chunks: the same bits.
void LayernormBackwardParams(const float* x, const float* mean, const float* rstd,
                             const float* dy, float* dgamma, float* dbeta, int64_t rows,
                             int64_t dim, Slice s) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  constexpr int kBlocks = 4;
  constexpr int64_t kRowChunk = 32;
  const auto [c0, c1] = slice_range_grain(dim, N, s);
  for (int64_t r0 = 0; r0 < rows; r0 += kRowChunk) {
    const int64_t r1 = std::min(rows, r0 + kRowChunk);
    for (int64_t j0 = c0; j0 < c1; j0 += kBlocks * N) {
      const int64_t blocks = std::min<int64_t>(kBlocks, (c1 - j0 + N - 1) / N);
      size_t n[kBlocks];
      hn::Vec<DF> acc_gamma[kBlocks], acc_beta[kBlocks];
      for (int b = 0; b < kBlocks; ++b) {
        const int64_t j = j0 + b * N;
        n[b] = b < blocks ? static_cast<size_t>(std::min<int64_t>(N, c1 - j)) : 0;
        acc_gamma[b] = acc_beta[b] = hn::Zero(d);
        if (b < blocks) {
          acc_gamma[b] = LoadUpTo(d, dgamma + j, n[b]);
          acc_beta[b] = LoadUpTo(d, dbeta + j, n[b]);
        }
      }
      for (int64_t r = r0; r < r1; ++r) {
        const auto vmu = hn::Set(d, mean[r]), vrs = hn::Set(d, rstd[r]);
        for (int b = 0; b < kBlocks; ++b) {
          if (b >= blocks) break;
          const int64_t j = j0 + b * N;
          const auto vdy = LoadUpTo(d, dy + r * dim + j, n[b]);
          const auto xhat = hn::Mul(hn::Sub(LoadUpTo(d, x + r * dim + j, n[b]), vmu), vrs);
          acc_gamma[b] = hn::MulAdd(vdy, xhat, acc_gamma[b]);
          acc_beta[b] = hn::Add(acc_beta[b], vdy);
        }
      }
      for (int b = 0; b < blocks; ++b) {
        const int64_t j = j0 + b * N;
        if (n[b] == static_cast<size_t>(N)) {
          hn::StoreU(acc_gamma[b], d, dgamma + j);
          hn::StoreU(acc_beta[b], d, dbeta + j);
        } else {
          StoreTail(d, acc_gamma[b], dgamma + j, n[b]);
          StoreTail(d, acc_beta[b], dbeta + j, n[b]);
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(LayernormForward);
HWY_EXPORT(LayernormBackwardInput);
HWY_EXPORT(LayernormBackwardParams);
HWY_EXPORT(LayernormBackwardAll);

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                       float* mean, float* rstd, int64_t rows, int64_t d, float eps, Slice s) {
  HWY_DYNAMIC_DISPATCH(LayernormForward)(x, gamma, beta, y, mean, rstd, rows, d, eps, s);
}
void layernorm_backward_input(const float* x, const float* gamma, const float* mean,
                              const float* rstd, const float* dy, float* dx, int64_t rows,
                              int64_t d, bool accumulate, Slice s) {
  HWY_DYNAMIC_DISPATCH(LayernormBackwardInput)(x, gamma, mean, rstd, dy, dx, rows, d, accumulate, s);
}
void layernorm_backward_params(const float* x, const float* mean, const float* rstd,
                               const float* dy, float* dgamma, float* dbeta, int64_t rows,
                               int64_t d, Slice s) {
  HWY_DYNAMIC_DISPATCH(LayernormBackwardParams)(x, mean, rstd, dy, dgamma, dbeta, rows, d, s);
}
void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t d,
                        bool accumulate) {
  HWY_DYNAMIC_DISPATCH(LayernormBackwardAll)(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, d, accumulate);
}
}  // namespace attnkit
#endif
