// adam_update against a double-precision transcription of torch.optim.Adam / AdamW
// (foreach=False) over several steps, on every SIMD target.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "hwy_targets.h"
#include "ops/adam.h"

namespace {

struct DoubleAdam {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& grad, const attnkit::AdamStep& h, int64_t t) {
    const double b1 = h.beta1, b2 = h.beta2, lr = h.lr, wd = h.weight_decay;
    const double bc1 = 1 - std::pow(b1, double(t)), bc2 = 1 - std::pow(b2, double(t));
    for (size_t k = 0; k < p.size(); ++k) {
      double g = grad[k];
      if (!h.decoupled) g += wd * p[k];
      else p[k] *= 1 - lr * wd;
      m[k] = b1 * m[k] + (1 - b1) * g;
      v[k] = b2 * v[k] + (1 - b2) * g * g;
      p[k] -= lr / bc1 * m[k] / (std::sqrt(v[k]) / std::sqrt(bc2) + double(h.eps));
    }
  }
};

}  // namespace

TEST_CASE("adam_step_for computes PyTorch's bias corrections", "[adam]") {
  attnkit::AdamStep h;
  // The betas are floats (0.999f = 0.99900001287…), so 1 − β^t is that of the float value.
  const double b1 = h.beta1, b2 = h.beta2;
  for (int64_t t : {1, 2, 10, 100, 10000}) {
    const auto s = attnkit::adam_step_for(h, t);
    REQUIRE(s.bias_correction1 == float(1 - std::pow(b1, double(t))));
    REQUIRE(s.bias_correction2 == float(1 - std::pow(b2, double(t))));
  }
  const auto s100 = attnkit::adam_step_for(h, 100);
  REQUIRE(s100.lr == h.lr);
}

TEST_CASE("adam_update follows torch.optim.Adam/AdamW over several steps", "[adam]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(8);
    std::uniform_real_distribution<float> u(-1, 1);
    struct Case { float wd; bool decoupled; };
    for (Case c : {Case{0, false}, Case{0.1f, false}, Case{0, true}, Case{0.05f, true}}) {
      for (int64_t n : {1, 3, 8, 10, 17, 64, 1000}) {
        INFO("n=" << n << " wd=" << c.wd << " decoupled=" << c.decoupled);
        attnkit::AdamStep hyper;
        hyper.lr = 1e-2f;
        hyper.weight_decay = c.wd;
        hyper.decoupled = c.decoupled;
        std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
        for (auto& x : p) x = u(rng);
        DoubleAdam ref{{p.begin(), p.end()}, std::vector<double>(n), std::vector<double>(n)};
        for (int64_t t = 1; t <= 6; ++t) {
          for (auto& x : g) x = u(rng) * (t == 3 ? 1e-3f : 1.0f);
          g[0] = 0.0f;  // an unused parameter: only eps keeps the step finite
          const auto step = attnkit::adam_step_for(hyper, t);
          // Slice-count invariance on copies, then the real step.
          std::vector<float> p1 = p, m1 = m, v1 = v;
          for (int count : {2, 3, 8}) {
            std::vector<float> ps = p, ms = m, vs = v;
            for (int i = 0; i < count; ++i)
              attnkit::adam_update(ps.data(), g.data(), ms.data(), vs.data(), n, step, {i, count});
            attnkit::adam_update(p1.data(), g.data(), m1.data(), v1.data(), n, step);
            REQUIRE(std::memcmp(ps.data(), p1.data(), n * sizeof(float)) == 0);
            REQUIRE(std::memcmp(ms.data(), m1.data(), n * sizeof(float)) == 0);
            REQUIRE(std::memcmp(vs.data(), v1.data(), n * sizeof(float)) == 0);
            p1 = p, m1 = m, v1 = v;
          }
          attnkit::adam_update(p.data(), g.data(), m.data(), v.data(), n, step);
          ref.step(g, hyper, t);
          for (int64_t k = 0; k < n; ++k) {
            INFO("t=" << t << " k=" << k);
            REQUIRE(std::abs(p[k] - ref.p[k]) <= 2e-6 + 1e-6 * std::abs(ref.p[k]));
            REQUIRE(std::abs(m[k] - ref.m[k]) <= 1e-7 + 1e-5 * std::abs(ref.m[k]));
            REQUIRE(std::abs(v[k] - ref.v[k]) <= 1e-9 + 1e-5 * std::abs(ref.v[k]));
          }
        }
      }
    }
  });
}
