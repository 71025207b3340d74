#include "models/rollout.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace attnkit {
namespace {

template <class T_>
std::vector<double> rollout(const T_* maps, int64_t layers, int64_t heads, int64_t T) {
  if (layers < 1 || heads < 1 || T < 1)
    throw Error("attention rollout: sizes must be positive (layers " + std::to_string(layers) + ", heads " +
                std::to_string(heads) + ", T " + std::to_string(T) + ")");
  const size_t TT = static_cast<size_t>(T * T);
  std::vector<double> R(TT, 0.0), A(TT), next(TT);
  for (int64_t i = 0; i < T; ++i) R[static_cast<size_t>(i * T + i)] = 1.0;
  for (int64_t l = 0; l < layers; ++l) {
    // A = mean over heads, then 0.5·A + 0.5·I, rows renormalized.
    std::fill(A.begin(), A.end(), 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      const T_* m = maps + (l * heads + h) * static_cast<int64_t>(TT);
      for (size_t e = 0; e < TT; ++e) A[e] += static_cast<double>(m[e]);
    }
    for (int64_t i = 0; i < T; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        double& a = A[static_cast<size_t>(i * T + j)];
        a = 0.5 * (a / static_cast<double>(heads)) + (i == j ? 0.5 : 0.0);
        sum += a;
      }
      if (!(sum > 0))
        throw Error("attention rollout: row " + std::to_string(i) + " of layer " + std::to_string(l) +
                    " does not sum to a positive value");
      for (int64_t j = 0; j < T; ++j) A[static_cast<size_t>(i * T + j)] /= sum;
    }
    // R = A·R
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        double s = 0;
        for (int64_t k = 0; k < T; ++k) s += A[static_cast<size_t>(i * T + k)] * R[static_cast<size_t>(k * T + j)];
        next[static_cast<size_t>(i * T + j)] = s;
      }
    R.swap(next);
  }
  return R;
}

}  // namespace

std::vector<double> attention_rollout(const float* maps, int64_t layers, int64_t heads, int64_t T) {
  return rollout(maps, layers, heads, T);
}
std::vector<double> attention_rollout(const double* maps, int64_t layers, int64_t heads, int64_t T) {
  return rollout(maps, layers, heads, T);
}

}  // namespace attnkit
