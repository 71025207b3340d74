// The fused short-sequence attention backward and the forward's products (ops/attention.h)
// against a double-precision reference: dq/dk/dv (overwrite and accumulate, absent ones), masks (padding flags, causal, a
// fully masked row), several head sizes, every SIMD target, and the limits where it hands the
// work back to the general path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/rng.h"
#include "hwy_targets.h"
#include "ops/attention.h"
#include "ops/softmax.h"

namespace attnkit {
namespace {

struct Case {
  int64_t b, h, tq, tk, dh, dvh;
  int mask;  // 0 none, 1 padding flags (+ one fully masked row), 2 causal, 3 both
};

struct Data {
  AttentionDims m;
  std::vector<float> q, k, v, dy;
  std::vector<uint8_t> mask;
};

Data make(const Case& c, Rng& rng) {
  Data x;
  x.m = {c.h, c.tq, c.tk, c.h * c.dh, c.h * c.dvh, c.dh, c.dvh};
  auto fill = [&](std::vector<float>& a, int64_t n) {
    a.resize(static_cast<size_t>(n));
    for (auto& e : a) e = static_cast<float>(rng.normal());
  };
  fill(x.q, c.b * c.tq * x.m.d);
  fill(x.k, c.b * c.tk * x.m.d);
  fill(x.v, c.b * c.tk * x.m.dv);
  fill(x.dy, c.b * c.tq * x.m.dv);
  if (c.mask & 1) {
    x.mask.resize(static_cast<size_t>(c.b * c.tq * c.tk));
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t i = 0; i < c.tq; ++i)
        for (int64_t j = 0; j < c.tk; ++j)  // entry b pads its last b keys; entry 1 row 0 fully
          x.mask[static_cast<size_t>((b * c.tq + i) * c.tk + j)] =
              (j >= c.tk - b) || (b == 1 && i == 0) || rng.below(7) == 0;
  }
  return x;
}

struct Reference {
  std::vector<double> probs, dq, dk, dv;
};

// summed: every head reads the one output gradient dy [B, tq, dvh] (a head-summed attention,
// AttentionDims::sum_heads).
Reference reference(const Data& x, int64_t B, float scale, bool causal, bool summed = false) {
  const AttentionDims& m = x.m;
  Reference r;
  r.probs.assign(static_cast<size_t>(B * m.heads * m.tq * m.tk), 0);
  r.dq.assign(static_cast<size_t>(B * m.tq * m.d), 0);
  r.dk.assign(static_cast<size_t>(B * m.tk * m.d), 0);
  r.dv.assign(static_cast<size_t>(B * m.tk * m.dv), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < m.heads; ++h) {
      auto Q = [&](int64_t i, int64_t c) { return double(x.q[size_t((b * m.tq + i) * m.d + h * m.dh + c)]); };
      auto K = [&](int64_t j, int64_t c) { return double(x.k[size_t((b * m.tk + j) * m.d + h * m.dh + c)]); };
      auto V = [&](int64_t j, int64_t c) { return double(x.v[size_t((b * m.tk + j) * m.dv + h * m.dvh + c)]); };
      auto DY = [&](int64_t i, int64_t c) {
        return summed ? double(x.dy[size_t((b * m.tq + i) * m.dvh + c)])
                      : double(x.dy[size_t((b * m.tq + i) * m.dv + h * m.dvh + c)]);
      };
      auto forbidden = [&](int64_t i, int64_t j) {
        return (causal && j > i) || (!x.mask.empty() && x.mask[size_t((b * m.tq + i) * m.tk + j)] != 0);
      };
      for (int64_t i = 0; i < m.tq; ++i) {
        std::vector<double> z(size_t(m.tk)), p(size_t(m.tk)), dp(size_t(m.tk));
        double mx = -1e300, sum = 0, dot = 0;
        for (int64_t j = 0; j < m.tk; ++j) {
          double s = 0;
          for (int64_t c = 0; c < m.dh; ++c) s += Q(i, c) * K(j, c);
          z[size_t(j)] = forbidden(i, j) ? double(kMaskedScore) : scale * s;
          mx = std::max(mx, z[size_t(j)]);
        }
        for (int64_t j = 0; j < m.tk; ++j) sum += p[size_t(j)] = std::exp(z[size_t(j)] - mx);
        for (int64_t j = 0; j < m.tk; ++j) {
          p[size_t(j)] /= sum;
          r.probs[size_t(((b * m.heads + h) * m.tq + i) * m.tk + j)] = p[size_t(j)];
          for (int64_t c = 0; c < m.dvh; ++c) {
            r.dv[size_t((b * m.tk + j) * m.dv + h * m.dvh + c)] += p[size_t(j)] * DY(i, c);
            dp[size_t(j)] += DY(i, c) * V(j, c);
          }
          dot += dp[size_t(j)] * p[size_t(j)];
        }
        for (int64_t j = 0; j < m.tk; ++j) {
          const double ds = forbidden(i, j) ? 0.0 : scale * p[size_t(j)] * (dp[size_t(j)] - dot);
          for (int64_t c = 0; c < m.dh; ++c) {
            r.dq[size_t((b * m.tq + i) * m.d + h * m.dh + c)] += ds * K(j, c);
            r.dk[size_t((b * m.tk + j) * m.d + h * m.dh + c)] += ds * Q(i, c);
          }
        }
      }
    }
  return r;
}

// Gradient buffers to write into: with accumulate, random contents they are added to (also
// kept as base_*), else NaNs that every written value replaces.
struct Grads {
  std::vector<float> base_q, base_k, base_v, dq, dk, dv;
};
Grads start_grads(const Reference& want, bool acc, Rng& rng) {
  Grads g;
  if (acc)
    for (auto* v : {&g.base_q, &g.base_k, &g.base_v}) {
      v->resize(v == &g.base_v ? want.dv.size() : v == &g.base_k ? want.dk.size() : want.dq.size());
      for (auto& e : *v) e = static_cast<float>(rng.normal());
    }
  g.dq = acc ? g.base_q : std::vector<float>(want.dq.size(), NAN);
  g.dk = acc ? g.base_k : std::vector<float>(want.dk.size(), NAN);
  g.dv = acc ? g.base_v : std::vector<float>(want.dv.size(), NAN);
  return g;
}

void require_close(const float* got, const std::vector<double>& want, const std::vector<float>& base,
                   const char* what) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = want[i] + (base.empty() ? 0.0 : base[i]);
    INFO(what << "[" << i << "]");
    REQUIRE(std::abs(got[i] - w) <= 2e-5 + 2e-5 * std::abs(w));
  }
}

// Float lanes of a Highway target's vectors.
int64_t lanes_of(const std::string& target) {
  if (target.find("AVX3") != std::string::npos) return 16;
  if (target.find("SCALAR") != std::string::npos) return 1;
  return target.find("AVX2") != std::string::npos ? 8 : 4;
}

// Whether the short path takes a case with sequence lanes wt and head-dim lanes wh.
bool fits_with(const Case& c, int64_t wt, int64_t wh) {
  return c.dh % wh == 0 && c.dvh % wh == 0 && c.dh <= 128 && c.dvh <= 128 && (c.tq + wt - 1) / wt <= 8 &&
         (c.tk + wt - 1) / wt <= 8;
}

// On n lanes, each dimension uses n lanes or 8 (when n > 8), whichever pads less; head dims
// take 8 only when n lanes do not divide them (see ops/attention.cc).
bool backward_fits(const Case& c, int64_t n) {
  const int64_t w8 = std::min<int64_t>(n, 8);
  const int64_t wh = c.dh % n == 0 && c.dvh % n == 0 ? n : w8;
  const int64_t wt = (c.tq + n - 1) / n * n <= (c.tq + w8 - 1) / w8 * w8 ? n : w8;
  return fits_with(c, wt, wh);
}

bool forward_fits(const Case& c, int64_t n) {
  const int64_t w8 = std::min<int64_t>(n, 8);
  return fits_with(c, n, n) || fits_with(c, w8, w8);
}

TEST_CASE("short attention backward matches a double reference") {
  test::for_each_simd_target([](const std::string& target) {
    Rng rng(11);
    const Case cases[] = {
        {4, 2, 10, 10, 16, 16, 0},  // neighbor-sum's shape
        {4, 1, 10, 10, 32, 32, 1},  // duplicates
        {3, 1, 8, 8, 32, 32, 2},    // reversal, causal
        {3, 2, 7, 13, 16, 32, 3},   // cross-attention, both masks, dv != d
        {2, 1, 1, 1, 16, 16, 0},    // one token
        {2, 4, 64, 16, 16, 16, 3},  // the largest sequences the short path takes
        {3, 2, 9, 16, 32, 16, 1},
        {2, 1, 5, 3, 64, 64, 2},    // 8 vectors of 8 floats per row on AVX2
        {3, 2, 8, 8, 8, 8, 2},      // head size 8 and T = 8: 8 lanes on AVX-512
        {2, 1, 10, 10, 24, 24, 1},  // head size 24
        {2, 1, 8, 8, 40, 40, 3},    // head size 40
        {2, 2, 12, 12, 24, 8, 0},
        {2, 1, 17, 9, 16, 16, 2},   // 17 queries: ragged for 16 lanes
        {2, 1, 10, 10, 16, 128, 1}, // 128 value columns: 16 vectors on AVX2
    };
    for (const Case& c : cases) {
      for (bool acc : {false, true}) {
        INFO("b " << c.b << " h " << c.h << " tq " << c.tq << " tk " << c.tk << " dh " << c.dh
                  << " dvh " << c.dvh << " mask " << c.mask << (acc ? " accumulate" : ""));
        Data x = make(c, rng);
        const bool causal = (c.mask & 2) != 0;
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
        const AttentionMasking mk{scale, x.mask.empty() ? nullptr : x.mask.data(), causal};
        const Reference want = reference(x, c.b, scale, causal);
        // The forward's probabilities (the reference's, rounded to float).
        std::vector<float> probs(want.probs.begin(), want.probs.end());
        const int64_t products = c.b * c.h;
        const int64_t n = lanes_of(target);
        if (!backward_fits(c, n)) {  // not for this CPU
          std::vector<float> out(want.dq.size() + want.dk.size() + want.dv.size(), 5.0f);
          REQUIRE_FALSE(attention_short_backward(x.q.data(), x.k.data(), x.v.data(), probs.data(),
                                                 x.dy.data(), out.data(), nullptr, nullptr, false,
                                                 false, false, x.m, mk, 0, products));
          REQUIRE(out[0] == 5.0f);
          continue;
        }
        // Accumulate: the gradients are added to what is there.
        const Grads g = start_grads(want, acc, rng);
        std::vector<float> dq = g.dq, dk = g.dk, dv = g.dv;
        // Two ranges of products: results must not depend on the split.
        REQUIRE(attention_short_backward(x.q.data(), x.k.data(), x.v.data(), probs.data(), x.dy.data(),
                                         dq.data(), dk.data(), dv.data(), acc, acc, acc, x.m, mk, 0,
                                         products / 2));
        REQUIRE(attention_short_backward(x.q.data(), x.k.data(), x.v.data(), probs.data(), x.dy.data(),
                                         dq.data(), dk.data(), dv.data(), acc, acc, acc, x.m, mk,
                                         products / 2, products));
        require_close(dq.data(), want.dq, g.base_q, "dq");
        require_close(dk.data(), want.dk, g.base_k, "dk");
        require_close(dv.data(), want.dv, g.base_v, "dv");
        // Absent gradients are skipped; the others come out bitwise the same.
        std::vector<float> dk2(want.dk.size(), NAN);
        if (acc) dk2 = g.base_k;
        REQUIRE(attention_short_backward(x.q.data(), x.k.data(), x.v.data(), probs.data(), x.dy.data(),
                                         nullptr, dk2.data(), nullptr, acc, acc, acc, x.m, mk, 0,
                                         products));
        REQUIRE(std::memcmp(dk2.data(), dk.data(), dk.size() * 4) == 0);
      }
    }
  });
}

// The training form of Graph::fold_attention_values with several heads: y = Σ_h P_h·V_h, so
// every head's output gradient is the one dy [B, tq, dvh]. The short path computes an entry's
// dPᵀ of all heads as dot products along the value columns; ranges that start or end inside
// a batch entry, ragged query and key counts for the dot tiles, masks, accumulate, and the
// general path (attention_backward outside the short path's dims) on every target.
TEST_CASE("head-summed attention backward matches a double reference") {
  test::for_each_simd_target([](const std::string&) {
    Rng rng(15);
    const Case cases[] = {
        {4, 2, 10, 10, 16, 128, 0},  // neighbor-sum folded: 2 heads of 16, values 128 wide
        {3, 4, 10, 10, 16, 40, 0}, {3, 4, 10, 10, 16, 32, 2}, {3, 4, 10, 10, 16, 40, 2},   // 4 heads, 8-lane value rows on AVX-512, causal
        {3, 2, 7, 13, 16, 32, 3},    // cross-attention, both masks
        {2, 3, 9, 5, 8, 64, 1},      // 15 key rows, 9 queries
        {2, 2, 17, 9, 16, 16, 0},    // 17 queries
        {2, 2, 1, 1, 16, 16, 0},     // one token
        {2, 3, 10, 10, 8, 200, 0},   // too wide for the short path
        {2, 2, 20, 20, 16, 48, 2},   // 40 key rows
        {2, 4, 20, 20, 16, 32, 0},   // 80 key rows: more than the dot scores take
    };
    for (const Case& c : cases)
      for (bool acc : {false, true}) {
        INFO("b " << c.b << " h " << c.h << " tq " << c.tq << " tk " << c.tk << " dh " << c.dh << " dvh " << c.dvh
                  << " mask " << c.mask << (acc ? " accumulate" : ""));
        Data x = make(c, rng);
        x.m.sum_heads = true;
        x.dy.resize(static_cast<size_t>(c.b * c.tq * c.dvh));
        const bool causal = (c.mask & 2) != 0;
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
        const AttentionMasking mk{scale, x.mask.empty() ? nullptr : x.mask.data(), causal};
        const Reference want = reference(x, c.b, scale, causal, /*summed=*/true);
        std::vector<float> probs(want.probs.begin(), want.probs.end());
        const Grads g = start_grads(want, acc, rng);
        std::vector<float> dq = g.dq, dk = g.dk, dv = g.dv;
        std::vector<float> dprobs(probs.size());
        // Three ranges, the first ending inside batch entry 0 (after its first head).
        const int64_t products = c.b * c.h, cuts[] = {0, 1, products / 2 + 1, products};
        for (int r = 0; r < 3; ++r)
          attention_backward(x.q.data(), x.k.data(), x.v.data(), probs.data(), x.dy.data(), nullptr, dprobs.data(),
                             dq.data(), dk.data(), dv.data(), acc, acc, acc, x.m, mk, cuts[r], cuts[r + 1]);
        require_close(dq.data(), want.dq, g.base_q, "dq");
        require_close(dk.data(), want.dk, g.base_k, "dk");
        require_close(dv.data(), want.dv, g.base_v, "dv");
        // One range gives the same bits (each entry's dot products depend only on the dims).
        std::vector<float> dq1 = g.dq, dk1 = g.dk, dv1 = g.dv;
        attention_backward(x.q.data(), x.k.data(), x.v.data(), probs.data(), x.dy.data(), nullptr, dprobs.data(),
                           dq1.data(), dk1.data(), dv1.data(), acc, acc, acc, x.m, mk, 0, products);
        REQUIRE(std::memcmp(dq1.data(), dq.data(), dq.size() * 4) == 0);
        REQUIRE(std::memcmp(dk1.data(), dk.data(), dk.size() * 4) == 0);
        REQUIRE(std::memcmp(dv1.data(), dv.data(), dv.size() * 4) == 0);
      }
  });
}

TEST_CASE("short attention forward products match a double reference") {
  test::for_each_simd_target([](const std::string& target) {
    Rng rng(12);
    const Case cases[] = {
        {4, 2, 10, 10, 16, 16, 0}, {4, 1, 10, 10, 32, 32, 0}, {3, 1, 8, 8, 32, 32, 0},
        {3, 2, 7, 13, 16, 32, 0},  {2, 1, 1, 1, 16, 16, 0},   {2, 4, 64, 16, 16, 16, 0},
        {2, 1, 5, 3, 64, 64, 0},   {3, 2, 8, 8, 8, 8, 0},     {2, 1, 10, 10, 24, 24, 0},
        {2, 1, 8, 8, 40, 40, 0},   {2, 2, 12, 12, 24, 8, 0},  {2, 1, 17, 9, 16, 16, 0},
        {2, 2, 10, 10, 16, 128, 0},  // 128 value columns (a folded MLP head): 16 vectors on AVX2
    };
    for (const Case& c : cases) {
      INFO("b " << c.b << " h " << c.h << " tq " << c.tq << " tk " << c.tk << " dh " << c.dh << " dvh " << c.dvh);
      Data x = make(c, rng);
      const AttentionDims& m = x.m;
      const int64_t products = c.b * c.h, tt = c.tq * c.tk, n = lanes_of(target);
      std::vector<float> probs(static_cast<size_t>(products * tt));
      for (auto& e : probs) e = static_cast<float>(rng.uniform());
      std::vector<float> scores(probs.size(), NAN), y(static_cast<size_t>(c.b * c.tq * m.dv), NAN);
      if (!forward_fits(c, n)) {
        REQUIRE_FALSE(attention_short_scores(x.q.data(), x.k.data(), scores.data(), m, 0, products));
        REQUIRE_FALSE(attention_short_values(probs.data(), x.v.data(), y.data(), m, 0, products));
        REQUIRE(std::isnan(scores[0]));
        REQUIRE(std::isnan(y[0]));
        continue;
      }
      // Two ranges of products: results must not depend on the split.
      for (auto [p0, p1] : {std::pair<int64_t, int64_t>{0, products / 2}, {products / 2, products}}) {
        REQUIRE(attention_short_scores(x.q.data(), x.k.data(), scores.data(), m, p0, p1));
        REQUIRE(attention_short_values(probs.data(), x.v.data(), y.data(), m, p0, p1));
      }
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t h = 0; h < c.h; ++h)
          for (int64_t i = 0; i < c.tq; ++i) {
            const int64_t p = b * c.h + h;
            for (int64_t j = 0; j < c.tk; ++j) {
              double s = 0;
              for (int64_t e = 0; e < c.dh; ++e)
                s += double(x.q[size_t((b * c.tq + i) * m.d + h * c.dh + e)]) * x.k[size_t((b * c.tk + j) * m.d + h * c.dh + e)];
              INFO("score " << p << " " << i << " " << j);
              REQUIRE(std::abs(scores[size_t(p * tt + i * c.tk + j)] - s) <= 1e-5 + 1e-5 * std::abs(s));
            }
            for (int64_t e = 0; e < c.dvh; ++e) {
              double want = 0;
              for (int64_t j = 0; j < c.tk; ++j)
                want += double(probs[size_t(p * tt + i * c.tk + j)]) * x.v[size_t((b * c.tk + j) * m.dv + h * c.dvh + e)];
              INFO("y " << b << " " << i << " " << h * c.dvh + e);
              REQUIRE(std::abs(y[size_t((b * c.tq + i) * m.dv + h * c.dvh + e)] - want) <= 1e-5 + 1e-5 * std::abs(want));
            }
          }
    }
  });
}

// The inference form of Graph::fold_attention_values: value heads wider or narrower than the
// query heads, the heads' outputs summed into one [B, tq, dvh] output, added to its contents
// and ReLU'd, through attention_forward (the short path where it fits, else GEMM calls).
TEST_CASE("attention forward sums heads of values wider than the query heads with accumulate and relu") {
  test::for_each_simd_target([](const std::string&) {
    Rng rng(13);
    const Case cases[] = {
        {3, 2, 10, 10, 16, 128, 0},  // neighbor-sum folded: 2 heads of 16, values 128 wide
        {3, 4, 10, 10, 16, 40, 2},   // 4 heads, 8-lane value rows on AVX-512, causal
        {2, 4, 10, 10, 8, 32, 1},    // a mask with a fully masked row
        {2, 2, 9, 13, 16, 24, 3},
        {2, 3, 10, 10, 8, 200, 0},   // too wide for the short path
        {2, 2, 10, 10, 16, 10, 0},   // ragged value rows
        {2, 1, 10, 10, 32, 64, 0},   // one head
        {2, 2, 20, 20, 16, 48, 2},   // more keys than the short path takes
    };
    for (const Case& c : cases)
      for (int mode = 0; mode < 4; ++mode) {  // bit 0 accumulate, bit 1 relu
        const bool acc = (mode & 1) != 0, relu = (mode & 2) != 0;
        INFO("b " << c.b << " h " << c.h << " tq " << c.tq << " tk " << c.tk << " dh " << c.dh << " dvh " << c.dvh
                  << " mask " << c.mask << " accumulate " << acc << " relu " << relu);
        Data x = make(c, rng);
        x.m.sum_heads = true, x.m.accumulate = acc, x.m.relu = relu;
        const bool causal = (c.mask & 2) != 0;
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
        const AttentionMasking mk{scale, x.mask.empty() ? nullptr : x.mask.data(), causal};
        const Reference want = reference(x, c.b, scale, causal);
        std::vector<float> base(static_cast<size_t>(c.b * c.tq * c.dvh));
        for (auto& e : base) e = static_cast<float>(rng.normal());
        std::vector<float> y = acc ? base : std::vector<float>(base.size(), NAN);
        std::vector<float> probs(want.probs.size(), NAN);
        // Two ranges of whole batch entries.
        const int64_t split = c.b / 2 * c.h;
        attention_forward(x.q.data(), x.k.data(), x.v.data(), probs.data(), y.data(), x.m, mk, 0, split);
        attention_forward(x.q.data(), x.k.data(), x.v.data(), probs.data(), y.data(), x.m, mk, split, c.b * c.h);
        for (size_t i = 0; i < probs.size(); ++i) {
          INFO("probs " << i);
          REQUIRE(std::abs(probs[i] - want.probs[i]) <= 1e-5);
        }
        for (int64_t b = 0; b < c.b; ++b)
          for (int64_t i = 0; i < c.tq; ++i)
            for (int64_t e = 0; e < c.dvh; ++e) {
              double w = acc ? base[size_t((b * c.tq + i) * c.dvh + e)] : 0.0;
              for (int64_t h = 0; h < c.h; ++h)
                for (int64_t j = 0; j < c.tk; ++j)
                  w += want.probs[size_t(((b * c.h + h) * c.tq + i) * c.tk + j)] *
                       x.v[size_t((b * c.tk + j) * x.m.dv + h * c.dvh + e)];
              if (relu) w = std::max(w, 0.0);
              INFO("y " << b << " " << i << " " << e);
              REQUIRE(std::abs(y[size_t((b * c.tq + i) * c.dvh + e)] - w) <= 2e-5 + 2e-5 * std::abs(w));
            }
      }
  });
}

// Values read from a per-(token, position) table (AttentionDims::v_ids, the training graph's
// Graph::index_attention_values): the forward's outputs and the backward's gradients have the
// bits of the same rows materialized, on the short path and outside it, summed heads or not,
// on every target.
TEST_CASE("attention values from a per-(token, position) table give the materialized rows' bits") {
  test::for_each_simd_target([](const std::string& target) {
    Rng rng(17);
    const Case cases[] = {
        {4, 2, 10, 10, 16, 128, 0},  // neighbor-sum folded
        {3, 1, 10, 10, 32, 32, 1},   // one head, padding mask
        {3, 4, 10, 10, 16, 40, 2},   // causal
        {2, 3, 10, 10, 8, 200, 0},   // too wide for the short path
        {2, 2, 20, 20, 16, 48, 3},   // more keys than the short path takes
    };
    const int64_t vocab = 3;
    for (const Case& c : cases)
      for (bool summed : {true, false}) {
        INFO("b " << c.b << " h " << c.h << " tk " << c.tk << " dh " << c.dh << " dvh " << c.dvh << " mask " << c.mask
                  << (summed ? " summed" : ""));
        Data x = make(c, rng);
        x.m.sum_heads = summed;
        const int64_t dv = x.m.dv, tk = c.tk;
        // The table [vocab, tk, dv], the ids, and the rows they give.
        std::vector<float> table(static_cast<size_t>(vocab * tk * dv));
        for (auto& e : table) e = static_cast<float>(rng.normal());
        std::vector<int32_t> ids(static_cast<size_t>(c.b * tk));
        for (auto& e : ids) e = static_cast<int32_t>(rng.below(vocab));
        for (int64_t b = 0; b < c.b; ++b)
          for (int64_t l = 0; l < tk; ++l)
            std::copy_n(table.data() + (ids[size_t(b * tk + l)] * tk + l) * dv, dv, x.v.data() + (b * tk + l) * dv);
        if (summed) x.dy.resize(static_cast<size_t>(c.b * c.tq * c.dvh));
        const bool causal = (c.mask & 2) != 0;
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
        const AttentionMasking mk{scale, x.mask.empty() ? nullptr : x.mask.data(), causal};
        const int64_t products = c.b * c.h, width = summed ? c.dvh : dv;
        AttentionDims mt = x.m;
        mt.v_ids = ids.data();
        // Forward, rows and table.
        std::vector<float> y0(static_cast<size_t>(c.b * c.tq * width)), y1 = y0;
        std::vector<float> p0(static_cast<size_t>(products * c.tq * tk)), p1 = p0;
        attention_forward(x.q.data(), x.k.data(), x.v.data(), p0.data(), y0.data(), x.m, mk, 0, products);
        attention_forward(x.q.data(), x.k.data(), table.data(), p1.data(), y1.data(), mt, mk, 0, products);
        REQUIRE(std::memcmp(p0.data(), p1.data(), p0.size() * 4) == 0);
        REQUIRE(std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0);
        // Backward: dv is the rows' gradient either way.
        std::vector<float> dq0(x.q.size()), dk0(x.k.size()), dv0(x.v.size()), dq1 = dq0, dk1 = dk0, dv1 = dv0;
        std::vector<float> dprobs(p0.size());
        attention_backward(x.q.data(), x.k.data(), x.v.data(), p0.data(), x.dy.data(), nullptr, dprobs.data(),
                           dq0.data(), dk0.data(), dv0.data(), false, false, false, x.m, mk, 0, products);
        attention_backward(x.q.data(), x.k.data(), table.data(), p0.data(), x.dy.data(), nullptr, dprobs.data(),
                           dq1.data(), dk1.data(), dv1.data(), false, false, false, mt, mk, 0, products);
        REQUIRE(std::memcmp(dq0.data(), dq1.data(), dq0.size() * 4) == 0);
        REQUIRE(std::memcmp(dk0.data(), dk1.data(), dk0.size() * 4) == 0);
        REQUIRE(std::memcmp(dv0.data(), dv1.data(), dv0.size() * 4) == 0);
        // The table's gradient straight from P and dy (the training graph's
        // attention_values_backward): the rows' gradient dv0 scattered into the table, each row's
        // contributions added in batch order from zero — the bits of the short path's rows, and
        // within float rounding of the GEMM path's — whole, split over key positions, and added to.
        std::vector<float> want(table.size(), 0.0f);
        for (int64_t b = 0; b < c.b; ++b)
          for (int64_t l = 0; l < tk; ++l)
            for (int64_t e = 0; e < dv; ++e)
              want[size_t((ids[size_t(b * tk + l)] * tk + l) * dv + e)] += dv0[size_t((b * tk + l) * dv + e)];
        std::vector<float> whole(table.size(), 7.0f), split(table.size(), 7.0f), added(table);
        attention_value_table_backward(p0.data(), x.dy.data(), whole.data(), mt, c.b, vocab, false, 0, tk);
        attention_value_table_backward(p0.data(), x.dy.data(), split.data(), mt, c.b, vocab, false, 3, tk);
        attention_value_table_backward(p0.data(), x.dy.data(), split.data(), mt, c.b, vocab, false, 0, 3);
        attention_value_table_backward(p0.data(), x.dy.data(), added.data(), mt, c.b, vocab, true, 0, tk);
        REQUIRE(std::memcmp(whole.data(), split.data(), whole.size() * 4) == 0);
        const bool short_path = c.tk <= 16 && c.dvh <= 128 && lanes_of(target) >= 4;
        if (short_path) REQUIRE(std::memcmp(whole.data(), want.data(), want.size() * 4) == 0);
        for (size_t e = 0; e < want.size(); ++e) {
          INFO("table gradient " << e);
          REQUIRE(std::abs(whole[e] - want[e]) <= 1e-5f + 1e-5f * std::abs(want[e]));
          REQUIRE(std::abs(added[e] - (table[e] + whole[e])) <= 1e-5f + 1e-5f * (std::abs(table[e]) + std::abs(whole[e])));
        }
        if (!summed) continue;
        // A start table [vocab, tk, width] (AttentionDims::start with v_ids: the training graph's
        // folded residual): y starts from its rows of each entry's (token, position) pairs — the
        // bits of those rows copied into y and added to, ReLU'd or not, through the per-product
        // ranges and the batch-lanes units (several splits), short path or not.
        std::vector<float> start(static_cast<size_t>(vocab * tk * width));
        for (auto& e : start) e = static_cast<float>(rng.normal());
        for (bool relu : {false, true}) {
          INFO("start table" << (relu ? ", relu" : ""));
          AttentionDims ms = mt, ma = mt;
          ms.start = start.data();
          ma.accumulate = true;
          ms.relu = ma.relu = relu;
          std::vector<float> want_y(y0.size()), got(y0.size(), 5.0f), units(y0.size(), 5.0f);
          for (int64_t b = 0; b < c.b; ++b)
            for (int64_t t = 0; t < c.tq; ++t)
              std::copy_n(start.data() + (ids[size_t(b * tk + t)] * tk + t) * width, width,
                          want_y.data() + (b * c.tq + t) * width);
          attention_forward(x.q.data(), x.k.data(), table.data(), p1.data(), want_y.data(), ma, mk, 0, products);
          attention_forward(x.q.data(), x.k.data(), table.data(), p1.data(), got.data(), ms, mk, 0, c.h);
          attention_forward(x.q.data(), x.k.data(), table.data(), p1.data(), got.data(), ms, mk, c.h, products);
          REQUIRE(std::memcmp(want_y.data(), got.data(), got.size() * 4) == 0);
          const AttentionWork w = attention_work(ms, mk, c.b);
          for (int64_t split : {int64_t{0}, w.units / 2, w.units}) {
            std::fill(units.begin(), units.end(), 5.0f);
            attention_forward_units(x.q.data(), x.k.data(), table.data(), p1.data(), units.data(), ms, mk, w, 0, split);
            attention_forward_units(x.q.data(), x.k.data(), table.data(), p1.data(), units.data(), ms, mk, w, split,
                                    w.units);
            REQUIRE(std::memcmp(want_y.data(), units.data(), units.size() * 4) == 0);
          }
        }
        // Its gradient (attention_values_backward's second output): dy's rows scattered into the
        // start table's rows, each row's added in batch order from zero (or from its contents) —
        // with and without the value table's, whole and split over key positions.
        std::vector<float> want_start(start.size(), 0.0f), want_added(start);
        for (int64_t b = 0; b < c.b; ++b)
          for (int64_t l = 0; l < tk; ++l)
            for (int64_t e = 0; e < width; ++e) {
              const size_t to = size_t((ids[size_t(b * tk + l)] * tk + l) * width + e);
              want_start[to] += x.dy[size_t((b * c.tq + l) * width + e)];
              want_added[to] += x.dy[size_t((b * c.tq + l) * width + e)];
            }
        std::vector<float> ds_whole(start.size(), 7.0f), ds_split(start.size(), 7.0f), ds_added(start);
        std::vector<float> with_table(table.size(), 7.0f);
        attention_value_table_backward(p0.data(), x.dy.data(), nullptr, mt, c.b, vocab, false, 0, tk, ds_whole.data(),
                                       false);
        attention_value_table_backward(p0.data(), x.dy.data(), with_table.data(), mt, c.b, vocab, false, 0, 3,
                                       ds_split.data(), false);
        attention_value_table_backward(p0.data(), x.dy.data(), with_table.data(), mt, c.b, vocab, false, 3, tk,
                                       ds_split.data(), false);
        attention_value_table_backward(p0.data(), x.dy.data(), nullptr, mt, c.b, vocab, false, 0, tk, ds_added.data(),
                                       true);
        REQUIRE(std::memcmp(ds_whole.data(), want_start.data(), want_start.size() * 4) == 0);
        REQUIRE(std::memcmp(ds_split.data(), want_start.data(), want_start.size() * 4) == 0);
        REQUIRE(std::memcmp(ds_added.data(), want_added.data(), want_added.size() * 4) == 0);
        REQUIRE(std::memcmp(with_table.data(), whole.data(), whole.size() * 4) == 0);  // (unchanged by the start's)
      }
  });
}

// Batch entries as lanes (attention_work's units): a batch of two whole groups of lanes and a
// ragged rest, its units split across two ranges at several points, must give the bits of the
// product-by-product short path, and the double reference's values.
TEST_CASE("attention forward with batch entries as lanes matches the short path bitwise and a double reference") {
  test::for_each_simd_target([](const std::string& target) {
    Rng rng(14);
    const int64_t n = lanes_of(target);
    const bool transposes = n >= 8;  // groups need 8 x 8 register transposes (AVX2, AVX-512)
    const Case cases[] = {
        {0, 2, 10, 10, 16, 16, 0},   // neighbor-sum (b = 0: two whole groups of lanes and 3 more)
        {0, 1, 10, 10, 32, 64, 0},   // duplicates' value fold
        {0, 1, 8, 8, 32, 32, 2},     // reversal, causal
        {0, 2, 7, 13, 16, 32, 2},    // cross-attention, causal, dv != d
        {0, 1, 1, 8, 8, 8, 0},       // one query, head size 8
        {0, 3, 12, 12, 24, 8, 2},    // 12 keys (AVX2's most), head size 24, values of 8
        {0, 1, 32, 16, 32, 128, 2},  // the largest dims it takes (16 keys: AVX-512 only)
        {0, 1, 17, 9, 16, 40, 0},    // 17 queries, 40 value columns
        {0, 2, 3, 3, 16, 16, 2},     // 9 scores per head: a ragged last block of probabilities
    };
    for (Case c : cases) {
      c.b = 2 * std::max<int64_t>(n, 1) + 3;
      // mode bit 0: accumulate; bit 1: heads summed (the training value fold) and ReLU'd.
      for (int mode = 0; mode < 4; ++mode) {
        const bool acc = (mode & 1) != 0, summed = (mode & 2) != 0;
        INFO("b " << c.b << " h " << c.h << " tq " << c.tq << " tk " << c.tk << " dh " << c.dh << " dvh " << c.dvh
                  << " causal " << (c.mask != 0) << " accumulate " << acc << " summed " << summed);
        Data x = make(c, rng);
        x.m.accumulate = acc;
        x.m.sum_heads = x.m.relu = summed;
        const int64_t ldy = x.m.y_row();
        const bool causal = c.mask != 0;
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
        const AttentionMasking mk{scale, nullptr, causal};
        const Reference want = reference(x, c.b, scale, causal);
        const AttentionWork w = attention_work(x.m, mk, c.b);
        const bool fits = transposes && c.tk <= (n >= 16 ? 16 : 12);
        REQUIRE(w.lanes == (fits ? n : 0));
        REQUIRE(w.groups == (fits ? 2 : 0));
        const int64_t per_unit = summed ? c.h : 1;  // summed: the entries after the groups are whole units
        REQUIRE(w.units == (fits ? 2 + 3 * c.h / per_unit : c.b * c.h / per_unit));
        REQUIRE(w.product(w.units) == c.b * c.h);
        const int64_t products = c.b * c.h, tt = c.tq * c.tk;
        std::vector<float> base_y(static_cast<size_t>(c.b * c.tq * ldy));
        for (auto& e : base_y) e = static_cast<float>(rng.normal());
        // The short path, product by product: the bits to match.
        std::vector<float> probs0(static_cast<size_t>(products * tt), NAN), y0 = acc ? base_y : std::vector<float>(base_y.size(), NAN);
        attention_forward(x.q.data(), x.k.data(), x.v.data(), probs0.data(), y0.data(), x.m, mk, 0, products);
        for (size_t i = 0; i < probs0.size(); ++i) {
          INFO("probs " << i);
          REQUIRE(std::abs(probs0[i] - want.probs[i]) <= 1e-5);
        }
        for (int64_t b = 0; b < c.b; ++b)
          for (int64_t i = 0; i < c.tq; ++i)
            for (int64_t e = 0; e < ldy; ++e) {
              const size_t at = size_t((b * c.tq + i) * ldy + e);
              double want_y = acc ? base_y[at] : 0.0;
              for (int64_t h = summed ? 0 : e / c.dvh; h <= (summed ? c.h - 1 : e / c.dvh); ++h)
                for (int64_t j = 0; j < c.tk; ++j)
                  want_y += want.probs[size_t(((b * c.h + h) * c.tq + i) * c.tk + j)] *
                            x.v[size_t((b * c.tk + j) * x.m.dv + (summed ? h * c.dvh + e : e))];
              if (summed) want_y = std::max(want_y, 0.0);
              INFO("y " << b << " " << i << " " << e);
              REQUIRE(std::abs(y0[at] - want_y) <= 2e-5 + 2e-5 * std::abs(want_y));
            }
        for (int64_t split : {int64_t{0}, int64_t{1}, w.groups, w.units - 1}) {
          INFO("units split at " << split);
          std::vector<float> probs(probs0.size(), NAN), y = acc ? base_y : std::vector<float>(base_y.size(), NAN);
          attention_forward_units(x.q.data(), x.k.data(), x.v.data(), probs.data(), y.data(), x.m, mk, w, 0, split);
          attention_forward_units(x.q.data(), x.k.data(), x.v.data(), probs.data(), y.data(), x.m, mk, w, split,
                                  w.units);
          REQUIRE(std::memcmp(probs.data(), probs0.data(), probs.size() * 4) == 0);
          REQUIRE(std::memcmp(y.data(), y0.data(), y.size() * 4) == 0);
        }
      }
    }
    // A padding mask, more keys than registers hold, or heads wider than 32 leave every unit a product.
    std::vector<uint8_t> mask(static_cast<size_t>(40 * 10 * 10), 0);
    const AttentionDims m{2, 10, 10, 32, 32, 16, 16};
    REQUIRE(attention_work(m, {0.25f, mask.data(), false}, 40).lanes == 0);
    REQUIRE(attention_work({1, 10, 17, 16, 16, 16, 16}, {0.25f, nullptr, false}, 40).units == 40);
    REQUIRE(attention_work({1, 33, 10, 16, 16, 16, 16}, {0.25f, nullptr, false}, 40).lanes == 0);
    REQUIRE(attention_work({1, 10, 10, 64, 64, 64, 64}, {0.25f, nullptr, false}, 40).lanes == 0);
  });
}

TEST_CASE("short attention hands sequences it does not fit back to the general path") {
  std::vector<float> buf(1 << 16, 1.0f), out(1 << 16, -7.0f);
  const AttentionMasking mk{0.25f, nullptr, false};
  auto backward = [&](AttentionDims m) {
    return attention_short_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                    out.data(), out.data() + 20000, out.data() + 40000, false,
                                    false, false, m, mk, 0, 1);
  };
  REQUIRE_FALSE(backward({1, 10, 17, 16, 16, 16, 16}));  // more than 16 keys
  REQUIRE_FALSE(backward({1, 65, 10, 16, 16, 16, 16}));  // more than 64 queries
  REQUIRE_FALSE(backward({2, 10, 10, 6, 6, 3, 3}));      // heads narrower than a vector
  REQUIRE_FALSE(backward({1, 10, 10, 1024, 1024, 1024, 1024}));  // heads too wide
  REQUIRE_FALSE(attention_short_scores(buf.data(), buf.data(), out.data(), {1, 10, 17, 16, 16, 16, 16}, 0, 1));
  REQUIRE_FALSE(attention_short_values(buf.data(), buf.data(), out.data(), {1, 65, 10, 16, 16, 16, 16}, 0, 1));
  for (float x : out) REQUIRE(x == -7.0f);  // nothing written
  REQUIRE(backward({1, 10, 10, 16, 16, 16, 16}));
}

// A seeded random sweep between the fixed cases above: batch (1 to 40, so whole and partial
// groups of lanes), heads, query and key counts (1 to 20, self- and cross-attention), head and
// value sizes (4 to 64, and 128 values), masks, head-summed values, accumulate and the split into
// ranges, through attention_forward_units and attention_backward (the short, lanes and GEMM
// paths, whichever takes the dims on this target), on every target, against the double
// reference.
TEST_CASE("random attention dims forward and backward match a double reference on every target") {
  test::for_each_simd_target([](const std::string& target) {
    Rng rng(2026);
    const int64_t sizes[] = {4, 8, 12, 16, 24, 32, 40, 48, 64};
    for (int trial = 0; trial < 120; ++trial) {
      Case c;
      c.b = 1 + rng.below(rng.below(2) ? 40 : 4);
      c.h = 1 + rng.below(4);
      c.tq = 1 + rng.below(20);
      c.tk = rng.below(3) ? c.tq : 1 + rng.below(20);
      c.dh = sizes[rng.below(9)];
      c.dvh = rng.below(8) ? sizes[rng.below(9)] : 128;
      c.mask = static_cast<int>(rng.below(4));
      if (c.mask & 1 && c.b > c.tk) c.mask &= 2;  // (make() pads entry b's last b keys)
      const bool summed = rng.below(3) == 0, acc = rng.below(2) == 0;
      INFO(target << " trial " << trial << ": b " << c.b << " h " << c.h << " tq " << c.tq << " tk " << c.tk
                  << " dh " << c.dh << " dvh " << c.dvh << " mask " << c.mask << (summed ? " head-summed" : "")
                  << (acc ? " accumulate" : ""));
      Data x = make(c, rng);
      x.m.sum_heads = summed;
      if (summed) x.dy.resize(static_cast<size_t>(c.b * c.tq * c.dvh));
      const bool causal = (c.mask & 2) != 0;
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
      const AttentionMasking mk{scale, x.mask.empty() ? nullptr : x.mask.data(), causal};
      const Reference want = reference(x, c.b, scale, causal, summed);
      // Forward, in two ranges of work units: the probabilities, and y = Σ (or per head) P·V.
      const AttentionWork w = attention_work(x.m, mk, c.b);
      std::vector<float> probs(want.probs.size(), NAN), y(static_cast<size_t>(c.b * c.tq * x.m.y_row()), NAN);
      const int64_t split = w.units / 2;
      attention_forward_units(x.q.data(), x.k.data(), x.v.data(), probs.data(), y.data(), x.m, mk, w, 0, split);
      attention_forward_units(x.q.data(), x.k.data(), x.v.data(), probs.data(), y.data(), x.m, mk, w, split,
                              w.units);
      require_close(probs.data(), want.probs, {}, "probs");
      std::vector<double> want_y(y.size(), 0.0);
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t h = 0; h < c.h; ++h)
          for (int64_t i = 0; i < c.tq; ++i)
            for (int64_t j = 0; j < c.tk; ++j) {
              const double pr = want.probs[size_t(((b * c.h + h) * c.tq + i) * c.tk + j)];
              for (int64_t e = 0; e < c.dvh; ++e)
                want_y[size_t((b * c.tq + i) * x.m.y_row() + h * x.m.y_head() + e)] +=
                    pr * x.v[size_t((b * c.tk + j) * x.m.dv + h * c.dvh + e)];
            }
      require_close(y.data(), want_y, {}, "y");
      // Backward from the reference's probabilities, in two ranges of products cut anywhere.
      std::vector<float> p32(want.probs.begin(), want.probs.end()), dprobs(p32.size());
      const Grads g = start_grads(want, acc, rng);
      std::vector<float> dq = g.dq, dk = g.dk, dv = g.dv;
      const int64_t products = c.b * c.h, cut = rng.below(static_cast<uint64_t>(products) + 1);
      for (auto [p0, p1] : {std::pair<int64_t, int64_t>{0, cut}, {cut, products}})
        attention_backward(x.q.data(), x.k.data(), x.v.data(), p32.data(), x.dy.data(), nullptr, dprobs.data(),
                           dq.data(), dk.data(), dv.data(), acc, acc, acc, x.m, mk, p0, p1);
      require_close(dq.data(), want.dq, g.base_q, "dq");
      require_close(dk.data(), want.dk, g.base_k, "dk");
      require_close(dv.data(), want.dv, g.base_v, "dv");
    }
  });
}

}  // namespace
}  // namespace attnkit
