// One matrix product's operands for the GEMM tests (test_gemm, test_gemm_bf16): random values
// in [-1, 1], leading dimensions padded by `pad`, C's padding holding kSentinel (which must
// survive) and, with beta == 0, NaN in C (which must not leak into the result).
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace attnkit::testing {

struct Problem {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  std::vector<float> a, b, c;
};

constexpr float kSentinel = 12345.0f;  // in the ld padding of C; must survive untouched

inline Problem make_problem(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                            int64_t pad, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Problem p{ta, tb, m, n, k, 0, 0, 0, alpha, beta, {}, {}, {}};
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  p.lda = a_cols + pad;
  p.ldb = b_cols + pad;
  p.ldc = n + pad;
  p.a.resize(static_cast<size_t>(std::max<int64_t>(a_rows * p.lda, 1)));
  p.b.resize(static_cast<size_t>(std::max<int64_t>(b_rows * p.ldb, 1)));
  p.c.assign(static_cast<size_t>(std::max<int64_t>(m * p.ldc, 1)), kSentinel);
  for (auto& x : p.a) x = u(rng);
  for (auto& x : p.b) x = u(rng);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      p.c[i * p.ldc + j] = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  return p;
}

}  // namespace attnkit::testing
