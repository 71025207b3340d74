// Layernorm, embedding, cross-entropy and the elementwise kernels against double-precision
// references (forward) and central differences of them (backward), on every SIMD target;
// every sliced kernel must give the same bits for any slice count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "hwy_targets.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"

namespace {

using attnkit::Slice;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const int kSliceCounts[] = {1, 2, 3, 8};

std::vector<float> random_vector(size_t n, std::mt19937& rng, float lo = -2, float hi = 2) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs kernel(slice) for every slice of `count` on a copy of `init`, returns the result.
std::vector<float> run_sliced(int count, std::vector<float> init,
                              const std::function<void(float*, Slice)>& kernel) {
  for (int i = 0; i < count; ++i) kernel(init.data(), Slice{i, count});
  return init;
}

// Checks kernel(out, slice) gives identical bits for every slice count, starting from init.
void require_slice_invariant(const std::vector<float>& init,
                             const std::function<void(float*, Slice)>& kernel) {
  const auto one = run_sliced(1, init, kernel);
  for (int count : kSliceCounts) {
    INFO("slices=" << count);
    REQUIRE(same_bits(run_sliced(count, init, kernel), one));
  }
}

// d f / d x[k] by central differences in double.
double numeric_derivative(const std::function<double()>& f, double& xk) {
  const double h = 1e-5 * std::max(1.0, std::abs(xk)), keep = xk;
  xk = keep + h;
  const double fp = f();
  xk = keep - h;
  const double fm = f();
  xk = keep;
  return (fp - fm) / (2 * h);
}

void require_close(double got, double want, double abs_tol, double rel_tol) {
  REQUIRE(std::abs(got - want) <= abs_tol + rel_tol * std::abs(want));
}

const int64_t kWidths[] = {1, 3, 8, 10, 16, 17, 64, 1000};

// ------------------------------------------------------------------ layernorm

void reference_layernorm(const std::vector<double>& x, const std::vector<double>& gamma,
                         const std::vector<double>& beta, int64_t rows, int64_t d, double eps,
                         std::vector<double>& y, std::vector<double>& mean,
                         std::vector<double>& rstd) {
  y.resize(rows * d);
  mean.resize(rows);
  rstd.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mu += x[r * d + j];
    mu /= d;
    for (int64_t j = 0; j < d; ++j) var += (x[r * d + j] - mu) * (x[r * d + j] - mu);
    var /= d;
    mean[r] = mu;
    rstd[r] = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = (x[r * d + j] - mu) * rstd[r] * gamma[j] + beta[j];
  }
}

}  // namespace

TEST_CASE("layernorm forward and backward", "[layernorm]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(3);
    const float eps = 1e-5f;
    for (int64_t d : kWidths) {
      const int64_t rows = d >= 64 ? 3 : 5;
      INFO("d=" << d);
      auto x = random_vector(rows * d, rng);
      for (int64_t j = 0; j < d; ++j) x[j] += 50.0f;  // a large mean must not hurt
      const auto gamma = random_vector(d, rng, 0.5f, 1.5f), beta = random_vector(d, rng);
      const auto w = random_vector(rows * d, rng);
      std::vector<float> y(rows * d, kNaN), mean(rows, kNaN), rstd(rows, kNaN);
      attnkit::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                                 rstd.data(), rows, d, eps);
      auto xd = to_double(x), gd = to_double(gamma), bd = to_double(beta);
      std::vector<double> yr, mr, sr;
      reference_layernorm(xd, gd, bd, rows, d, eps, yr, mr, sr);
      for (int64_t k = 0; k < rows * d; ++k) require_close(y[k], yr[k], 2e-5, 2e-5);
      for (int64_t r = 0; r < rows; ++r) {
        require_close(mean[r], mr[r], 1e-5, 1e-6);
        require_close(rstd[r], sr[r], 0, 1e-4);
      }

      // f = Σ y·w; analytic gradients from dy = w.
      std::vector<float> dx(rows * d, kNaN), dgamma(d, 0.25f), dbeta(d, -0.5f);
      attnkit::layernorm_backward_input(x.data(), gamma.data(), mean.data(), rstd.data(), w.data(),
                                        dx.data(), rows, d, false);
      attnkit::layernorm_backward_params(x.data(), mean.data(), rstd.data(), w.data(),
                                         dgamma.data(), dbeta.data(), rows, d);
      auto f = [&]() {
        reference_layernorm(xd, gd, bd, rows, d, eps, yr, mr, sr);
        double s = 0;
        for (int64_t k = 0; k < rows * d; ++k) s += yr[k] * w[k];
        return s;
      };
      const int64_t step = d >= 64 ? 13 : 1;
      for (int64_t k = 0; k < rows * d; k += step) {
        INFO("dx k=" << k);
        require_close(dx[k], numeric_derivative(f, xd[k]), 1e-3, 1e-3);
      }
      for (int64_t j = 0; j < d; j += step) {
        INFO("dgamma/dbeta j=" << j);
        require_close(dgamma[j] - 0.25f, numeric_derivative(f, gd[j]), 1e-4, 1e-4);
        require_close(dbeta[j] + 0.5f, numeric_derivative(f, bd[j]), 1e-4, 1e-4);
      }

      require_slice_invariant(std::vector<float>(rows * d, kNaN), [&](float* out, Slice s) {
        attnkit::layernorm_forward(x.data(), gamma.data(), beta.data(), out, mean.data(),
                                   rstd.data(), rows, d, eps, s);
      });
      require_slice_invariant(std::vector<float>(rows * d, kNaN), [&](float* out, Slice s) {
        attnkit::layernorm_backward_input(x.data(), gamma.data(), mean.data(), rstd.data(),
                                          w.data(), out, rows, d, false, s);
      });
      std::vector<float> acc(rows * d, 1.0f);
      attnkit::layernorm_backward_input(x.data(), gamma.data(), mean.data(), rstd.data(), w.data(),
                                        acc.data(), rows, d, true);
      for (int64_t k = 0; k < rows * d; ++k) require_close(acc[k], 1.0f + dx[k], 1e-6, 1e-6);
      std::vector<float> params_init(2 * d, 0.125f);
      require_slice_invariant(params_init, [&](float* out, Slice s) {
        attnkit::layernorm_backward_params(x.data(), mean.data(), rstd.data(), w.data(), out,
                                           out + d, rows, d, s);
      });

      // The one-pass backward: the two kernels' bits, accumulating or not, and with dx = dy.
      for (bool accumulate : {false, true}) {
        INFO("one pass, accumulate " << accumulate);
        std::vector<float> dx1(rows * d, 1.0f), g1(d, 0.25f), b1(d, -0.5f);
        std::vector<float> dx2 = dx1, g2 = g1, b2 = b1;
        attnkit::layernorm_backward_input(x.data(), gamma.data(), mean.data(), rstd.data(), w.data(), dx1.data(),
                                          rows, d, accumulate);
        attnkit::layernorm_backward_params(x.data(), mean.data(), rstd.data(), w.data(), g1.data(), b1.data(),
                                           rows, d);
        attnkit::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), w.data(), dx2.data(),
                                    g2.data(), b2.data(), rows, d, accumulate);
        REQUIRE(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float)) == 0);
        REQUIRE(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
        REQUIRE(std::memcmp(b1.data(), b2.data(), b1.size() * sizeof(float)) == 0);
        if (!accumulate) {
          std::vector<float> inplace = w, g3(d, 0.25f), b3(d, -0.5f);
          attnkit::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), inplace.data(),
                                      inplace.data(), g3.data(), b3.data(), rows, d, false);
          REQUIRE(std::memcmp(inplace.data(), dx1.data(), dx1.size() * sizeof(float)) == 0);
          REQUIRE(std::memcmp(g3.data(), g1.data(), g1.size() * sizeof(float)) == 0);
          REQUIRE(std::memcmp(b3.data(), b1.data(), b1.size() * sizeof(float)) == 0);
        }
      }
    }
  });
}

TEST_CASE("embedding gather and scatter-add", "[embedding]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(4);
    for (int64_t d : kWidths) {
      const int64_t vocab = 11, n = 23;
      INFO("d=" << d);
      const auto table = random_vector(vocab * d, rng);
      std::vector<int32_t> ids(n);
      for (auto& id : ids) id = int32_t(rng() % vocab);
      ids[0] = ids[5] = ids[9] = 3;  // repeated ids accumulate
      std::vector<float> y(n * d, kNaN);
      attnkit::embedding_forward(table.data(), ids.data(), y.data(), n, vocab, d);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) REQUIRE(y[i * d + j] == table[ids[i] * d + j]);
      require_slice_invariant(std::vector<float>(n * d, kNaN), [&](float* out, Slice s) {
        attnkit::embedding_forward(table.data(), ids.data(), out, n, vocab, d, s);
      });
      // With an addend of 5 rows under the 23 (a position table under token lookups).
      const auto addend = random_vector(5 * d, rng);
      attnkit::embedding_forward(table.data(), ids.data(), y.data(), n, vocab, d, {}, addend.data(), 5);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) REQUIRE(y[i * d + j] == table[ids[i] * d + j] + addend[(i % 5) * d + j]);
      require_slice_invariant(std::vector<float>(n * d, kNaN), [&](float* out, Slice s) {
        attnkit::embedding_forward(table.data(), ids.data(), out, n, vocab, d, s, addend.data(), 5);
      });

      const auto w = random_vector(n * d, rng);  // f = Σ y·w
      std::vector<float> dtable(vocab * d, 0.5f);
      attnkit::embedding_backward(ids.data(), w.data(), dtable.data(), n, vocab, d);
      auto td = to_double(table);
      auto f = [&]() {
        double s = 0;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < d; ++j) s += td[ids[i] * d + j] * w[i * d + j];
        return s;
      };
      const int64_t step = d >= 64 ? 7 : 1;
      for (int64_t k = 0; k < vocab * d; k += step) {
        INFO("k=" << k);
        require_close(dtable[k] - 0.5f, numeric_derivative(f, td[k]), 1e-5, 1e-5);
      }
      require_slice_invariant(std::vector<float>(vocab * d, 0.5f), [&](float* out, Slice s) {
        attnkit::embedding_backward(ids.data(), w.data(), out, n, vocab, d, s);
      });
      // Overwriting (a computed table's gradient): the same sums without the old 0.5, and 0
      // for rows no id selects (row 10 is made absent).
      for (auto& id : ids) id = id == 10 ? 0 : id;
      std::vector<float> acc(vocab * d, 0.0f), over(vocab * d, kNaN);
      attnkit::embedding_backward(ids.data(), w.data(), acc.data(), n, vocab, d);
      attnkit::embedding_backward(ids.data(), w.data(), over.data(), n, vocab, d, {}, false);
      REQUIRE(std::memcmp(acc.data(), over.data(), acc.size() * sizeof(float)) == 0);
      for (int64_t j = 0; j < d; ++j) REQUIRE(over[10 * d + j] == 0.0f);
      require_slice_invariant(std::vector<float>(vocab * d, kNaN), [&](float* out, Slice s) {
        attnkit::embedding_backward(ids.data(), w.data(), out, n, vocab, d, s, false);
      });
    }
  });
}

// Any slicing of embedding_addend_backward gives the same bits, accumulating and overwriting:
// table and addend gradients in one buffer.
void require_addend_backward_slice_invariant(const std::vector<int32_t>& ids, const std::vector<float>& w,
                                             int64_t n, int64_t vocab, int64_t d, int64_t rows_a) {
  for (bool acc : {true, false})
    require_slice_invariant(std::vector<float>((vocab + rows_a) * d, acc ? 0.5f : kNaN), [&](float* out, Slice s) {
      attnkit::embedding_addend_backward(ids.data(), w.data(), out, out + vocab * d, n, vocab, d, rows_a, s, acc,
                                         acc);
    });
}

TEST_CASE("embedding gradients of the table and a broadcast addend in one pass", "[embedding]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(5);
    for (int64_t d : kWidths) {
      for (int64_t rows_a : {int64_t{1}, int64_t{5}}) {
        const int64_t vocab = 11, n = 30;
        INFO("d=" << d << " addend rows=" << rows_a);
        std::vector<int32_t> ids(n);
        for (auto& id : ids) id = int32_t(rng() % vocab);
        ids[0] = ids[5] = ids[10] = ids[11] = 3;  // repeats, under the same and other addend rows
        for (auto& id : ids) id = id == 10 ? 0 : id;  // table row 10 gets no dy row
        const auto w = random_vector(n * d, rng);
        // Double references: dtable[v] = Σ_{ids[i] = v} w[i], daddend[a] = Σ_{i ≡ a} w[i].
        std::vector<double> rt(vocab * d, 0.0), ra(rows_a * d, 0.0);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < d; ++j) {
            rt[ids[i] * d + j] += w[i * d + j];
            ra[(i % rows_a) * d + j] += w[i * d + j];
          }
        std::vector<float> dt(vocab * d, 0.5f), da(rows_a * d, 0.25f);
        attnkit::embedding_addend_backward(ids.data(), w.data(), dt.data(), da.data(), n, vocab, d, rows_a, {},
                                           true, true);
        for (int64_t k = 0; k < vocab * d; ++k) require_close(dt[k], 0.5 + rt[k], 1e-5, 1e-5);
        for (int64_t k = 0; k < rows_a * d; ++k) require_close(da[k], 0.25 + ra[k], 1e-5, 1e-5);
        // The addend's sums are bias_backward's, bit for bit (accumulating and overwriting).
        std::vector<float> bias(rows_a * d, 0.25f);
        attnkit::bias_backward(w.data(), bias.data(), n / rows_a, rows_a * d, {}, true);
        REQUIRE(std::memcmp(bias.data(), da.data(), bias.size() * sizeof(float)) == 0);
        std::vector<float> dt0(vocab * d, kNaN), da0(rows_a * d, kNaN);
        attnkit::embedding_addend_backward(ids.data(), w.data(), dt0.data(), da0.data(), n, vocab, d, rows_a, {},
                                           false, false);
        attnkit::bias_backward(w.data(), bias.data(), n / rows_a, rows_a * d, {}, false);
        REQUIRE(std::memcmp(bias.data(), da0.data(), bias.size() * sizeof(float)) == 0);
        for (int64_t k = 0; k < vocab * d; ++k) require_close(dt0[k], rt[k], 1e-5, 1e-5);
        for (int64_t j = 0; j < d; ++j) REQUIRE(dt0[10 * d + j] == 0.0f);
        require_addend_backward_slice_invariant(ids, w, n, vocab, d, rows_a);
      }
    }
  });
}

// embedding_addend_backward's documented order (ops/embedding.h): addend row a outer, its dy rows
// i = a, a + R, … inner; each table row sums its dy rows in that order, bit for bit: the lessons'
// 640 rows of 10 tokens, and a longer run.
TEST_CASE("embedding table gradients sum their rows in the documented order", "[embedding]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(9);
    for (int64_t n : {int64_t{640}, int64_t{4100}}) {
      for (int64_t d : {int64_t{32}, int64_t{33}}) {
        const int64_t vocab = 10, rows_a = 10 * (n == 640) + 5 * (n != 640);
        INFO("n=" << n << " d=" << d);
        std::vector<int32_t> ids(n);
        for (auto& id : ids) id = int32_t(rng() % vocab);
        const auto w = random_vector(n * d, rng);
        std::vector<float> ref(vocab * d, 0.5f);
        for (int64_t a = 0; a < rows_a; ++a)
          for (int64_t i = a; i < n; i += rows_a)
            for (int64_t j = 0; j < d; ++j) ref[ids[i] * d + j] += w[i * d + j];
        std::vector<float> dt(vocab * d, 0.5f), da(rows_a * d, 0.0f);
        attnkit::embedding_addend_backward(ids.data(), w.data(), dt.data(), da.data(), n, vocab, d, rows_a, {},
                                           true, false);
        REQUIRE(std::memcmp(ref.data(), dt.data(), ref.size() * sizeof(float)) == 0);
        require_addend_backward_slice_invariant(ids, w, n, vocab, d, rows_a);
      }
    }
  });
}

TEST_CASE("cross-entropy with ignored targets", "[cross_entropy]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(5);
    for (int64_t classes : kWidths) {
      const int64_t rows = 9;
      INFO("classes=" << classes);
      auto logits = random_vector(rows * classes, rng, -5, 5);
      logits[0] = 80.0f;  // large logits must not overflow
      std::vector<int32_t> targets(rows);
      for (auto& t : targets) t = int32_t(rng() % classes);
      targets[2] = attnkit::kIgnoreTarget;
      targets[7] = -5;
      std::vector<float> loss(rows, kNaN);
      attnkit::cross_entropy_forward(logits.data(), targets.data(), loss.data(), rows, classes);
      auto ld = to_double(logits);
      auto row_loss = [&](int64_t r) {
        if (targets[r] < 0) return 0.0;
        double mx = -HUGE_VAL, s = 0;
        for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, ld[r * classes + j]);
        for (int64_t j = 0; j < classes; ++j) s += std::exp(ld[r * classes + j] - mx);
        return mx + std::log(s) - ld[r * classes + targets[r]];
      };
      for (int64_t r = 0; r < rows; ++r) require_close(loss[r], row_loss(r), 2e-6, 2e-6);
      REQUIRE(loss[2] == 0.0f);
      require_slice_invariant(std::vector<float>(rows, kNaN), [&](float* out, Slice s) {
        attnkit::cross_entropy_forward(logits.data(), targets.data(), out, rows, classes, s);
      });

      const float scale = 1.0f / 7;  // dloss / counted rows
      std::vector<float> dl(rows * classes, kNaN);
      attnkit::cross_entropy_backward(logits.data(), targets.data(), dl.data(), rows, classes,
                                      scale, false);
      auto f = [&]() {
        double s = 0;
        for (int64_t r = 0; r < rows; ++r) s += row_loss(r);
        return s * scale;
      };
      const int64_t step = classes >= 64 ? 11 : 1;
      for (int64_t k = 0; k < rows * classes; k += step) {
        INFO("k=" << k);
        require_close(dl[k], numeric_derivative(f, ld[k]), 1e-5, 1e-4);
      }
      for (int64_t j = 0; j < classes; ++j) REQUIRE(dl[2 * classes + j] == 0.0f);
      std::vector<float> acc(rows * classes, 2.0f);
      attnkit::cross_entropy_backward(logits.data(), targets.data(), acc.data(), rows, classes,
                                      scale, true);
      for (int64_t k = 0; k < rows * classes; ++k) require_close(acc[k], 2.0f + dl[k], 1e-6, 1e-6);
      require_slice_invariant(std::vector<float>(rows * classes, kNaN), [&](float* out, Slice s) {
        attnkit::cross_entropy_backward(logits.data(), targets.data(), out, rows, classes, scale,
                                        false, s);
      });
      // From the forward's probabilities (wide rows take the row-at-a-time path).
      std::vector<float> probs(rows * classes, kNaN), loss2(rows, kNaN), dp(rows * classes, kNaN);
      attnkit::cross_entropy_forward(logits.data(), targets.data(), loss2.data(), rows, classes, {}, probs.data());
      for (int64_t r = 0; r < rows; ++r) require_close(loss2[r], row_loss(r), 2e-6, 2e-6);
      attnkit::cross_entropy_backward_from_probs(probs.data(), targets.data(), dp.data(), rows, classes, scale, false);
      for (int64_t k = 0; k < rows * classes; ++k) require_close(dp[k], dl[k], 1e-6, 1e-6);
      for (int64_t j = 0; j < classes; ++j) REQUIRE(dp[2 * classes + j] == 0.0f);
    }
  });
}

TEST_CASE("cross-entropy over many short rows", "[cross_entropy]") {
  // The short-row path handles blocks of rows at once: several blocks, a partial last one,
  // ignored rows anywhere in a block, slice boundaries inside blocks.
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(11);
    for (int64_t classes : {1, 2, 5, 10, 24, 32, 33}) {
      for (int64_t rows : {1, 7, 37, 64}) {
        INFO("classes=" << classes << " rows=" << rows);
        auto logits = random_vector(rows * classes, rng, -6, 6);
        logits[rows * classes / 2] = 90.0f;
        std::vector<int32_t> targets(rows);
        for (auto& t : targets) t = int32_t(rng() % classes);
        for (int64_t r = 3; r < rows; r += 5) targets[r] = attnkit::kIgnoreTarget;
        std::vector<double> want_loss(rows), want_grad(rows * classes);
        const double scale = 0.37;
        for (int64_t r = 0; r < rows; ++r) {
          const float* z = logits.data() + r * classes;
          double mx = -HUGE_VAL, sum = 0;
          for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, double(z[j]));
          for (int64_t j = 0; j < classes; ++j) sum += std::exp(z[j] - mx);
          const int32_t t = targets[r];
          want_loss[r] = t < 0 ? 0.0 : mx + std::log(sum) - z[t];
          for (int64_t j = 0; j < classes; ++j)
            want_grad[r * classes + j] = t < 0 ? 0.0 : scale * (std::exp(z[j] - mx) / sum - (j == t));
        }
        std::vector<float> loss(rows, kNaN);
        attnkit::cross_entropy_forward(logits.data(), targets.data(), loss.data(), rows, classes);
        for (int64_t r = 0; r < rows; ++r) require_close(loss[r], want_loss[r], 2e-6, 2e-6);
        require_slice_invariant(std::vector<float>(rows, kNaN), [&](float* out, Slice s) {
          attnkit::cross_entropy_forward(logits.data(), targets.data(), out, rows, classes, s);
        });
        // A backward kernel (out, accumulate, slice) against the reference: overwrite,
        // ignored rows 0, accumulate leaves ignored rows alone, slices bitwise the same.
        auto check_backward = [&](const std::function<void(float*, bool, Slice)>& backward) {
          std::vector<float> dl(rows * classes, kNaN);
          backward(dl.data(), false, Slice{});
          for (int64_t k = 0; k < rows * classes; ++k) require_close(dl[k], want_grad[k], 1e-6, 1e-5);
          for (int64_t r = 3; r < rows; r += 5)
            for (int64_t j = 0; j < classes; ++j) REQUIRE(dl[r * classes + j] == 0.0f);
          auto acc = random_vector(rows * classes, rng);
          const auto acc0 = acc;
          backward(acc.data(), true, Slice{});
          for (int64_t k = 0; k < rows * classes; ++k) require_close(acc[k], acc0[k] + dl[k], 1e-6, 1e-6);
          for (int64_t r = 3; r < rows; r += 5)
            for (int64_t j = 0; j < classes; ++j) REQUIRE(acc[r * classes + j] == acc0[r * classes + j]);
          require_slice_invariant(acc0, [&](float* out, Slice s) { backward(out, true, s); });
        };
        check_backward([&](float* out, bool accumulate, Slice s) {
          attnkit::cross_entropy_backward(logits.data(), targets.data(), out, rows, classes, float(scale),
                                          accumulate, s);
        });
        // The engine's pair: the forward also writes the probabilities (every row, ignored
        // ones too), the backward takes them instead of the logits.
        std::vector<float> probs(rows * classes, kNaN), loss2(rows, kNaN);
        attnkit::cross_entropy_forward(logits.data(), targets.data(), loss2.data(), rows, classes, {}, probs.data());
        REQUIRE(std::memcmp(loss2.data(), loss.data(), loss.size() * sizeof(float)) == 0);
        for (int64_t r = 0; r < rows; ++r) {
          const float* z = logits.data() + r * classes;
          double mx = -HUGE_VAL, sum = 0;
          for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, double(z[j]));
          for (int64_t j = 0; j < classes; ++j) sum += std::exp(z[j] - mx);
          for (int64_t j = 0; j < classes; ++j) require_close(probs[r * classes + j], std::exp(z[j] - mx) / sum, 1e-6, 1e-5);
        }
        require_slice_invariant(std::vector<float>(rows * classes, kNaN), [&](float* out, Slice s) {
          attnkit::cross_entropy_forward(logits.data(), targets.data(), loss2.data(), rows, classes, s, out);
        });
        check_backward([&](float* out, bool accumulate, Slice s) {
          attnkit::cross_entropy_backward_from_probs(probs.data(), targets.data(), out, rows, classes,
                                                     float(scale), accumulate, s);
        });
      }
    }
  });
}

TEST_CASE("bias backward of a tall, wide gradient sums each column in row order", "[elementwise]") {
  // Beyond L2 the rows are streamed once instead of once per column block; either way each
  // column is the float sum over rows 0, 1, 2, … from 0 (or dbias): exactly a scalar loop.
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(8);
    for (int64_t cols : {256, 1030, 2100}) {
      const int64_t rows = 1100;
      INFO("cols=" << cols);
      const auto dy = random_vector(rows * cols, rng);
      for (bool accumulate : {false, true}) {
        std::vector<float> want(static_cast<size_t>(cols), accumulate ? 0.75f : 0.0f);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) want[c] += dy[r * cols + c];
        std::vector<float> got(static_cast<size_t>(cols), accumulate ? 0.75f : kNaN);
        attnkit::bias_backward(dy.data(), got.data(), rows, cols, {}, accumulate);
        REQUIRE(same_bits(got, want));
        require_slice_invariant(std::vector<float>(cols, 0.75f), [&](float* out, Slice s) {
          attnkit::bias_backward(dy.data(), out, rows, cols, s, accumulate);
        });
      }
    }
  });
}

TEST_CASE("elementwise kernels", "[elementwise]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(6);
    for (int64_t cols : kWidths) {
      const int64_t rows = 7, n = rows * cols;
      INFO("cols=" << cols);
      auto x = random_vector(n, rng);
      for (auto& v : x)
        if (std::abs(v) < 0.05f) v = 0.5f;  // finite differences stay away from the kink
      const auto b = random_vector(n, rng), w = random_vector(n, rng), bias = random_vector(cols, rng);

      // ReLU
      std::vector<float> y(n, kNaN);
      attnkit::relu_forward(x.data(), y.data(), n);
      for (int64_t k = 0; k < n; ++k) REQUIRE(y[k] == std::max(x[k], 0.0f));
      std::vector<float> dx(n, kNaN);
      attnkit::relu_backward(y.data(), w.data(), dx.data(), n, false);
      auto xd = to_double(x);
      auto relu_f = [&]() {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += std::max(xd[k], 0.0) * w[k];
        return s;
      };
      for (int64_t k = 0; k < n; k += (cols >= 64 ? 9 : 1)) {
        require_close(dx[k], numeric_derivative(relu_f, xd[k]), 1e-6, 1e-6);
      }
      std::vector<float> acc(n, 1.5f);
      attnkit::relu_backward(y.data(), w.data(), acc.data(), n, true);
      for (int64_t k = 0; k < n; ++k) REQUIRE(acc[k] == 1.5f + dx[k]);
      std::vector<float> inplace = x;
      attnkit::relu_forward(inplace.data(), inplace.data(), n);
      REQUIRE(same_bits(inplace, y));
      require_slice_invariant(std::vector<float>(n, kNaN), [&](float* out, Slice s) {
        attnkit::relu_forward(x.data(), out, n, s);
      });
      require_slice_invariant(std::vector<float>(n, kNaN), [&](float* out, Slice s) {
        attnkit::relu_backward(y.data(), w.data(), out, n, false, s);
      });

      // Bias add and its backward.
      std::vector<float> yb(n, kNaN);
      attnkit::bias_add_forward(x.data(), bias.data(), yb.data(), rows, cols);
      for (int64_t k = 0; k < n; ++k) REQUIRE(yb[k] == x[k] + bias[k % cols]);
      require_slice_invariant(std::vector<float>(n, kNaN), [&](float* out, Slice s) {
        attnkit::bias_add_forward(x.data(), bias.data(), out, rows, cols, s);
      });
      std::vector<float> dbias(cols, 0.75f);
      attnkit::bias_backward(w.data(), dbias.data(), rows, cols);
      auto bd = to_double(bias);
      auto bias_f = [&]() {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += (x[k] + bd[k % cols]) * w[k];
        return s;
      };
      for (int64_t c = 0; c < cols; ++c) {
        require_close(dbias[c] - 0.75f, numeric_derivative(bias_f, bd[c]), 1e-5, 1e-5);
      }
      require_slice_invariant(std::vector<float>(cols, 0.75f), [&](float* out, Slice s) {
        attnkit::bias_backward(w.data(), out, rows, cols, s);
      });

      // add, axpy, fill
      std::vector<float> sum(n, kNaN);
      attnkit::add_forward(x.data(), b.data(), sum.data(), n);
      for (int64_t k = 0; k < n; ++k) REQUIRE(sum[k] == x[k] + b[k]);
      require_slice_invariant(std::vector<float>(n, kNaN), [&](float* out, Slice s) {
        attnkit::add_forward(x.data(), b.data(), out, n, s);
      });
      std::vector<float> ax(n, kNaN);
      attnkit::axpy(-0.5f, x.data(), ax.data(), n, false);
      for (int64_t k = 0; k < n; ++k) REQUIRE(ax[k] == -0.5f * x[k]);
      std::vector<float> ay = b;
      attnkit::axpy(0.3f, x.data(), ay.data(), n, true);
      for (int64_t k = 0; k < n; ++k) require_close(ay[k], double(b[k]) + 0.3 * x[k], 1e-6, 1e-6);
      require_slice_invariant(b, [&](float* out, Slice s) {
        attnkit::axpy(0.3f, x.data(), out, n, true, s);
      });
      std::vector<float> filled(n + 1, kNaN);
      attnkit::fill(filled.data(), n, 2.5f);
      for (int64_t k = 0; k < n; ++k) REQUIRE(filled[k] == 2.5f);
      REQUIRE(std::isnan(filled[n]));  // nothing past the end
      require_slice_invariant(std::vector<float>(n, kNaN), [&](float* out, Slice s) {
        attnkit::fill(out, n, 2.5f, s);
      });
    }
  });
}

TEST_CASE("argmax_rows picks each row's first largest value, as std::max_element does", "[elementwise]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto reference = [](const std::vector<float>& x, int64_t rows, int64_t cols) {
    std::vector<int32_t> want(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const auto first = x.begin() + r * cols;
      want[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(first, first + cols) - first);
    }
    return want;
  };
  // Rows of 4: a clear maximum, ties (the first wins), all negative, NaN first / in the middle,
  // -inf and +inf, all equal.
  const std::vector<float> x = {0.1f, 0.9f, 0.3f, 0.2f,   0.5f, 0.7f, 0.7f, 0.1f,  -3.0f, -1.0f, -2.0f, -1.0f,
                                nan,  1.0f, 2.0f, 0.0f,   1.0f, nan,  0.5f, 2.0f,  -inf,  inf,   inf,   0.0f,
                                4.0f, 4.0f, 4.0f, 4.0f};
  CHECK(reference(x, 7, 4) == std::vector<int32_t>{1, 1, 1, 0, 3, 1, 0});
  attnkit::test::for_each_simd_target([&](const std::string&) {
    std::vector<int32_t> got(7, -7);
    attnkit::argmax_rows(x.data(), 7, 4, got.data());
    CHECK(got == reference(x, 7, 4));
    // Every width from 1 to 40 (one and two vectors a row, and wider), values drawn from a few
    // so that ties are common, with NaNs, infinities and ±0 sprinkled in; rows enough that the
    // last ones (read whole, they would pass the end) take the scalar way; three slices.
    std::mt19937 rng(12);
    const float pool[] = {-2.0f, -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, 1.0f, 3.0f, -inf, inf, nan};
    for (int64_t cols = 1; cols <= 40; ++cols) {
      INFO("cols=" << cols);
      const int64_t rows = 57;
      std::vector<float> y(static_cast<size_t>(rows * cols));
      for (float& v : y) {
        const uint32_t pick = rng() % 100;
        v = pick < 80 ? static_cast<float>(static_cast<int>(rng() % 7) - 3) : pool[pick % 11];
      }
      y[static_cast<size_t>(5 * cols)] = nan;  // a row starting with a NaN
      const std::vector<int32_t> want = reference(y, rows, cols);
      std::vector<int32_t> all(static_cast<size_t>(rows), -7), sliced(static_cast<size_t>(rows), -7);
      attnkit::argmax_rows(y.data(), rows, cols, all.data());
      CHECK(all == want);
      for (int i = 0; i < 3; ++i) attnkit::argmax_rows(y.data(), rows, cols, sliced.data(), Slice{i, 3});
      CHECK(sliced == want);
      // A buffer holding exactly the rows: nothing past its end is read (ASan would say).
      std::vector<float> exact(y.begin(), y.begin() + 3 * cols);
      std::vector<int32_t> three(3, -7);
      attnkit::argmax_rows(exact.data(), 3, cols, three.data());
      CHECK(three == reference(exact, 3, cols));
    }
  });
}
