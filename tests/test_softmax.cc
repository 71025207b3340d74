// softmax_forward / softmax_backward against a double-precision reference of the course's
// numpy code (forbidden score := -1e9 before the softmax), on every SIMD target.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hwy_targets.h"
#include "ops/cross_entropy.h"
#include "ops/softmax.h"

namespace {

using attnkit::Slice;
using attnkit::SoftmaxMask;

struct Problem {
  int64_t batch, heads, tq, tk;
  float scale;
  enum Kind { kNone, kPadding, kCausal, kPaddingCausal, kRandom } kind;
  int64_t groups() const { return batch * heads; }
  int64_t size() const { return groups() * tq * tk; }
};

// The mask of a problem: padding lengths per batch (one batch fully padded, so its rows are
// fully forbidden), or random flags with some fully forbidden rows.
struct MaskData {
  std::vector<uint8_t> flags;
  SoftmaxMask mask;
};

MaskData make_mask(const Problem& p, std::mt19937& rng) {
  MaskData m;
  const bool padding = p.kind == Problem::kPadding || p.kind == Problem::kPaddingCausal;
  m.mask.causal = p.kind == Problem::kCausal || p.kind == Problem::kPaddingCausal;
  if (padding) {
    m.flags.assign(p.batch * p.tq * p.tk, 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t len = b == 0 ? 0 : (b == 1 ? p.tk : 1 + int64_t(rng() % p.tk));
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = len; j < p.tk; ++j) m.flags[(b * p.tq + i) * p.tk + j] = 1;
    }
    m.mask.data = m.flags.data();
    m.mask.group_div = p.heads;
  } else if (p.kind == Problem::kRandom) {
    m.flags.resize(p.tq * p.tk);  // one [tq, tk] mask for all groups
    for (auto& f : m.flags) f = uint8_t(rng() % 3 == 0 ? 7 : 0);
    for (int64_t j = 0; j < p.tk; ++j) m.flags[j] = 1;  // row 0 fully forbidden
    m.mask.data = m.flags.data();
    m.mask.group_div = p.groups();
  }
  return m;
}

bool forbidden(const SoftmaxMask& m, int64_t tq, int64_t tk, int64_t g, int64_t i, int64_t j) {
  if (m.causal && j > i) return true;
  return m.data && m.data[((g / m.group_div) * tq + i) * tk + j] != 0;
}

// The course's softmax of one row, in double.
std::vector<double> reference_row(const double* x, int64_t tk, double scale, const SoftmaxMask& m,
                                  int64_t tq, int64_t g, int64_t i) {
  std::vector<double> z(tk);
  double mx = -HUGE_VAL;
  for (int64_t j = 0; j < tk; ++j) {
    z[j] = forbidden(m, tq, tk, g, i, j) ? -1e9 : scale * x[j];
    mx = std::max(mx, z[j]);
  }
  double sum = 0;
  for (auto& v : z) sum += (v = std::exp(v - mx));
  for (auto& v : z) v /= sum;
  return z;
}

std::vector<float> random_vector(size_t n, std::mt19937& rng, float lo = -3, float hi = 3) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<Problem> problems() {
  std::vector<Problem> ps;
  const int64_t tks[] = {1, 3, 7, 8, 9, 10, 12, 16, 17, 64, 1000};
  const Problem::Kind kinds[] = {Problem::kNone, Problem::kPadding, Problem::kCausal,
                                 Problem::kPaddingCausal, Problem::kRandom};
  for (int64_t tk : tks)
    for (auto kind : kinds) {
      const int64_t tq = tk == 1000 ? 3 : (tk % 7) + 2;
      ps.push_back({3, 2, tq, tk, 0.37f, kind});
      if (tk <= 17) ps.push_back({5, 3, tk, tk, 1.0f, kind});  // square, as in self-attention
    }
  return ps;
}

const int kSliceCounts[] = {1, 2, 3, 8};

template <class Kernel>
void run_sliced(int count, const Kernel& kernel) {
  for (int i = 0; i < count; ++i) kernel(Slice{i, count});
}

}  // namespace

TEST_CASE("softmax_forward matches the double reference", "[softmax]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(1);
    for (const Problem& p : problems()) {
      INFO("tk=" << p.tk << " tq=" << p.tq << " kind=" << p.kind);
      const MaskData md = make_mask(p, rng);
      const auto x = random_vector(p.size(), rng, -6, 6);
      std::vector<float> y(p.size(), std::numeric_limits<float>::quiet_NaN());
      attnkit::softmax_forward(x.data(), y.data(), p.groups(), p.tq, p.tk, p.scale, md.mask);
      std::vector<double> xd(x.begin(), x.end());
      for (int64_t g = 0; g < p.groups(); ++g)
        for (int64_t i = 0; i < p.tq; ++i) {
          const int64_t off = (g * p.tq + i) * p.tk;
          const auto ref = reference_row(xd.data() + off, p.tk, p.scale, md.mask, p.tq, g, i);
          for (int64_t j = 0; j < p.tk; ++j) {
            INFO("g=" << g << " i=" << i << " j=" << j);
            REQUIRE(std::abs(y[off + j] - ref[j]) <= 1e-7 + 2e-6 * ref[j]);
          }
        }

      // Slice-count invariance (bitwise) and in-place operation.
      for (int count : kSliceCounts) {
        std::vector<float> ys(p.size(), std::numeric_limits<float>::quiet_NaN());
        run_sliced(count, [&](Slice s) {
          attnkit::softmax_forward(x.data(), ys.data(), p.groups(), p.tq, p.tk, p.scale, md.mask, s);
        });
        INFO("slices=" << count);
        REQUIRE(std::memcmp(ys.data(), y.data(), y.size() * sizeof(float)) == 0);
      }
      std::vector<float> inplace = x;
      attnkit::softmax_forward(inplace.data(), inplace.data(), p.groups(), p.tq, p.tk, p.scale, md.mask);
      REQUIRE(std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float)) == 0);
    }
  });
}

TEST_CASE("softmax: fully forbidden rows are uniform, masked keys get exactly 0", "[softmax]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    for (int64_t tk : {3, 10, 16, 17, 100}) {
      const int64_t tq = 4;
      std::vector<uint8_t> flags(tq * tk, 0);
      for (int64_t j = 0; j < tk; ++j) flags[j] = 1;      // row 0: all forbidden
      for (int64_t j = 1; j < tk; ++j) flags[tk + j] = 1;  // row 1: only key 0 allowed
      SoftmaxMask mask;
      mask.data = flags.data();
      mask.group_div = 1;
      std::vector<float> x(tq * tk, 1e4f), y(tq * tk);  // large scores must not overflow
      attnkit::softmax_forward(x.data(), y.data(), 1, tq, tk, 3.0f, mask);
      for (int64_t j = 0; j < tk; ++j) {
        REQUIRE(y[j] == Approx(1.0 / tk).epsilon(1e-6));
        REQUIRE(y[tk + j] == (j == 0 ? 1.0f : 0.0f));
      }
      for (float v : y) REQUIRE(std::isfinite(v));
    }
  });
}

TEST_CASE("softmax_backward matches central differences of the double reference", "[softmax]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::mt19937 rng(2);
    for (const Problem& p : problems()) {
      INFO("tk=" << p.tk << " tq=" << p.tq << " kind=" << p.kind);
      const MaskData md = make_mask(p, rng);
      const auto x = random_vector(p.size(), rng);
      const auto w = random_vector(p.size(), rng);  // f(x) = Σ y·w, so dy = w
      std::vector<float> y(p.size());
      attnkit::softmax_forward(x.data(), y.data(), p.groups(), p.tq, p.tk, p.scale, md.mask);
      std::vector<float> dx(p.size(), std::numeric_limits<float>::quiet_NaN());
      attnkit::softmax_backward(y.data(), w.data(), dx.data(), p.groups(), p.tq, p.tk, p.scale,
                                md.mask, false);
      for (float v : dx) REQUIRE(std::isfinite(v));

      std::vector<double> xd(x.begin(), x.end());
      const int64_t rows = p.groups() * p.tq;
      const int64_t row_step = p.tk >= 64 ? 5 : 1;  // finite differences cost tk² per row
      for (int64_t r = 0; r < rows; r += row_step) {
        const int64_t g = r / p.tq, i = r % p.tq, off = r * p.tk;
        auto f = [&]() {
          const auto yr = reference_row(xd.data() + off, p.tk, p.scale, md.mask, p.tq, g, i);
          double s = 0;
          for (int64_t j = 0; j < p.tk; ++j) s += yr[j] * w[off + j];
          return s;
        };
        const int64_t col_step = p.tk >= 64 ? 7 : 1;
        for (int64_t j = 0; j < p.tk; j += col_step) {
          const double h = 1e-5, keep = xd[off + j];
          xd[off + j] = keep + h;
          const double fp = f();
          xd[off + j] = keep - h;
          const double fm = f();
          xd[off + j] = keep;
          const double numeric = (fp - fm) / (2 * h);
          INFO("r=" << r << " j=" << j);
          REQUIRE(std::abs(dx[off + j] - numeric) <= 2e-6 + 1e-4 * std::abs(numeric));
          if (forbidden(md.mask, p.tq, p.tk, g, i, j)) REQUIRE(dx[off + j] == 0.0f);
        }
      }

      // accumulate adds to what is there; slices and aliasing dx = dy change no bit.
      std::vector<float> acc(p.size(), 0.5f);
      attnkit::softmax_backward(y.data(), w.data(), acc.data(), p.groups(), p.tq, p.tk, p.scale,
                                md.mask, true);
      for (int64_t k = 0; k < p.size(); ++k) REQUIRE(acc[k] == Approx(0.5f + dx[k]).epsilon(1e-6).margin(1e-7));
      for (int count : kSliceCounts) {
        std::vector<float> ds(p.size(), std::numeric_limits<float>::quiet_NaN());
        run_sliced(count, [&](Slice s) {
          attnkit::softmax_backward(y.data(), w.data(), ds.data(), p.groups(), p.tq, p.tk,
                                    p.scale, md.mask, false, s);
        });
        INFO("slices=" << count);
        REQUIRE(std::memcmp(ds.data(), dx.data(), dx.size() * sizeof(float)) == 0);
        std::vector<float> acc_s(p.size(), 0.5f);
        run_sliced(count, [&](Slice s) {
          attnkit::softmax_backward(y.data(), w.data(), acc_s.data(), p.groups(), p.tq, p.tk,
                                    p.scale, md.mask, true, s);
        });
        REQUIRE(std::memcmp(acc_s.data(), acc.data(), acc.size() * sizeof(float)) == 0);
      }
      std::vector<float> alias = w;
      attnkit::softmax_backward(y.data(), alias.data(), alias.data(), p.groups(), p.tq, p.tk,
                                p.scale, md.mask, false);
      REQUIRE(std::memcmp(alias.data(), dx.data(), dx.size() * sizeof(float)) == 0);
    }
  });
}

// The exponential under the softmax and the cross-entropy (ops_simd-inl.h's
// ExpNonPositiveNormal): rows [0, x] give y1 / y0 = e^x (times 1 ± 1 ulp for the shared
// reciprocal), checked within 2.5·2^-24 of the double e^x over a dense grid of x in [-80, 0],
// on the short-row (transposed) and the long-row paths, and exactly 0 below -80.
TEST_CASE("softmax and cross-entropy exponentials accurate from -80 to 0", "[softmax][cross_entropy]") {
  attnkit::test::for_each_simd_target([](const std::string&) {
    std::vector<float> xs;
    for (int i = 0; i <= 16000; ++i) xs.push_back(-80.0f * static_cast<float>(i) / 16000.0f);
    for (float x : {-1e-8f, -0.34657359f, -0.34657360f, -0.6931472f, -79.99999f, -80.00001f, -87.0f, -1e9f})
      xs.push_back(x);
    const int64_t rows = static_cast<int64_t>(xs.size());
    for (int64_t tk : {int64_t{2}, int64_t{40}}) {  // short rows, long rows (the rest -1e30)
      INFO("row length " << tk);
      std::vector<float> in(rows * tk, -1e30f), soft(rows * tk), probs(rows * tk), loss(rows);
      for (int64_t r = 0; r < rows; ++r) in[r * tk] = 0.0f, in[r * tk + 1] = xs[r];
      attnkit::softmax_forward(in.data(), soft.data(), 1, rows, tk, 1.0f, SoftmaxMask{});
      std::vector<int32_t> targets(rows, 0);
      attnkit::cross_entropy_forward(in.data(), targets.data(), loss.data(), rows, tk, {}, probs.data());
      for (const std::vector<float>* y : {&soft, &probs}) {
        for (int64_t r = 0; r < rows; ++r) {
          const double x = xs[r], got = (*y)[r * tk + 1], y0 = (*y)[r * tk];
          INFO("x = " << x << (y == &soft ? " (softmax)" : " (cross-entropy)"));
          if (x < -80.0) {
            REQUIRE(got == 0.0);
            continue;
          }
          const double want = std::exp(x);
          REQUIRE(std::fabs(got / y0 - want) <= 2.5 * 0x1p-24 * want);
        }
      }
    }
  });
}
