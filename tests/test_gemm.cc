// sgemm against a double-precision reference, against OpenBLAS, across slice counts, batched
// forms and backends, on every SIMD target the machine supports.
#include <catch2/catch.hpp>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <random>
#include <vector>

#include "gemm_problem.h"
#include "hwy_targets.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "engine/error.h"
#include "engine/simd_target.h"

namespace {

using attnkit::GemmBatch;
using attnkit::Slice;

using attnkit::testing::kSentinel;
using attnkit::testing::make_problem;
using attnkit::testing::Problem;

// Checks `got` (C after the product) against a double reference computed from p.c (C before),
// with a tolerance scaled by sum |a||b| and |beta·c|, and that the ld padding is untouched.
// bias (n values, or nullptr) is added to every row of the reference.
void check_against_reference(const Problem& p, const std::vector<float>& got,
                             const float* bias = nullptr) {
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double av = p.ta ? p.a[kk * p.lda + i] : p.a[i * p.lda + kk];
        const double bv = p.tb ? p.b[j * p.ldb + kk] : p.b[kk * p.ldb + j];
        sum += av * bv;
        mag += std::fabs(av * bv);
      }
      const double c0 = p.beta == 0.0f ? 0.0 : p.c[i * p.ldc + j];
      const double bj = bias ? bias[j] : 0.0;
      const double want = p.alpha * sum + p.beta * c0 + bj;
      const double tol =
          (p.k + 4) * eps * (std::fabs(p.alpha) * mag + std::fabs(p.beta * c0) + std::fabs(bj)) +
          1e-30;
      const float have = got[i * p.ldc + j];
      if (!(std::fabs(have - want) <= tol)) {
        INFO("C[" << i << "," << j << "] = " << have << ", want " << want << " (tol " << tol
                  << ")");
        REQUIRE(std::fabs(have - want) <= tol);
      }
    }
    for (int64_t j = p.n; j < p.ldc; ++j) REQUIRE(got[i * p.ldc + j] == kSentinel);
  }
}

std::vector<float> run_sgemm(const Problem& p) {
  std::vector<float> c = p.c;
  attnkit::sgemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
                 p.beta, c.data(), p.ldc);
  return c;
}

std::vector<float> run_slices(const Problem& p, int count) {
  std::vector<float> c = p.c;
  for (int s = 0; s < count; ++s)
    attnkit::sgemm_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(),
                         p.ldb, p.beta, c.data(), p.ldc, Slice{s, count});
  return c;
}

std::vector<float> run_bias_slices(const Problem& p, const float* bias, int count) {
  std::vector<float> c = p.c;
  for (int s = 0; s < count; ++s)
    attnkit::sgemm_bias_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(),
                              p.ldb, p.beta, c.data(), p.ldc, bias, Slice{s, count});
  return c;
}

std::vector<float> random_bias(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> bias(static_cast<size_t>(n));  // exact size: ASan sees reads past n
  for (auto& x : bias) x = u(rng);
  return bias;
}

// An epilogue's mask and addend, `size` floats each, from one generator: the mask like a
// ReLU's output (zeros, positives and, never from a ReLU, negatives), the addend in ±3.3.
struct EpilogueOperands {
  std::vector<float> mask, addend;
};
EpilogueOperands random_mask_and_addend(int64_t size, uint32_t seed) {
  EpilogueOperands o{std::vector<float>(static_cast<size_t>(size)), std::vector<float>(static_cast<size_t>(size))};
  std::mt19937 rng(seed);
  for (auto& v : o.mask) v = static_cast<float>(static_cast<int>(rng() % 3)) - 1.0f;
  for (auto& v : o.addend) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 300.0f;
  return o;
}

// What sgemm_epilogue_slice should give: `want` (m rows of n at stride ldc, already the product
// with e's bias) through e's elementwise ops row by row, as the separate kernels compute them.
void apply_epilogue_ops(const attnkit::GemmEpilogue& e, std::vector<float>& want, int64_t m, int64_t n,
                        int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = want.data() + i * ldc;
    if (e.relu && !e.relu_last) attnkit::relu_forward(row, row, n, Slice{});
    if (e.mask) attnkit::relu_backward(e.mask + i * e.ldm, row, row, n, false, Slice{});
    if (e.addend) attnkit::add_forward(row, e.addend + i * e.ld_addend, row, n, Slice{});
    if (e.relu_last) attnkit::relu_forward(row, row, n, Slice{});
  }
}

bool bitwise_equal(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

struct BackendGuard {
  explicit BackendGuard(attnkit::GemmBackend b) { attnkit::set_gemm_backend(b); }
  ~BackendGuard() { attnkit::set_gemm_backend(attnkit::GemmBackend::kAttnkit); }
};

struct Shape {
  int64_t m, n, k;
};

// Direct-path shapes, then shapes that take the packed path (deep k, wide n, several MC/KC/NC
// blocks and ragged edges).
const std::vector<Shape> kLargeShapes = {
    {65, 127, 257}, {37, 29, 513}, {150, 40, 300}, {70, 520, 13}, {13, 2100, 9},
    {257, 300, 130}, {127, 96, 128}, {640, 10, 128}, {33, 65, 7}, {128, 10, 640},
    {64, 2, 640}, {37, 5, 33}, {21, 12, 9}, {32, 32, 640}, {100, 48, 513}, {20, 64, 300},
    {97, 1, 50}, {200, 2, 33}, {640, 2, 64}, {70, 64, 2}};

}  // namespace

TEST_CASE("sgemm matches a double reference on every SIMD target", "[gemm]") {
  const std::vector<int64_t> sizes = {0, 1, 2, 7, 13, 33};
  const std::vector<std::pair<float, float>> scalars = {{1, 0}, {-0.5f, 1}, {2, -0.5f}, {0, 2}};
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    REQUIRE(std::string(attnkit::simd_target_name()) == target);
    uint32_t seed = 1;
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : sizes)
            for (auto [alpha, beta] : scalars) {
              if ((m + n + k + seed) % 3 != 0 && alpha != 1) continue;  // thin the grid
              const Problem p = make_problem(ta, tb, m, n, k, alpha, beta, seed % 3, seed);
              ++seed;
              INFO("ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                         << " alpha=" << alpha << " beta=" << beta);
              check_against_reference(p, run_sgemm(p));
            }
      for (const Shape& s : kLargeShapes) {
        for (auto [alpha, beta] : {std::pair<float, float>{1, 0}, {-0.5f, 2}}) {
          const Problem p = make_problem(ta, tb, s.m, s.n, s.k, alpha, beta, 3, seed++);
          INFO("ta=" << ta << " tb=" << tb << " m=" << s.m << " n=" << s.n << " k=" << s.k
                     << " alpha=" << alpha << " beta=" << beta);
          check_against_reference(p, run_sgemm(p));
        }
      }
    }
  });
}

TEST_CASE("sgemm agrees with cblas_sgemm on random shapes", "[gemm]") {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int64_t> dim(1, 300);
  for (int trial = 0; trial < 40; ++trial) {
    const bool ta = trial & 1, tb = trial & 2;
    const int64_t m = dim(rng), n = dim(rng), k = trial % 5 == 0 ? dim(rng) * 2 : dim(rng);
    const Problem p = make_problem(ta, tb, m, n, k, 0.75f, trial % 3 == 0 ? 0.0f : 0.5f,
                                   trial % 4, 1000 + trial);
    std::vector<float> want = p.c;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), p.alpha,
                p.a.data(), static_cast<int>(p.lda), p.b.data(), static_cast<int>(p.ldb),
                p.beta, want.data(), static_cast<int>(p.ldc));
    const std::vector<float> got = run_sgemm(p);
    INFO("ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        REQUIRE(got[i * p.ldc + j] ==
                Approx(want[i * p.ldc + j]).margin(1e-5 * std::sqrt(double(k))).epsilon(1e-4));
  }
}

// dW of a 1- or 2-class head (A transposed, C of one or two columns, C's rows contiguous):
// the swapped path's four-vector tiles store C's 16-row blocks whole (two interleaving
// permutes for two columns) where ldc equals the column count. The same bits as with C's rows
// padded apart (lane-by-lane stores), beta 0, 1 and 0.5, with and without a bias, every
// target and slice count; and the double reference.
TEST_CASE("thin transposed-A products with contiguous C rows store the padded layout's values", "[gemm]") {
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 4100;
    for (int64_t n : {1, 2})
      for (int64_t m : {64, 128, 200, 640})
        for (int64_t k : {1, 7, 640})
          for (float beta : {0.0f, 1.0f, 0.5f})
            for (bool with_bias : {false, true}) {
              const Problem p = make_problem(true, false, m, n, k, 0.75f, beta, 0, seed++);
              Problem padded = p;  // the same values, C's rows n + 3 apart
              padded.ldc = n + 3;
              padded.c.assign(static_cast<size_t>(m * padded.ldc), kSentinel);
              for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) padded.c[i * padded.ldc + j] = p.c[i * n + j];
              const std::vector<float> bias = random_bias(n, seed);
              const float* b = with_bias ? bias.data() : nullptr;
              INFO(target << " m=" << m << " n=" << n << " k=" << k << " beta=" << beta << " bias=" << with_bias);
              const std::vector<float> want = run_bias_slices(padded, b, 1);
              for (int count : {1, 2, 3}) {
                const std::vector<float> got = run_bias_slices(p, b, count);
                for (int64_t i = 0; i < m; ++i)
                  for (int64_t j = 0; j < n; ++j) REQUIRE(bitwise_equal({got[i * n + j]}, {want[i * padded.ldc + j]}));
                if (count == 1) check_against_reference(p, got, b);
              }
            }
  });
}

TEST_CASE("sgemm_slice results are bitwise independent of the slice count", "[gemm]") {
  std::vector<Shape> shapes = kLargeShapes;
  shapes.push_back({10, 10, 16});
  shapes.push_back({3, 50, 20});
  shapes.push_back({300, 300, 300});
  shapes.push_back({250, 600, 400});  // packed, several row blocks, column chunks and k-blocks
  shapes.push_back({128, 10, 640});  // thin C: the swapped direct path when A is transposed
  shapes.push_back({64, 2, 640});
  shapes.push_back({37, 5, 33});
  shapes.push_back({21, 7, 9});
  shapes.push_back({37, 3, 13});  // at most 4 columns: the dot path when A is not transposed
  shapes.push_back({23, 4, 9});
  shapes.push_back({32, 32, 640});  // deep: k walked in chunks when the columns are whole tiles
  shapes.push_back({100, 48, 513});
  shapes.push_back({20, 64, 300});
  for (int trans = 0; trans < 4; ++trans) {
    for (const Shape& s : shapes) {
      const Problem p = make_problem(trans & 1, trans & 2, s.m, s.n, s.k, 1.5f, -0.5f, 1, 7);
      const std::vector<float> one = run_slices(p, 1);
      INFO("trans=" << trans << " m=" << s.m << " n=" << s.n << " k=" << s.k);
      for (int count : {2, 3, 8}) REQUIRE(bitwise_equal(one, run_slices(p, count)));
      const int saved = omp_get_max_threads();
      omp_set_num_threads(2);
      REQUIRE(bitwise_equal(one, run_sgemm(p)));  // sgemm's own parallel region
      omp_set_num_threads(saved);
    }
  }
}

// The engine's dynamic slices: all slices of a call share a task counter and take row blocks
// from it in whatever order the threads come; every value must come out bitwise as with one
// static slice, whoever computed it.
std::vector<float> run_dynamic_slices(const Problem& p, const float* bias, int count, bool threads) {
  std::vector<float> c = p.c;
  attnkit::TaskCounter counters[attnkit::kNodeTaskCounters];
  auto one = [&](int s) {
    attnkit::sgemm_bias_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta,
                              c.data(), p.ldc, bias, Slice{s, count, counters});
  };
  if (threads) {
#pragma omp parallel num_threads(count)
    one(omp_get_thread_num() % count);  // fewer threads than asked: the counter still covers all
  } else {
    for (int s = 0; s < count; ++s) one(s);  // slice 0 takes every task, the others find none
  }
  return c;
}

TEST_CASE("dynamic slices (a shared task counter) give bitwise the static result", "[gemm]") {
  const std::vector<Shape> shapes = {{640, 96, 32}, {640, 32, 32}, {640, 10, 128}, {1000, 64, 32},
                                     {333, 17, 45},  {256, 32, 10}, {100, 100, 20}, {40, 300, 16}};
  std::vector<float> bias(300);
  for (size_t j = 0; j < bias.size(); ++j) bias[j] = 0.01f * static_cast<float>(j) - 1.0f;
  for (int trans = 0; trans < 4; ++trans)
    for (const Shape& sh : shapes)
      for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
        const Problem p = make_problem(trans & 1, trans & 2, sh.m, sh.n, sh.k, 1.0f, 0.0f, 3, 11);
        std::vector<float> ref = p.c;
        attnkit::sgemm_bias_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta,
                                  ref.data(), p.ldc, b, Slice{0, 1});
        INFO("trans=" << trans << " m=" << sh.m << " n=" << sh.n << " k=" << sh.k << " bias=" << (b != nullptr));
        for (int count : {2, 3}) {
          REQUIRE(bitwise_equal(ref, run_dynamic_slices(p, b, count, false)));
          REQUIRE(bitwise_equal(ref, run_dynamic_slices(p, b, count, true)));
        }
      }
}

TEST_CASE("sgemm_bias_slice adds the bias on every SIMD target, whatever the slice count",
          "[gemm]") {
  const std::vector<int64_t> sizes = {1, 2, 7, 9, 13, 33};
  std::vector<Shape> shapes = kLargeShapes;
  for (Shape s : {Shape{10, 10, 16}, Shape{640, 32, 32}, Shape{640, 128, 32}, Shape{256, 10, 32},
                  Shape{640, 10, 128}, Shape{20, 10, 32}, Shape{37, 3, 13},
                  Shape{21, 7, 9}, Shape{300, 300, 300}, Shape{130, 600, 400}, Shape{5, 3, 0},
                  Shape{37, 100, 9}, Shape{640, 128, 10}, Shape{29, 200, 16}})
    shapes.push_back(s);
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 500;
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      std::vector<Shape> all = shapes;
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{16}})
            if ((m + n + k) % 2 == 0) all.push_back({m, n, k});
      for (const Shape& s : all) {
        int scalars = 0;
        for (auto [alpha, beta] :
             {std::pair<float, float>{1, 0}, {-0.5f, 1}, {2, -0.5f}, {0, 0.5f}}) {
          if (s.m * s.n * s.k > 1000000 && scalars++ >= 2) break;  // big shapes: 2 cases
          const Problem p = make_problem(ta, tb, s.m, s.n, s.k, alpha, beta, seed % 3, seed);
          const std::vector<float> bias = random_bias(s.n, seed);
          ++seed;
          INFO(target << " ta=" << ta << " tb=" << tb << " m=" << s.m << " n=" << s.n
                      << " k=" << s.k << " alpha=" << alpha << " beta=" << beta);
          const std::vector<float> one = run_bias_slices(p, bias.data(), 1);
          check_against_reference(p, one, bias.data());
          for (int count : {2, 3, 8})
            REQUIRE(bitwise_equal(one, run_bias_slices(p, bias.data(), count)));
          // No bias: exactly sgemm_slice.
          REQUIRE(bitwise_equal(run_slices(p, 2), run_bias_slices(p, nullptr, 2)));
        }
      }
    }
  });
}

// The relu / mask / addend epilogue (a Linear–ReLU's forward, a ReLU's backward in the product
// of its output's gradient, a residual sum): bitwise relu_forward / relu_backward / add_forward
// applied to the plain product's rows, on every path (direct, packed with several k-blocks,
// short-k, swapped, dot), every SIMD target and slice count, static or dynamic; the ld
// padding of C untouched.
TEST_CASE("sgemm_epilogue_slice: relu, mask and addend are bitwise relu_forward/backward, add",
          "[gemm]") {
  std::vector<Shape> shapes = kLargeShapes;
  for (Shape s : {Shape{128, 128, 64}, Shape{128, 64, 128}, Shape{640, 128, 32}, Shape{37, 3, 13},
                  Shape{640, 10, 128}, Shape{300, 1030, 400}, Shape{21, 7, 9}, Shape{5, 3, 0}, Shape{30, 9, 41},
                  Shape{30, 10, 33},
                  // the small path's fused stores: dx of narrow layers (k = 10, 2), at most 24
                  // rows, ragged last vectors of 1 and 2 per row
                  Shape{640, 128, 10}, Shape{640, 64, 2}, Shape{20, 10, 32}, Shape{13, 33, 7},
                  Shape{640, 17, 16}, Shape{24, 16, 5},
                  // k <= 16 and at least four vectors of columns: 6 × 4-vector tiles, then
                  // the rest in tiles of up to two vectors
                  Shape{37, 100, 9}, Shape{7, 64, 1}, Shape{29, 200, 16}})
    shapes.push_back(s);
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 900;
    for (int trans = 0; trans < 4; ++trans) {
      for (const Shape& s : shapes) {
        for (int kind = 0; kind < 6; ++kind) {  // relu, mask, relu + mask, addend, all three, relu(· + addend)
          // beta = 0 for every kind on half the shapes: the fused stores overwrite C
          const float beta = kind == 1 || kind == 3 || seed % 2 == 0 ? 0.0f : 0.5f;
          const Problem p = make_problem(trans & 1, trans & 2, s.m, s.n, s.k, 1.0f, beta, seed % 3, seed);
          const std::vector<float> bias = random_bias(s.n, seed);
          const int64_t ldm = s.n + 5;
          const EpilogueOperands ops = random_mask_and_addend(std::max<int64_t>(s.m * ldm, 1), seed++);
          attnkit::GemmEpilogue e;
          e.bias = kind == 2 ? nullptr : bias.data();
          e.relu = kind != 1 && kind != 3;
          e.relu_last = kind == 5;
          if (kind == 1 || kind == 2 || kind == 4) e.mask = ops.mask.data(), e.ldm = ldm;
          if (kind >= 3) e.addend = ops.addend.data(), e.ld_addend = ldm;
          // The expected: the plain product, then the elementwise ops row by row.
          std::vector<float> want = run_bias_slices(p, e.bias, 1);
          apply_epilogue_ops(e, want, s.m, s.n, p.ldc);
          INFO(target << " ta=" << p.ta << " tb=" << p.tb << " m=" << s.m << " n=" << s.n
                      << " k=" << s.k << " kind=" << kind);
          for (int count : {1, 2, 3}) {
            std::vector<float> got = p.c;
            for (int sl = 0; sl < count; ++sl)
              attnkit::sgemm_epilogue_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda,
                                            p.b.data(), p.ldb, p.beta, got.data(), p.ldc, e,
                                            Slice{sl, count});
            REQUIRE(bitwise_equal(want, got));
            std::vector<float> dyn = p.c;
            attnkit::TaskCounter counters[attnkit::kNodeTaskCounters];
            for (int sl = 0; sl < count; ++sl)
              attnkit::sgemm_epilogue_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda,
                                            p.b.data(), p.ldb, p.beta, dyn.data(), p.ldc, e,
                                            Slice{sl, count, counters});
            REQUIRE(bitwise_equal(want, dyn));
          }
        }
      }
    }
  });
  // The OpenBLAS backend applies the same epilogue after its product.
  BackendGuard guard(attnkit::GemmBackend::kOpenBLAS);
  const Problem p = make_problem(false, true, 65, 127, 257, 1.0f, 0.0f, 2, 4);
  std::vector<float> mask(65 * 127);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = static_cast<float>(i % 3) - 1.0f;
  attnkit::GemmEpilogue e;
  e.relu = true;
  e.mask = mask.data(), e.ldm = 127;
  std::vector<float> want = run_bias_slices(p, nullptr, 1);
  for (int64_t i = 0; i < p.m; ++i) {
    float* row = want.data() + i * p.ldc;
    attnkit::relu_forward(row, row, p.n, Slice{});
    attnkit::relu_backward(mask.data() + i * 127, row, row, p.n, false, Slice{});
  }
  std::vector<float> got = p.c;
  attnkit::sgemm_epilogue_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(),
                                p.ldb, p.beta, got.data(), p.ldc, e, Slice{});
  REQUIRE(bitwise_equal(want, got));
}

// Column sums of B while the packed path packs it (a Linear's bias gradient from its dW
// product): bitwise bias_backward's sums, whatever the slice count; left alone where
// sgemm_fuses_colsum says the path does not do it.
TEST_CASE("sgemm_epilogue_slice sums B's columns as bias_backward does", "[gemm]") {
  // The last two are not on the packed path (short-k, direct): no sums there.
  const std::vector<Shape> shapes = {{256, 256, 4096}, {256, 1024, 4096}, {1024, 256, 700},
                                     {130, 600, 400}, {97, 64, 1000}, {96, 100, 90}, {32, 32, 640}};
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 1300;
    for (const Shape& s : shapes) {
      for (bool accumulate : {false, true}) {
        const Problem p = make_problem(true, false, s.m, s.n, s.k, 1.0f, 0.0f, seed % 3, seed);
        ++seed;
        // B is k × n with row stride ldb: the sums of its n columns over k rows.
        std::vector<float> dy(static_cast<size_t>(s.k * s.n));
        for (int64_t r = 0; r < s.k; ++r)
          for (int64_t j = 0; j < s.n; ++j) dy[r * s.n + j] = p.b[r * p.ldb + j];
        const std::vector<float> start = random_bias(s.n, seed);
        std::vector<float> want = start;
        attnkit::bias_backward(dy.data(), want.data(), s.k, s.n, Slice{}, accumulate);
        const bool fused = attnkit::sgemm_fuses_colsum(false, s.m, s.n, s.k);
        INFO(target << " m=" << s.m << " n=" << s.n << " k=" << s.k << " accumulate=" << accumulate
                    << " fused=" << fused);
        CHECK(fused == (s.k > 160 && s.m > 32));
        for (int count : {1, 2, 3}) {
          for (bool dynamic : {false, true}) {
            std::vector<float> got = start, c = p.c;
            attnkit::GemmEpilogue e;
            e.colsum = got.data();
            e.colsum_accumulate = accumulate;
            attnkit::TaskCounter counters[attnkit::kNodeTaskCounters];
            for (int sl = 0; sl < count; ++sl)
              attnkit::sgemm_epilogue_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda,
                                            p.b.data(), p.ldb, p.beta, c.data(), p.ldc, e,
                                            dynamic ? Slice{sl, count, counters} : Slice{sl, count});
            REQUIRE(bitwise_equal(fused ? want : start, got));
            REQUIRE(bitwise_equal(run_slices(p, 1), c));  // the product itself unchanged
          }
        }
      }
    }
  });
}

// The short-k path (many attention products: k 48 to 160, m >= 48, 48 <= n <= 512, op(B)
// packed into column micro-panels, A broadcast in place): every transpose combination, strided
// operands as in [B, T, H·dh] activations (pad 192: 64 columns in rows of 256), beta 0 / 1 /
// other, bias, shapes on both sides of each threshold and ragged row tiles and panels, on every
// SIMD target; and bitwise the same whatever the slice count, static or dynamic.
TEST_CASE("the short-k path (attention products) matches a double reference", "[gemm]") {
  const std::vector<Shape> shapes = {
      {128, 128, 64}, {128, 64, 128}, {48, 48, 48},   {47, 64, 64},  {64, 47, 64},
      {64, 64, 47},   {64, 64, 161},  {130, 50, 160}, {53, 513, 48}, {49, 512, 49},
      {55, 100, 96},  {61, 58, 72},   {100, 200, 50}, {57, 63, 130}};
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 900;
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      for (const Shape& s : shapes) {
        for (auto [alpha, beta] :
             {std::pair<float, float>{1, 0}, {0.125f, 1}, {-0.5f, 1.5f}}) {
          const int64_t pad = seed % 3 == 0 ? 192 : seed % 3;
          const Problem p = make_problem(ta, tb, s.m, s.n, s.k, alpha, beta, pad, seed);
          const std::vector<float> bias = random_bias(s.n, seed);
          ++seed;
          INFO(target << " ta=" << ta << " tb=" << tb << " m=" << s.m << " n=" << s.n
                      << " k=" << s.k << " alpha=" << alpha << " beta=" << beta
                      << " pad=" << pad);
          const std::vector<float> one = run_slices(p, 1);
          check_against_reference(p, one);
          for (int count : {2, 3, 8}) REQUIRE(bitwise_equal(one, run_slices(p, count)));
          const std::vector<float> with_bias = run_bias_slices(p, bias.data(), 1);
          check_against_reference(p, with_bias, bias.data());
          REQUIRE(bitwise_equal(with_bias, run_bias_slices(p, bias.data(), 3)));
          for (const float* b : {static_cast<const float*>(nullptr), bias.data()})
            for (int count : {2, 3})
              REQUIRE(bitwise_equal(b ? with_bias : one, run_dynamic_slices(p, b, count, true)));
        }
      }
    }
  });
}

// The attention products as the engine makes them: one sgemm_slice per (batch, head) over
// interleaved heads, T = 128, dh = 64 (the short-k path), against the reference.
TEST_CASE("attention-shaped products over interleaved heads", "[gemm]") {
  const int64_t T = 128, dh = 64, H = 4, D = H * dh;
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1, 1);
  struct Case {
    bool ta, tb;
    int64_t m, n, k, lda, ldb;
  };
  // QKᵀ / dY·Vᵀ (nt), P·V / dS·K (nn), Pᵀ·dY / dSᵀ·Q (tn).
  for (const Case& cs : {Case{false, true, T, T, dh, D, D}, Case{false, false, T, dh, T, T, D},
                         Case{true, false, T, dh, T, T, D}}) {
    for (float beta : {0.0f, 1.0f}) {
      const int64_t ldc = cs.n == T ? T : D;
      const int64_t a_rows = cs.ta ? cs.k : cs.m, b_rows = cs.tb ? cs.n : cs.k;
      std::vector<float> a(a_rows * cs.lda), b(b_rows * cs.ldb), c(cs.m * ldc);
      for (auto* v : {&a, &b, &c})
        for (auto& x : *v) x = u(rng);
      for (int64_t h : {int64_t{0}, H - 1}) {  // a head's columns inside the rows
        const int64_t a_off = cs.lda == D ? h * dh : 0, b_off = h * dh, c_off = ldc == D ? h * dh : 0;
        std::vector<float> got = c;
        attnkit::sgemm_slice(cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.0f, a.data() + a_off, cs.lda,
                             b.data() + b_off, cs.ldb, beta, got.data() + c_off, ldc, Slice{});
        INFO("ta=" << cs.ta << " tb=" << cs.tb << " beta=" << beta << " head=" << h);
        for (int64_t i = 0; i < cs.m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const float have = got[i * ldc + j];
            if (j < c_off || j >= c_off + cs.n) {  // other heads' columns: untouched
              REQUIRE(have == c[i * ldc + j]);
              continue;
            }
            double want = beta * double(c[i * ldc + j]), mag = std::fabs(want);
            for (int64_t kk = 0; kk < cs.k; ++kk) {
              const double av = cs.ta ? a[kk * cs.lda + a_off + i] : a[i * cs.lda + a_off + kk];
              const double bv = cs.tb ? b[(j - c_off) * cs.ldb + b_off + kk]
                                      : b[kk * cs.ldb + b_off + j - c_off];
              want += av * bv;
              mag += std::fabs(av * bv);
            }
            REQUIRE(std::fabs(have - want) <= (cs.k + 4) * 1.2e-7 * mag + 1e-30);
          }
      }
    }
  }
}

TEST_CASE("sgemm_bias_slice on the OpenBLAS backend", "[gemm]") {
  BackendGuard guard(attnkit::GemmBackend::kOpenBLAS);
  for (int trans = 0; trans < 4; ++trans) {
    for (const Shape& s :
         {Shape{5, 5, 0}, Shape{1, 1, 1}, Shape{65, 127, 257}, Shape{640, 10, 128}}) {
      for (float beta : {0.0f, -0.5f}) {
        const Problem p = make_problem(trans & 1, trans & 2, s.m, s.n, s.k, 2.0f, beta, 2, 9);
        const std::vector<float> bias = random_bias(s.n, 3);
        INFO("trans=" << trans << " m=" << s.m << " n=" << s.n << " k=" << s.k);
        check_against_reference(p, run_bias_slices(p, bias.data(), 1), bias.data());
        check_against_reference(p, run_bias_slices(p, bias.data(), 3), bias.data());
      }
    }
  }
}

TEST_CASE("sgemm_batched_slice runs attention over interleaved heads", "[gemm]") {
  // Q, K, V are [B, T, H·dh]; scores S = Q·Kᵀ are [B, H, T, T]; out = S·V is [B, T, H·dh].
  const int64_t B = 2, T = 10, H = 3, dh = 16, row = H * dh;
  std::vector<float> qa(B * T * row), ka(B * T * row), va(B * T * row);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* v : {&qa, &ka, &va})
    for (auto& x : *v) x = u(rng);

  GemmBatch scores_batch{B, H, T * row, dh, T * row, dh, H * T * T, T * T};
  GemmBatch out_batch{B, H, H * T * T, T * T, T * row, dh, T * row, dh};
  for (auto backend : {attnkit::GemmBackend::kAttnkit, attnkit::GemmBackend::kOpenBLAS}) {
    BackendGuard guard(backend);
    std::vector<float> one_s, one_o;
    for (int count : {1, 2, 5, 8}) {  // 8 > B·H: slices share products by rows
      std::vector<float> s(B * H * T * T, std::numeric_limits<float>::quiet_NaN());
      std::vector<float> o(B * T * row, std::numeric_limits<float>::quiet_NaN());
      for (int i = 0; i < count; ++i)
        attnkit::sgemm_batched_slice(false, true, T, T, dh, 0.25f, qa.data(), row, ka.data(),
                                     row, 0.0f, s.data(), T, scores_batch, Slice{i, count});
      for (int i = 0; i < count; ++i)
        attnkit::sgemm_batched_slice(false, false, T, dh, T, 1.0f, s.data(), T, va.data(), row,
                                     0.0f, o.data(), row, out_batch, Slice{i, count});
      for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t u2 = 0; u2 < T; ++u2) {
              double want = 0;
              for (int64_t e = 0; e < dh; ++e)
                want += double(qa[(bi * T + t) * row + h * dh + e]) *
                        ka[(bi * T + u2) * row + h * dh + e];
              REQUIRE(s[((bi * H + h) * T + t) * T + u2] == Approx(0.25 * want).margin(1e-5));
            }
            for (int64_t e = 0; e < dh; ++e) {
              double want = 0;
              for (int64_t u2 = 0; u2 < T; ++u2)
                want += double(s[((bi * H + h) * T + t) * T + u2]) *
                        va[(bi * T + u2) * row + h * dh + e];
              REQUIRE(o[(bi * T + t) * row + h * dh + e] == Approx(want).margin(1e-5));
            }
          }
      if (backend == attnkit::GemmBackend::kAttnkit) {
        if (count == 1) {
          one_s = s;
          one_o = o;
        } else {
          REQUIRE(bitwise_equal(one_s, s));
          REQUIRE(bitwise_equal(one_o, o));
        }
      }
    }
  }
}

// The backward's products with A transposed, dV = Pᵀ·dO and dK += dSᵀ·Q, over interleaved heads
// ([B, H, T, T] probabilities, [B, T, H·dh] activations): on AVX-512 the small tiles' permuted
// rows of a transposed A, in a batch loop that steps from head to head and batch to batch, and
// split between slices mid-batch. Against a double reference, bitwise across slice counts.
TEST_CASE("sgemm_batched_slice: transposed-A attention products over interleaved heads", "[gemm]") {
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    for (int64_t T : {8, 10, 12}) {
      const int64_t B = 2, H = 3, dh = 16, row = H * dh;
      std::vector<float> pa(B * H * T * T), da(B * T * row), c0(B * T * row);
      std::mt19937 rng(static_cast<uint32_t>(11 + T));
      std::uniform_real_distribution<float> u(-1, 1);
      for (auto* v : {&pa, &da, &c0})
        for (auto& x : *v) x = u(rng);
      const GemmBatch batch{B, H, H * T * T, T * T, T * row, dh, T * row, dh};
      for (float beta : {0.0f, 1.0f}) {
        std::vector<float> one;
        for (int count : {1, 2, 4, 7}) {  // 4, 7: slices start and end mid-batch
          std::vector<float> c = c0;
          for (int i = 0; i < count; ++i)
            attnkit::sgemm_batched_slice(true, false, T, dh, T, 1.0f, pa.data(), T, da.data(), row, beta,
                                         c.data(), row, batch, Slice{i, count});
          for (int64_t bi = 0; bi < B; ++bi)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t t = 0; t < T; ++t)
                for (int64_t e = 0; e < dh; ++e) {
                  const int64_t at = (bi * T + t) * row + h * dh + e;
                  double want = beta * double(c0[at]);
                  for (int64_t s2 = 0; s2 < T; ++s2)
                    want += double(pa[((bi * H + h) * T + s2) * T + t]) * da[(bi * T + s2) * row + h * dh + e];
                  INFO(target << " T=" << T << " beta=" << beta << " slices=" << count);
                  REQUIRE(c[at] == Approx(want).margin(1e-5));
                }
          if (count == 1) {
            one = c;
          } else {
            REQUIRE(bitwise_equal(one, c));
          }
        }
      }
    }
  });
}

TEST_CASE("sgemm_strided_batched matches the reference and one sgemm call per product", "[gemm]") {
  for (int trans = 0; trans < 4; ++trans) {
    for (Shape s : {Shape{10, 10, 16}, Shape{10, 16, 10}, Shape{33, 20, 300}}) {
      const int64_t count = 64;
      std::vector<Problem> ps;
      for (int64_t i = 0; i < count; ++i)
        ps.push_back(make_problem(trans & 1, trans & 2, s.m, s.n, s.k, 0.5f, i % 2 ? 1.0f : 0.0f,
                                  0, 100 + static_cast<uint32_t>(i)));
      const Problem& p0 = ps[0];
      const int64_t sa = p0.a.size(), sb = p0.b.size(), sc = p0.c.size();
      std::vector<float> a, b, c;
      for (const Problem& p : ps) {
        a.insert(a.end(), p.a.begin(), p.a.end());
        b.insert(b.end(), p.b.begin(), p.b.end());
        c.insert(c.end(), p.c.begin(), p.c.end());
      }
      // Products alternate beta 0 / 1, so run the two halves as two strided calls.
      for (int64_t parity = 0; parity < 2; ++parity)
        attnkit::sgemm_strided_batched(
            p0.ta, p0.tb, s.m, s.n, s.k, 0.5f, a.data() + parity * sa, p0.lda, 2 * sa,
            b.data() + parity * sb, p0.ldb, 2 * sb, parity ? 1.0f : 0.0f,
            c.data() + parity * sc, p0.ldc, 2 * sc, count / 2);
      for (int64_t i = 0; i < count; ++i) {
        INFO("trans=" << trans << " product " << i);
        const std::vector<float> got(c.begin() + i * sc, c.begin() + (i + 1) * sc);
        check_against_reference(ps[i], got);
        // A batch takes each product's path once for all of them: the same bits as one call.
        REQUIRE(bitwise_equal(run_sgemm(ps[i]), got));
      }
    }
  }
}

TEST_CASE("the OpenBLAS backend gives the same products", "[gemm]") {
  BackendGuard guard(attnkit::GemmBackend::kOpenBLAS);
  REQUIRE(attnkit::gemm_backend() == attnkit::GemmBackend::kOpenBLAS);
  for (int trans = 0; trans < 4; ++trans) {
    for (const Shape& s : {Shape{0, 5, 5}, Shape{5, 5, 0}, Shape{1, 1, 1}, Shape{65, 127, 257},
                           Shape{640, 10, 128}}) {
      for (float beta : {0.0f, -0.5f}) {
        const Problem p = make_problem(trans & 1, trans & 2, s.m, s.n, s.k, 2.0f, beta, 2, 9);
        INFO("trans=" << trans << " m=" << s.m << " n=" << s.n << " k=" << s.k);
        check_against_reference(p, run_sgemm(p));
        check_against_reference(p, run_slices(p, 3));
      }
    }
  }
}

TEST_CASE("the OpenBLAS backend names a library it cannot load and keeps the backend", "[gemm]") {
  using Catch::Matchers::Contains;
  attnkit::set_gemm_backend(attnkit::GemmBackend::kAttnkit);
  REQUIRE_THROWS_WITH(attnkit::load_openblas("/nonexistent/libopenblas.so.0"),
                      Contains("cannot load /nonexistent/libopenblas.so.0"));
  // A library that loads but is no BLAS (zlib: every test links it through the library).
  REQUIRE_THROWS_WITH(attnkit::load_openblas("libz.so.1"), Contains("libz.so.1 has no cblas_sgemm"));
  REQUIRE_THROWS_AS(attnkit::load_openblas("libz.so.1"), attnkit::Error);
  // load_openblas() without a name loads $ATTNKIT_OPENBLAS.
  REQUIRE(setenv("ATTNKIT_OPENBLAS", "/nonexistent/openblas.so", 1) == 0);
  REQUIRE_THROWS_WITH(attnkit::load_openblas(), Contains("/nonexistent/openblas.so"));
  REQUIRE(attnkit::gemm_backend() == attnkit::GemmBackend::kAttnkit);
  // Products still run on attnkit's kernels; a library loaded by name is the one
  // set_gemm_backend keeps (it does not go back to $ATTNKIT_OPENBLAS).
  const Problem p = make_problem(false, true, 7, 9, 5, 1.0f, 0.5f, 1, 3);
  check_against_reference(p, run_sgemm(p));
  attnkit::load_openblas("libopenblas.so.0");
  {
    BackendGuard guard(attnkit::GemmBackend::kOpenBLAS);
    REQUIRE(attnkit::gemm_backend() == attnkit::GemmBackend::kOpenBLAS);
    check_against_reference(p, run_sgemm(p));
  }
  REQUIRE(unsetenv("ATTNKIT_OPENBLAS") == 0);
}

TEST_CASE("simd_target_name names the best supported target", "[gemm]") {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  REQUIRE(std::string(attnkit::simd_target_name()) == hwy::TargetName(targets.front()));
}

TEST_CASE("force_simd_target moves every kernel to a lower target and back and rejects bad names", "[gemm]") {
  const std::vector<std::string> supported = attnkit::supported_simd_targets();
  REQUIRE(!supported.empty());
  const std::string best = attnkit::simd_target_name();
  for (const std::string& name : supported) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    attnkit::force_simd_target(lower);  // case-insensitive
    CHECK(std::string(attnkit::simd_target_name()) == name);
    CHECK(attnkit::supported_simd_targets() == supported);  // asking does not undo the choice
    CHECK(std::string(attnkit::simd_target_name()) == name);
    CHECK(attnkit::avx512_target_in_use() == (name.rfind("AVX3", 0) == 0));
    CHECK(attnkit::avx512_allowed() == (name.rfind("AVX3", 0) == 0));  // the bf16 kernels' rule
  }
  attnkit::force_simd_target("best");
  CHECK(std::string(attnkit::simd_target_name()) == best);
  CHECK(attnkit::avx512_allowed());
  CHECK_THROWS_WITH(attnkit::force_simd_target("AVX9"), Catch::Contains("unknown SIMD target 'AVX9'") &&
                                                             Catch::Contains(supported.front()));
  CHECK(std::string(attnkit::simd_target_name()) == best);  // a bad name changes nothing
  const std::vector<std::string> compiled = attnkit::compiled_simd_targets();
  for (const std::string& name : compiled) {
    if (std::find(supported.begin(), supported.end(), name) != supported.end()) continue;
    CHECK_THROWS_WITH(attnkit::force_simd_target(name), Catch::Contains("does not support"));
  }
  attnkit::force_simd_target("");
  CHECK(std::string(attnkit::simd_target_name()) == best);
}

// The small-product path (AVX-512: C tile in registers, masked ragged vector, Bᵀ transposed in
// registers) and the dot path (at most 4 columns, a tree reduction on AVX-512), at ragged sizes
// on every target, against the reference and across slice counts (bitwise).
TEST_CASE("small products and the dot path at ragged sizes match a double reference", "[gemm]") {
  const std::vector<int64_t> ms = {1, 2, 3, 5, 7, 8, 9, 10, 11, 12, 13, 16, 17, 24, 25, 31, 33};
  const std::vector<int64_t> ns = {1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 15, 16, 17, 24, 31, 32, 33};
  const std::vector<int64_t> ks = {1, 2, 7, 8, 9, 10, 16, 17, 31, 33};
  // (alpha, beta): C copied, added to, scaled and added to, overwritten with alpha·AB.
  const std::vector<std::pair<float, float>> scalars = {{1, 0}, {1, 1}, {-0.5f, 1.5f}, {2, 0}};
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 5000;
    for (int trans = 0; trans < 4; ++trans)
      for (int64_t m : ms)
        for (int64_t n : ns)
          for (int64_t k : ks) {
            if ((m * 7 + n * 3 + k + trans) % 4 != 0) continue;  // thin the grid
            const auto [alpha, beta] = scalars[seed % scalars.size()];
            const int64_t pad = seed % 3 == 0 ? 0 : seed % 3 == 1 ? 3 : 40;
            const Problem p = make_problem(trans & 1, trans & 2, m, n, k, alpha, beta, pad, seed);
            ++seed;
            INFO(target << " ta=" << (trans & 1) << " tb=" << (trans & 2) << " m=" << m
                        << " n=" << n << " k=" << k << " beta=" << beta << " pad=" << pad);
            const std::vector<float> one = run_slices(p, 1);
            check_against_reference(p, one);
            REQUIRE(bitwise_equal(one, run_sgemm(p)));
            for (int count : {2, 3}) REQUIRE(bitwise_equal(one, run_slices(p, count)));
            if (n <= 4) {  // the dot path's bias lanes
              const std::vector<float> bias = random_bias(n, seed);
              check_against_reference(p, run_bias_slices(p, bias.data(), 1), bias.data());
            }
          }
  });
}

namespace {
// Sets a kernel choice (set_gemm_small_values, set_gemm_avx512_width, set_gemm_ten_columns) for
// a scope and gives back the one in use before (the environment variable's, say), however the
// scope ends.
template <class E, E (*Get)(), void (*Set)(E)>
struct ScopedChoice {
  E was = Get();
  explicit ScopedChoice(E value) { Set(value); }
  ~ScopedChoice() { Set(was); }
};
using ScopedSmallValues =
    ScopedChoice<attnkit::SmallGemmValues, attnkit::gemm_small_values, attnkit::set_gemm_small_values>;
using ScopedAvx512Width =
    ScopedChoice<attnkit::Avx512Width, attnkit::gemm_avx512_width, attnkit::set_gemm_avx512_width>;
using ScopedTenColumns =
    ScopedChoice<attnkit::TenColumns, attnkit::gemm_ten_columns, attnkit::set_gemm_ten_columns>;
}  // namespace

// The AVX-512 small products get A's values by broadcasts only, or half by broadcasts and half
// by permutes out of a register (set_gemm_small_values / ATTNKIT_SMALL_GEMM, chosen per CPU
// vendor): the same FMA chains, so the same bits, per call and batched, with bias, at every
// combine — and both against the double reference. Rows 1..24, k up to 17 (the permuted
// forms take k <= 16 with A not transposed, any k with A transposed).
TEST_CASE("the small products' two ways to get A's values give the same bits", "[gemm]") {
  using attnkit::SmallGemmValues;
  const std::vector<int64_t> ms = {1, 2, 3, 5, 8, 9, 10, 11, 12, 13, 16, 24};
  const std::vector<int64_t> ns = {5, 8, 10, 16, 17, 32};
  const std::vector<int64_t> ks = {1, 2, 8, 10, 15, 16, 17};
  const std::vector<std::pair<float, float>> scalars = {{1, 0}, {1, 1}, {-0.5f, 1.5f}, {2, 0}};
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 12000;
    for (int ta = 0; ta < 2; ++ta)
      for (int64_t m : ms)
        for (int64_t n : ns)
          for (int64_t k : ks) {
            if ((m + n + k * 3 + ta) % 2 != 0) continue;  // thin the grid
            const auto [alpha, beta] = scalars[seed % scalars.size()];
            const Problem p = make_problem(ta, false, m, n, k, alpha, beta, (seed / 4) % 2 ? 0 : 3, seed);
            const std::vector<float> bias = random_bias(n, seed);
            ++seed;
            INFO(target << " ta=" << ta << " m=" << m << " n=" << n << " k=" << k << " alpha=" << alpha
                        << " beta=" << beta);
            std::vector<float> got[2], with_bias[2], batched[2];
            int idx = 0;
            for (SmallGemmValues v : {SmallGemmValues::kSplit, SmallGemmValues::kBroadcast}) {
              const ScopedSmallValues scoped(v);
              REQUIRE(std::string(attnkit::gemm_small_values_name()) == (idx == 0 ? "split" : "broadcast"));
              got[idx] = run_slices(p, 1);
              with_bias[idx] = run_bias_slices(p, bias.data(), 1);
              // Three products in a strided batch: the same operands, C three times.
              const int64_t sc = static_cast<int64_t>(p.c.size());
              std::vector<float> c3;
              for (int r = 0; r < 3; ++r) c3.insert(c3.end(), p.c.begin(), p.c.end());
              attnkit::sgemm_strided_batched(p.ta, p.tb, m, n, k, alpha, p.a.data(), p.lda, 0, p.b.data(), p.ldb, 0,
                                             beta, c3.data(), p.ldc, sc, 3);
              batched[idx] = c3;
              ++idx;
            }
            check_against_reference(p, got[0]);
            check_against_reference(p, with_bias[0], bias.data());
            REQUIRE(bitwise_equal(got[0], got[1]));
            REQUIRE(bitwise_equal(with_bias[0], with_bias[1]));
            REQUIRE(bitwise_equal(batched[0], batched[1]));
            for (int r = 0; r < 3; ++r)
              REQUIRE(bitwise_equal(got[0], std::vector<float>(batched[0].begin() + r * p.c.size(),
                                                               batched[0].begin() + (r + 1) * p.c.size())));
          }
  });
}

namespace {
// p against the double reference, plain and with a bias, and bitwise the same over 1, 2 and 3
// slices; the plain product's C.
std::vector<float> check_slices_and_bias(const Problem& p, uint32_t seed) {
  const std::vector<float> one = run_slices(p, 1);
  check_against_reference(p, one);
  for (int count : {2, 3}) REQUIRE(bitwise_equal(one, run_slices(p, count)));
  const std::vector<float> bias = random_bias(p.n, seed);
  const std::vector<float> with_bias = run_bias_slices(p, bias.data(), 1);
  check_against_reference(p, with_bias, bias.data());
  REQUIRE(bitwise_equal(with_bias, run_bias_slices(p, bias.data(), 3)));
  return one;
}

// `count` products of m × k by op(B) (n columns, B transposed with trans_b) through
// sgemm_strided_batched: bitwise the same as one sgemm call per product.
void require_batch_matches_calls(bool trans_b, int64_t m, int64_t n, int64_t k, int64_t count, uint32_t seed) {
  const Problem p = make_problem(false, trans_b, m * count, n * count, k, 1.0f, 0.0f, 0, seed);
  const int64_t ldb = trans_b ? k : n;
  std::vector<float> batched = p.c, single = p.c;
  attnkit::sgemm_strided_batched(false, trans_b, m, n, k, 1.0f, p.a.data(), k, m * k, p.b.data(), ldb, n * k, 0.0f,
                                 batched.data(), n, m * n, count);
  for (int64_t q = 0; q < count; ++q)
    attnkit::sgemm(false, trans_b, m, n, k, 1.0f, p.a.data() + q * m * k, k, p.b.data() + q * n * k, ldb, 0.0f,
                   single.data() + q * m * n, n);
  REQUIRE(std::memcmp(batched.data(), single.data(), count * m * n * sizeof(float)) == 0);
}

// The sweep of the 9-or-10-column tests: A·op(B) (op(B) = Bᵀ with trans_b) for every m of a
// fixed list, n = 9 and 10 and k of ks, scalars and padding from the seed; each against the
// double reference, bitwise over slices and with a bias (check_slices_and_bias), and its rows
// 3.. as a product of their own bitwise the same (the sums do not depend on the row a product
// starts at).
void check_ten_column_sweep(bool trans_b, const std::vector<int64_t>& ks, uint32_t seed, const std::string& target) {
  const std::vector<std::pair<float, float>> scalars = {{1, 0}, {-0.5f, 1}, {2, -0.5f}, {2, 0}};
  for (int64_t m : {1, 2, 9, 10, 11, 19, 21, 40, 130})
    for (int64_t n : {9, 10})
      for (int64_t k : ks) {
        const auto [alpha, beta] = scalars[seed % scalars.size()];
        const int64_t pad = seed % 3 == 0 ? 0 : seed % 3 == 1 ? 1 : 17;
        const Problem p = make_problem(false, trans_b, m, n, k, alpha, beta, pad, seed);
        ++seed;
        INFO(target << " tb=" << trans_b << " m=" << m << " n=" << n << " k=" << k << " beta=" << beta
                    << " pad=" << pad);
        const std::vector<float> one = check_slices_and_bias(p, seed);
        if (m > 3 && beta == 0.0f) {
          std::vector<float> tail(static_cast<size_t>((m - 3) * p.ldc), 0.0f);
          attnkit::sgemm_slice(false, trans_b, m - 3, n, k, alpha, p.a.data() + 3 * p.lda, p.lda, p.b.data(), p.ldb,
                               0.0f, tail.data(), p.ldc, Slice{});
          for (int64_t i = 0; i < m - 3; ++i)
            REQUIRE(std::memcmp(tail.data() + i * p.ldc, one.data() + (i + 3) * p.ldc, n * sizeof(float)) == 0);
        }
      }
}

}  // namespace

// The AVX-512 width choice (set_gemm_avx512_width / ATTNKIT_AVX512_WIDTH, chosen per CPU): for
// a core that issues 512-bit operations in halves (Zen 4), products of k <= 16 over more than
// one vector of columns take the direct path's tiles instead of the small path's (whole
// 16-column tiles without an epilogue: 256-bit ones, ShortHalfTiles), A transposed or not; both compute
// each element as the same FMA chain, so the bits are the same, plain and with a bias, per call
// and over slices, and both match the double reference.
TEST_CASE("the AVX-512 width choice changes no bits of short-k products", "[gemm]") {
  const std::vector<std::pair<float, float>> scalars = {{1, 0}, {1, 1}, {-0.5f, 1.5f}, {2, 0}};
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 12500;
    for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int64_t m : {1, 7, 12, 13, 30, 64})
        for (int64_t n : {17, 32, 33, 48, 64, 100, 128})
          for (int64_t k : {1, 2, 10, 16}) {
            if ((m + n + k + tb) % 2 != 0) continue;  // thin the grid
            if (ta && (m + n) % 3 != 0) continue;
            const auto [alpha, beta] = scalars[seed % scalars.size()];
            const Problem p = make_problem(ta, tb, m, n, k, alpha, beta, (seed / 4) % 2 ? 0 : 3, seed);
            const std::vector<float> bias = random_bias(n, seed);
            ++seed;
            INFO(target << " ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                        << " alpha=" << alpha << " beta=" << beta);
            std::vector<float> got[2], with_bias[2];
            int idx = 0;
            for (attnkit::Avx512Width w : {attnkit::Avx512Width::kFull, attnkit::Avx512Width::kHalves}) {
              const ScopedAvx512Width scoped(w);
              got[idx] = run_slices(p, 1);
              REQUIRE(bitwise_equal(got[idx], run_slices(p, 3)));
              with_bias[idx] = run_bias_slices(p, bias.data(), 1);
              ++idx;
            }
            check_against_reference(p, got[0]);
            check_against_reference(p, with_bias[1], bias.data());
            REQUIRE(bitwise_equal(got[0], got[1]));
            REQUIRE(bitwise_equal(with_bias[0], with_bias[1]));
          }
  });
}

// A transposed B of 5 to 8 columns with A not transposed (Q·Kᵀ at T <= 8): on AVX-512, k in
// pairs (even and odd k in neighbouring lanes, added at the end), an odd last k alone, several
// 16-k chunks, tiles of up to 12 rows; the same bits whatever the slices or the batching, a
// bias and an epilogue in the same stores.
TEST_CASE("products with a transposed B of 5 to 8 columns (k in pairs) match a double reference", "[gemm]") {
  const std::vector<std::pair<float, float>> scalars = {{1, 0}, {-0.5f, 1}, {2, -0.5f}, {2, 0}};
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 7100;
    for (int64_t m : {1, 2, 8, 13, 25, 40})
      for (int64_t n : {5, 6, 7, 8})
        for (int64_t k : {1, 2, 3, 15, 16, 17, 31, 32, 33, 64, 255, 256}) {
          const auto [alpha, beta] = scalars[seed % scalars.size()];
          const int64_t pad = seed % 3 == 0 ? 0 : seed % 3 == 1 ? 1 : 17;
          const Problem p = make_problem(false, true, m, n, k, alpha, beta, pad, seed);
          ++seed;
          INFO(target << " m=" << m << " n=" << n << " k=" << k << " beta=" << beta << " pad=" << pad);
          const std::vector<float> one = check_slices_and_bias(p, seed);
        }
    // An infinity in A's last column meets a finite B: ±inf, never inf · 0 = NaN from the
    // lane an odd last k leaves empty.
    for (int64_t k : {1, 17, 33}) {
      Problem p = make_problem(false, true, 8, 8, k, 1.0f, 0.0f, 0, 7000 + static_cast<uint32_t>(k));
      for (int64_t i = 0; i < p.m; ++i) p.a[i * p.lda + k - 1] = std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < p.n; ++j) p.b[j * p.ldb + k - 1] = j % 2 ? 1.0f : -1.0f;
      const std::vector<float> got = run_slices(p, 1);
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          INFO(target << " k=" << k << " C[" << i << "," << j << "] = " << got[i * p.ldc + j]);
          REQUIRE(got[i * p.ldc + j] == (j % 2 ? 1.0f : -1.0f) * std::numeric_limits<float>::infinity());
        }
    }
    // A batch: bitwise one call per product.
    INFO(target);
    require_batch_matches_calls(true, 8, 8, 32, 5, 7300);
  });
}

// Neither operand transposed, 9 or 10 columns (a 10-class head's forward x·W): on AVX-512 from
// k = 32, columns 0..7 with k in pairs and columns 8..9 with k in octets (UsePairsNN), an odd
// last k alone, a last octet of 1..7 k-steps, tiles of up to 10 rows; with the quads paths
// chosen (set_gemm_ten_columns), 8-lane rows and columns 8..9 with k in quads (UseQuadsNN),
// tiles of up to 12 rows, and from k = 32 all ten columns with k in quads (UseKQuadsNN), tiles of up to 5 rows;
// on AVX2 from k = 32 the same k quads in tiles of 2 rows (UseKQuadsNNAvx2); all with a last
// quad of 1..3 k-steps; the same bits whatever
// the slices, the batching or the row a product starts at, a bias in the same stores, and
// infinities where the lanes past k could have made inf · 0 = NaN.
TEST_CASE("products of 9 or 10 columns with B not transposed (k in pairs and octets, or quads) match a double reference",
          "[gemm]") {
  // 16-lane rows (the pairs path from k = 32) and the quads paths (set_gemm_ten_columns, chosen
  // per CPU): both ways on every CPU.
  for (attnkit::TenColumns layout : {attnkit::TenColumns::kWide, attnkit::TenColumns::kQuads}) {
    const ScopedTenColumns scoped(layout);
    attnkit::test::for_each_simd_target([&](const std::string& target_name) {
      const std::string target = target_name + " " + attnkit::gemm_ten_columns_name();
      check_ten_column_sweep(false,
                             {1, 2, 3, 4, 5, 6, 7, 10, 13, 16, 31, 32, 33, 34, 38, 39, 40, 41, 47, 48, 49, 63, 64, 65,
                              127, 128, 129, 255, 256, 257},
                             7500, target);
      // Infinities in A's last k-steps (the odd last k, the last octet) meet a finite B: ±inf in
      // every column, never NaN from the lanes past k.
      for (int64_t k : {5, 6, 7, 33, 34, 35, 39, 41, 47, 49}) {
        for (int64_t n : {9, 10}) {
          Problem p = make_problem(false, false, 10, n, k, 1.0f, 0.0f, 0, 7400 + static_cast<uint32_t>(k));
          for (int64_t i = 0; i < p.m; ++i) p.a[i * p.lda + k - 1] = std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < p.n; ++j) p.b[(k - 1) * p.ldb + j] = j % 2 ? 1.0f : -1.0f;
          const std::vector<float> got = run_slices(p, 1);
          for (int64_t i = 0; i < p.m; ++i)
            for (int64_t j = 0; j < p.n; ++j) {
              INFO(target << " k=" << k << " n=" << n << " C[" << i << "," << j << "] = " << got[i * p.ldc + j]);
              REQUIRE(got[i * p.ldc + j] == (j % 2 ? 1.0f : -1.0f) * std::numeric_limits<float>::infinity());
            }
        }
      }
      // NaN in the padding past A's k columns and past B's n columns: the lanes past k (an odd
      // last k, a last octet of 1..7) and past column 9 are never read as values.
      for (int64_t k : {6, 7, 32, 33, 34, 39, 41, 47, 49, 63})
        for (int64_t n : {9, 10}) {
          Problem p = make_problem(false, false, 13, n, k, 1.0f, 0.0f, 5, 7450 + static_cast<uint32_t>(k));
          for (int64_t i = 0; i < p.m; ++i)
            for (int64_t q = k; q < p.lda; ++q) p.a[i * p.lda + q] = std::numeric_limits<float>::quiet_NaN();
          for (int64_t q = 0; q < k; ++q)
            for (int64_t j = n; j < p.ldb; ++j) p.b[q * p.ldb + j] = std::numeric_limits<float>::quiet_NaN();
          INFO(target << " NaN padding, k=" << k << " n=" << n);
          check_against_reference(p, run_slices(p, 1));
        }
      // A batch: bitwise one call per product.
      for (int64_t k : {16, 32, 45}) {
        INFO(target << " k=" << k);
        require_batch_matches_calls(false, 10, 10, k, 7, 7600);
      }
    });
  }
}

// A transposed B of 9 or 10 columns with A not transposed (Q·Kᵀ and dY·Vᵀ at T = 9 or 10):
// with the quads paths chosen (set_gemm_ten_columns), columns 0..7 in 8-lane rows from 8 × 8
// transposes of B and columns 8..9 with k in quads (UseQuadsNT), a last chunk of 1..7 k-steps, a
// last quad of 1..3, tiles of up to 10 rows; with 16-lane rows, SmallTileNT's. Both ways
// on every CPU: the double reference, the same bits whatever the slices, the batching or the
// row a product starts at, a bias in the same stores, infinities where the lanes past k could
// have made inf · 0 = NaN, and NaN in the padding past k never read as a value.
TEST_CASE("products with a transposed B of 9 or 10 columns (quads, or 16-lane rows) match a double reference",
          "[gemm]") {
  for (attnkit::TenColumns layout : {attnkit::TenColumns::kWide, attnkit::TenColumns::kQuads}) {
    const ScopedTenColumns scoped(layout);
    attnkit::test::for_each_simd_target([&](const std::string& target_name) {
      const std::string target = target_name + " " + attnkit::gemm_ten_columns_name();
      check_ten_column_sweep(true,
                             {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 20, 31, 32, 33, 36, 64, 255, 256, 257},
                             7700, target);
      for (int64_t n : {9, 10}) {
        // Infinities in A's last k-step (a last chunk, a last quad) meet a finite B: ±inf in every
        // column, never NaN from the lanes past k.
        for (int64_t k : {1, 3, 5, 7, 9, 13, 15, 17, 33}) {
          Problem p = make_problem(false, true, 10, n, k, 1.0f, 0.0f, 0, 7650 + static_cast<uint32_t>(k));
          for (int64_t i = 0; i < p.m; ++i) p.a[i * p.lda + k - 1] = std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < p.n; ++j) p.b[j * p.ldb + k - 1] = j % 2 ? 1.0f : -1.0f;
          const std::vector<float> got = run_slices(p, 1);
          for (int64_t i = 0; i < p.m; ++i)
            for (int64_t j = 0; j < p.n; ++j) {
              INFO(target << " k=" << k << " n=" << n << " C[" << i << "," << j << "] = " << got[i * p.ldc + j]);
              REQUIRE(got[i * p.ldc + j] == (j % 2 ? 1.0f : -1.0f) * std::numeric_limits<float>::infinity());
            }
        }
        // NaN in the padding past k of A's and B's rows: never read as values.
        for (int64_t k : {2, 6, 7, 10, 14, 16, 31, 33}) {
          Problem p = make_problem(false, true, 13, n, k, 1.0f, 0.0f, 5, 7680 + static_cast<uint32_t>(k));
          for (int64_t i = 0; i < p.m; ++i)
            for (int64_t q = k; q < p.lda; ++q) p.a[i * p.lda + q] = std::numeric_limits<float>::quiet_NaN();
          for (int64_t j = 0; j < p.n; ++j)
            for (int64_t q = k; q < p.ldb; ++q) p.b[j * p.ldb + q] = std::numeric_limits<float>::quiet_NaN();
          INFO(target << " NaN padding, k=" << k << " n=" << n);
          check_against_reference(p, run_slices(p, 1));
        }
        // A batch: bitwise one call per product.
        for (int64_t k : {16, 32, 45}) {
          INFO(target << " batch, k=" << k << " n=" << n);
          require_batch_matches_calls(true, 10, n, k, 7, 7800);
        }
      }
    });
  }
}

// The attention products of the lesson models (one sgemm_slice per (batch, head) over
// interleaved heads, T = 8 / 10, head size 16 / 32): the small path's strided operands, C
// columns of the other heads untouched.
TEST_CASE("lesson-sized attention products over interleaved heads", "[gemm]") {
  struct Model {
    int64_t T, H, dh;
  };
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    for (const Model& md : {Model{10, 2, 16}, Model{10, 1, 32}, Model{8, 1, 32}, Model{9, 3, 24}}) {
      const int64_t T = md.T, D = md.H * md.dh, dh = md.dh;
      struct Case {
        bool ta, tb;
        int64_t m, n, k, lda, ldb;
      };
      for (const Case& cs : {Case{false, true, T, T, dh, D, D}, Case{false, false, T, dh, T, T, D},
                             Case{true, false, T, dh, T, T, D}})
        for (float beta : {0.0f, 1.0f})
          for (int64_t h = 0; h < md.H; ++h) {
            const int64_t ldc = cs.n == T ? T : D;
            const int64_t c_off = ldc == D ? h * dh : 0;
            Problem p = make_problem(cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.0f, beta, 0, 77 + h);
            // Re-lay the operands into head h of interleaved rows.
            const int64_t a_rows = cs.ta ? cs.k : cs.m, b_rows = cs.tb ? cs.n : cs.k;
            const int64_t a_off = cs.lda == D ? h * dh : 0, b_off = h * dh;
            std::vector<float> a(a_rows * cs.lda, 7.0f), b(b_rows * cs.ldb, 7.0f),
                c(cs.m * ldc, kSentinel);
            for (int64_t r = 0; r < a_rows; ++r)
              for (int64_t q = 0; q < p.lda; ++q) a[r * cs.lda + a_off + q] = p.a[r * p.lda + q];
            for (int64_t r = 0; r < b_rows; ++r)
              for (int64_t q = 0; q < p.ldb; ++q) b[r * cs.ldb + b_off + q] = p.b[r * p.ldb + q];
            for (int64_t i = 0; i < cs.m; ++i)
              for (int64_t j = 0; j < cs.n; ++j) c[i * ldc + c_off + j] = p.c[i * p.ldc + j];
            std::vector<float> got = c;
            attnkit::sgemm_slice(cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.0f, a.data() + a_off, cs.lda,
                                 b.data() + b_off, cs.ldb, beta, got.data() + c_off, ldc, Slice{});
            std::vector<float> packed = p.c;
            for (int64_t i = 0; i < cs.m; ++i)
              for (int64_t j = 0; j < cs.n; ++j) packed[i * p.ldc + j] = got[i * ldc + c_off + j];
            INFO(target << " T=" << T << " dh=" << dh << " ta=" << cs.ta << " tb=" << cs.tb
                        << " beta=" << beta << " head=" << h);
            check_against_reference(p, packed);
            for (int64_t i = 0; i < cs.m; ++i)
              for (int64_t j = 0; j < ldc; ++j)
                if (j < c_off || j >= c_off + cs.n) REQUIRE(got[i * ldc + j] == kSentinel);
          }
    }
  });
}

// The direct path's register tiles (whole 2-vector tiles, on AVX-512 optionally 256-bit ones of
// 16 columns, then the ragged columns) and their write-back, whose alpha = 1 form leaves out the
// multiply by alpha: against the double reference with and without bias at every beta form,
// bitwise across slice counts, and the first rows bitwise those of the same rows computed as a
// product of their own (a small product on AVX-512: another path, the same FMA chains).
TEST_CASE("direct-path register tiles and the alpha = 1 write-back", "[gemm]") {
  // Rows: on AVX-512, 12-row tiles and then one tile of the 7 to 11 rows left (19..23, 32,
  // 44, 130) or tiles of at most 6 (25, 30, 37, 97); k = 300: deep products, walked in k
  // chunks except one tile of columns over at most 36 rows.
  const std::vector<int64_t> ms = {19, 20, 21, 22, 23, 25, 30, 32, 37, 44, 97, 130};
  const std::vector<int64_t> ns = {5, 8, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 64, 65, 80};
  const std::vector<int64_t> ks = {1, 2, 17, 32, 33, 300};
  const std::vector<std::pair<float, float>> scalars = {
      {1, 0}, {1, 1}, {1, -0.5f}, {0.5f, 0}, {-2, 1}, {1.5f, 0.25f}};
  for (int half : {-1, 1}) {  // the default (512-bit) and the 256-bit AVX-512 tiles
  attnkit::set_gemm_direct_half_tiles(half);
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    uint32_t seed = 9000;
    for (int trans = 0; trans < 4; ++trans)
      for (int64_t m : ms)
        for (int64_t n : ns)
          for (int64_t k : ks) {
            if ((m + n * 5 + k * 3 + trans) % 3 != 0) continue;  // thin the grid
            const auto [alpha, beta] = scalars[seed % scalars.size()];
            const int64_t pad = seed % 2 == 0 ? 0 : 5;
            const Problem p = make_problem(trans & 1, trans & 2, m, n, k, alpha, beta, pad, seed);
            const std::vector<float> bias = random_bias(n, seed);
            ++seed;
            INFO(target << " half=" << half << " ta=" << (trans & 1) << " tb=" << (trans & 2)
                        << " m=" << m << " n=" << n << " k=" << k << " alpha=" << alpha
                        << " beta=" << beta);
            const std::vector<float> one = run_slices(p, 1);
            check_against_reference(p, one);
            for (int count : {2, 3}) REQUIRE(bitwise_equal(one, run_slices(p, count)));
            const std::vector<float> with_bias = run_bias_slices(p, bias.data(), 1);
            check_against_reference(p, with_bias, bias.data());
            REQUIRE(bitwise_equal(with_bias, run_bias_slices(p, bias.data(), 3)));
            if (!p.ta && m > 24) {  // the first 24 rows on their own (A's rows are contiguous)
              std::vector<float> c = p.c;
              attnkit::sgemm_slice(false, p.tb, 24, n, k, alpha, p.a.data(), p.lda, p.b.data(),
                                   p.ldb, beta, c.data(), p.ldc, Slice{});
              for (int64_t i = 0; i < 24; ++i)
                for (int64_t j = 0; j < n; ++j) {
                  const float x = c[i * p.ldc + j], y = one[i * p.ldc + j];
                  REQUIRE(std::memcmp(&x, &y, sizeof(float)) == 0);
                }
            }
          }
  });
  }
  attnkit::set_gemm_direct_half_tiles(-1);
}

TEST_CASE("product timing counts each outermost product call once, only while on", "[gemm]") {
  std::vector<float> a(64 * 48, 0.5f), b(48 * 40, 0.25f), c(64 * 40, 0.0f);
  auto product = [&] {
    attnkit::sgemm(false, false, 64, 40, 48, 1.0f, a.data(), 48, b.data(), 40, 0.0f, c.data(), 40);
  };
  attnkit::reset_gemm_timing();
  product();  // off: not counted
  REQUIRE(attnkit::gemm_timing().calls == 0);
  REQUIRE(attnkit::gemm_timing().ns == 0);
  attnkit::set_gemm_timing(true);
  product();  // sgemm → sgemm_slice → sgemm_epilogue_slice: one call
  attnkit::sgemm_slice(false, false, 64, 40, 48, 1.0f, a.data(), 48, b.data(), 40, 0.0f, c.data(), 40,
                       attnkit::Slice{});
  attnkit::sgemm_bias_slice(false, false, 64, 40, 48, 1.0f, a.data(), 48, b.data(), 40, 0.0f, c.data(), 40,
                            b.data(), attnkit::Slice{});
  attnkit::sgemm_strided_batched(false, false, 8, 8, 8, 1.0f, a.data(), 8, 64, b.data(), 8, 64, 0.0f, c.data(), 8,
                                 64, 4);
  attnkit::set_gemm_timing(false);
  const attnkit::GemmTiming t = attnkit::gemm_timing();
  product();
  CHECK(t.calls == 4);
  CHECK(t.ns > 0);
  CHECK(attnkit::gemm_timing().calls == 4);  // off again: the counters stay
  REQUIRE(c[0] == Approx(48 * 0.5 * 0.25));  // timing changes no result
  attnkit::reset_gemm_timing();
  CHECK(attnkit::gemm_timing().calls == 0);
  // Products big enough for their own parallel region count once, not once per thread.
  std::vector<float> big_a(300 * 200, 0.5f), big_b(200 * 300, 0.25f), big_c(300 * 300, 0.0f);
  omp_set_num_threads(2);
  attnkit::set_gemm_timing(true);
  attnkit::sgemm(false, true, 300, 300, 200, 1.0f, big_a.data(), 200, big_b.data(), 200, 0.0f, big_c.data(), 300);
  attnkit::sgemm_strided_batched(false, false, 30, 30, 30, 1.0f, big_a.data(), 30, 900, big_b.data(), 30, 900, 0.0f,
                                 big_c.data(), 30, 900, 60);
  attnkit::set_gemm_timing(false);
  CHECK(attnkit::gemm_timing().calls == 2);
  attnkit::reset_gemm_timing();
}

namespace {
// set_gemm_direct_half_tiles for a scope, back to the default (-1) however the scope ends.
struct ScopedHalfTiles {
  explicit ScopedHalfTiles(int half) { attnkit::set_gemm_direct_half_tiles(half); }
  ~ScopedHalfTiles() { attnkit::set_gemm_direct_half_tiles(-1); }
};
}  // namespace

// A seeded random sweep where the paths meet: m, n and k mostly small and ragged (up to 16, 20
// and 16 half the time, else up to 70, 70 and 80), every transpose, alpha and beta, padded
// strides, and on AVX-512 every kernel choice (A's values split or broadcast, full or half
// widths, 16-lane rows or quads for 9 or 10 columns, 512- or 256-bit direct tiles), through sgemm_slice, sgemm_bias_slice,
// sgemm_epilogue_slice (relu, mask, addend) and sgemm_strided_batched, on every target. Each
// product against the double reference; sliced calls bitwise the whole call. The grids above
// fix the shapes each path was written for; this looks between them.
TEST_CASE("random small and ragged products on every path and kernel choice match a double reference", "[gemm]") {
  attnkit::test::for_each_simd_target([&](const std::string& target) {
    std::mt19937 rng(2026);
    auto pick = [&](int64_t small_max, int64_t max) {
      return static_cast<int64_t>(1 + (rng() % 2 ? rng() % small_max : rng() % max));
    };
    const float alphas[] = {1.0f, -0.5f, 2.0f}, betas[] = {0.0f, 1.0f, -0.5f};
    for (int trial = 0; trial < 3000; ++trial) {
      const bool ta = rng() & 1, tb = rng() & 1;
      const int64_t m = pick(16, 70), n = pick(20, 70), k = pick(16, 80);
      const float alpha = alphas[rng() % 3], beta = betas[rng() % 3];
      const int64_t pad = static_cast<int64_t>(rng() % 4);
      const uint32_t seed = rng();
      const int values = static_cast<int>(rng() % 2), width = static_cast<int>(rng() % 2);
      const int quads = static_cast<int>(rng() % 2);
      const int half = rng() % 2 ? 1 : -1, api = static_cast<int>(rng() % 4);
      ScopedSmallValues scoped_values(values ? attnkit::SmallGemmValues::kSplit : attnkit::SmallGemmValues::kBroadcast);
      ScopedAvx512Width scoped_width(width ? attnkit::Avx512Width::kFull : attnkit::Avx512Width::kHalves);
      ScopedTenColumns scoped_ten(quads ? attnkit::TenColumns::kQuads : attnkit::TenColumns::kWide);
      const ScopedHalfTiles scoped_half(half);
      INFO(target << " trial " << trial << " api=" << api << " ta=" << ta << " tb=" << tb << " m=" << m
                  << " n=" << n << " k=" << k << " alpha=" << alpha << " beta=" << beta << " pad=" << pad
                  << " split=" << values << " full=" << width << " quads=" << quads << " half tiles=" << half);
      const Problem p = make_problem(ta, tb, m, n, k, alpha, beta, pad, seed);
      if (api == 0) {  // sgemm_slice, whole and in 2 or 3 slices
        const std::vector<float> one = run_slices(p, 1);
        check_against_reference(p, one);
        REQUIRE(bitwise_equal(one, run_slices(p, 2 + static_cast<int>(seed % 2))));
      } else if (api == 1) {  // with a bias
        const std::vector<float> bias = random_bias(n, seed);
        const std::vector<float> one = run_bias_slices(p, bias.data(), 1);
        check_against_reference(p, one, bias.data());
        REQUIRE(bitwise_equal(one, run_bias_slices(p, bias.data(), 2 + static_cast<int>(seed % 2))));
      } else if (api == 2) {  // an epilogue: the product with its bias, then the elementwise ops
        const int kind = static_cast<int>(seed % 4);  // relu; mask; relu + mask + addend; relu(· + addend)
        const int64_t ldm = n + 3;
        const EpilogueOperands ops = random_mask_and_addend(m * ldm, seed);
        const std::vector<float> bias = random_bias(n, seed + 1);
        attnkit::GemmEpilogue e;
        e.bias = bias.data();
        e.relu = kind != 1;
        e.relu_last = kind == 3;
        if (kind == 1 || kind == 2) e.mask = ops.mask.data(), e.ldm = ldm;
        if (kind >= 2) e.addend = ops.addend.data(), e.ld_addend = ldm;
        std::vector<float> want = run_bias_slices(p, e.bias, 1);
        check_against_reference(p, want, e.bias);
        apply_epilogue_ops(e, want, m, n, p.ldc);
        const int count = 1 + static_cast<int>(seed % 3);
        std::vector<float> got = p.c;
        for (int sl = 0; sl < count; ++sl)
          attnkit::sgemm_epilogue_slice(ta, tb, m, n, k, alpha, p.a.data(), p.lda, p.b.data(), p.ldb, beta,
                                        got.data(), p.ldc, e, Slice{sl, count});
        INFO("epilogue kind " << kind << ", " << count << " slices");
        REQUIRE(bitwise_equal(want, got));
      } else {  // a strided batch of 2 or 3 products of this shape, stacked in one buffer each
        const int64_t count = 2 + static_cast<int64_t>(seed % 2);
        std::vector<Problem> ps;
        for (int64_t q = 0; q < count; ++q) ps.push_back(make_problem(ta, tb, m, n, k, alpha, beta, pad, seed + q));
        const int64_t sa = static_cast<int64_t>(ps[0].a.size()), sb = static_cast<int64_t>(ps[0].b.size()),
                      sc = static_cast<int64_t>(ps[0].c.size());
        std::vector<float> a, b, c;
        for (const Problem& q : ps) {
          a.insert(a.end(), q.a.begin(), q.a.end());
          b.insert(b.end(), q.b.begin(), q.b.end());
          c.insert(c.end(), q.c.begin(), q.c.end());
        }
        attnkit::sgemm_strided_batched(ta, tb, m, n, k, alpha, a.data(), p.lda, sa, b.data(), p.ldb, sb, beta,
                                       c.data(), p.ldc, sc, count);
        for (int64_t q = 0; q < count; ++q) {
          INFO("product " << q << " of the batch");
          check_against_reference(ps[q], std::vector<float>(c.begin() + q * sc, c.begin() + (q + 1) * sc));
        }
      }
    }
  });
}
