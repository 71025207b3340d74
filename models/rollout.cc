#include "models/rollout.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "ops/gemm.h"

namespace attnkit {
namespace {

template <class T_>
std::vector<float> rollout(const T_* maps, int64_t layers, int64_t heads, int64_t T) {
  if (layers < 1 || heads < 1 || T < 1)
    throw Error("attention rollout: sizes must be positive (layers " + std::to_string(layers) + ", heads " +
                std::to_string(heads) + ", T " + std::to_string(T) + ")");
  if (T > kMaxRolloutT)
    throw Error("attention rollout: T = " + std::to_string(T) + " is over the limit of " +
                std::to_string(kMaxRolloutT) + " (each layer is a [T, T] · [T, T] product)");
  const size_t TT = static_cast<size_t>(T * T);
  std::vector<float> R(TT, 0.0f), A(TT), next(TT);
  std::vector<double> row(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) R[static_cast<size_t>(i * T + i)] = 1.0f;
  for (int64_t l = 0; l < layers; ++l) {
    // A = mean over heads, then 0.5·A + 0.5·I, rows renormalized.
    for (int64_t i = 0; i < T; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t h = 0; h < heads; ++h) {
        const T_* m = maps + ((l * heads + h) * T + i) * T;
        for (int64_t j = 0; j < T; ++j) row[static_cast<size_t>(j)] += static_cast<double>(m[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        double& a = row[static_cast<size_t>(j)];
        a = 0.5 * (a / static_cast<double>(heads)) + (i == j ? 0.5 : 0.0);
        sum += a;
      }
      if (!(sum > 0))
        throw Error("attention rollout: row " + std::to_string(i) + " of layer " + std::to_string(l) +
                    " does not sum to a positive value");
      for (int64_t j = 0; j < T; ++j) A[static_cast<size_t>(i * T + j)] = static_cast<float>(row[static_cast<size_t>(j)] / sum);
    }
    // R = A·R on the calling thread (the caller's --threads; sgemm would start its own team).
    sgemm_slice(false, false, T, T, T, 1.0f, A.data(), T, R.data(), T, 0.0f, next.data(), T, Slice{});
    R.swap(next);
  }
  return R;
}

}  // namespace

std::vector<float> attention_rollout(const float* maps, int64_t layers, int64_t heads, int64_t T) {
  return rollout(maps, layers, heads, T);
}
std::vector<float> attention_rollout(const double* maps, int64_t layers, int64_t heads, int64_t T) {
  return rollout(maps, layers, heads, T);
}

}  // namespace attnkit
