// The softmax, masked_fill, dropout and mse_loss ops (engine/functional.h) against double
// references and central differences (tests/op_check.h) on every SIMD target; dropout's
// training and evaluation behaviour; mse_loss training a parameter; shape errors; the same
// bits for 1 and 2 threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/functional.h"
#include "engine/optimizer.h"
#include "op_check.h"

namespace {

using namespace attnkit;
using test::check_op;
using test::Inputs;
using test::OpCheck;
using test::OpInput;

const int64_t kKeys[] = {1, 3, 8, 10, 16, 17, 33, 64};

// Flat index into mask shape m (aligned with x's trailing dims, 1 = broadcast) of element
// `flat` of x.
int64_t broadcast_index(const Shape& x, const Shape& m, int64_t flat) {
  int64_t idx[kMaxRank] = {};
  for (int i = x.rank - 1; i >= 0; --i) {
    idx[i] = flat % x[i];
    flat /= x[i];
  }
  int64_t mf = 0;
  const int off = x.rank - m.rank;
  for (int i = 0; i < m.rank; ++i) mf = mf * m[i] + (m[i] == 1 ? 0 : idx[i + off]);
  return mf;
}

enum class MaskKind { kNone, kBool, kAdd };

// softmax(scale·x (+ mask)) over the last axis in double, forbidden keys (boolean mask,
// causal) at probability 0, rows with every key forbidden all 0.
std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& xs, double scale, bool causal,
                                MaskKind kind = MaskKind::kNone, const std::vector<double>* mask = nullptr,
                                const Shape& ms = {}) {
  const int64_t tk = xs.last(), tq = xs.rank >= 2 ? xs[-2] : 1;
  const int64_t rows = xs.numel() / tk;
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % tq;
    std::vector<double> z(static_cast<size_t>(tk));
    std::vector<bool> allowed(static_cast<size_t>(tk), true);
    double mx = -INFINITY;
    for (int64_t j = 0; j < tk; ++j) {
      const int64_t f = r * tk + j;
      double v = scale * x[static_cast<size_t>(f)];
      if (causal && j > i) allowed[static_cast<size_t>(j)] = false;
      if (kind != MaskKind::kNone) {
        const double m = (*mask)[static_cast<size_t>(broadcast_index(xs, ms, f))];
        if (kind == MaskKind::kBool && m != 0) allowed[static_cast<size_t>(j)] = false;
        if (kind == MaskKind::kAdd) v += m;
      }
      z[static_cast<size_t>(j)] = v;
      if (allowed[static_cast<size_t>(j)]) mx = std::max(mx, v);
    }
    if (mx == -INFINITY) continue;  // every key forbidden: zeros
    double sum = 0;
    for (int64_t j = 0; j < tk; ++j)
      if (allowed[static_cast<size_t>(j)]) sum += std::exp(z[static_cast<size_t>(j)] - mx);
    for (int64_t j = 0; j < tk; ++j)
      if (allowed[static_cast<size_t>(j)])
        y[static_cast<size_t>(r * tk + j)] = std::exp(z[static_cast<size_t>(j)] - mx) / sum;
  }
  return y;
}

// A softmax check of x (batched [2, ...]) with an optional mask input.
void check_softmax(Shape xs, double scale, bool causal, MaskKind kind, Shape ms = {}, bool mask_batched = false,
                   int threads = 1) {
  OpCheck c;
  c.threads = threads;
  c.inputs = {{"x", xs}};
  c.inputs[0].fill = [](Rng& r, int64_t) { return 4.0 * r.uniform() - 2.0; };
  if (kind != MaskKind::kNone) {
    OpInput m{"mask", ms, mask_batched, kind == MaskKind::kAdd,
              kind == MaskKind::kBool ? DType::kU8 : DType::kF32, nullptr};
    if (kind == MaskKind::kAdd) m.fill = [](Rng& r, int64_t) { return r.below(8) == 0 ? -30.0 : 3.0 * r.uniform() - 1.5; };
    if (kind == MaskKind::kBool) m.fill = [](Rng& r, int64_t) { return r.below(3) == 0 ? 1.0 : 0.0; };
    c.inputs.push_back(m);
  }
  c.build = [=](Graph&, const std::vector<Tensor>& in) {
    SoftmaxOptions o;
    o.scale = static_cast<float>(scale);
    o.causal = causal;
    if (in.size() > 1) o.mask = in[1];
    return softmax(in[0], o);
  };
  c.reference = [=](const Inputs& x) {
    return ref_softmax(x[0], xs, scale, causal, kind, x.size() > 1 ? &x[1] : nullptr, ms);
  };
  INFO("x " << xs.str() << " mask " << ms.str() << " scale " << scale << " causal " << causal);
  check_op(c);
}

TEST_CASE("softmax over rows of 1 to 64 keys matches the reference and its gradient", "[softmax]") {
  for (int64_t tk : kKeys) {
    check_softmax({2, 3, tk}, 1.0, false, MaskKind::kNone);
    check_softmax({2, 5, tk}, 0.35, false, MaskKind::kNone);
  }
  check_softmax({2, 7}, 1.0, false, MaskKind::kNone);
  // An unbatched vector.
  OpCheck c;
  c.inputs = {{"v", {19}, false}};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return softmax(in[0]); };
  c.reference = [](const Inputs& x) { return ref_softmax(x[0], Shape{19}, 1.0, false); };
  check_op(c);
  check_softmax({2, 2, 3, 17}, 2.0, false, MaskKind::kNone, {}, false, /*threads=*/2);
}

TEST_CASE("softmax with causal masking and a scale", "[softmax]") {
  for (int64_t tk : kKeys) check_softmax({2, 2, 4, tk}, 0.5, true, MaskKind::kNone);
  check_softmax({2, 6, 6}, 1.5, true, MaskKind::kNone);
}

TEST_CASE("softmax with a boolean mask broadcast or per head", "[softmax]") {
  for (int64_t tk : kKeys) {
    check_softmax({2, 3, 4, tk}, 0.5, false, MaskKind::kBool, {4, tk});                // one [T, T]
    check_softmax({2, 3, 4, tk}, 1.0, false, MaskKind::kBool, {2, 1, 4, tk}, true);    // over heads
    check_softmax({2, 3, 4, tk}, 1.0, true, MaskKind::kBool, {2, 3, 4, tk}, true);     // per head
    check_softmax({2, 3, 4, tk}, 0.8, false, MaskKind::kBool, {3, 4, tk});             // over batch
  }
  check_softmax({2, 4, 9}, 1.0, true, MaskKind::kBool, {2, 4, 9}, true, /*threads=*/2);
  check_softmax({2, 4, 9}, 1.0, false, MaskKind::kBool, {1, 4, 9});
  check_softmax({2, 3, 4, 10}, 0.8, false, MaskKind::kBool, {3, 4, 10}, false, /*threads=*/2);
}

TEST_CASE("softmax with an additive mask and the mask's gradient", "[softmax]") {
  for (int64_t tk : kKeys) {
    check_softmax({2, 3, 4, tk}, 0.5, false, MaskKind::kAdd, {4, tk});
    check_softmax({2, 3, 4, tk}, 1.0, true, MaskKind::kAdd, {2, 1, 4, tk}, true);
    check_softmax({2, 3, 4, tk}, 1.0, false, MaskKind::kAdd, {2, 3, 4, tk}, true);
    check_softmax({2, 3, 4, tk}, 0.8, false, MaskKind::kAdd, {3, 4, tk});
  }
  check_softmax({2, 3, 4, 10}, 0.7, true, MaskKind::kAdd, {2, 1, 4, 10}, true, /*threads=*/2);
  check_softmax({2, 3, 4, 17}, 0.7, false, MaskKind::kAdd, {3, 4, 17}, false, /*threads=*/2);
}

TEST_CASE("softmax with an additive mask of minus infinity", "[softmax]") {
  // −inf keys get probability 0; a row with −inf at every allowed key is all zeros, also when
  // the causal keys after it are finite.
  test::for_each_simd_target([](const std::string&) {
    for (int64_t tk : {5, 40}) {
      Graph g(1);
      Tensor x = g.input("x", {2, tk}, DType::kF32);
      Tensor m = g.input_unbatched("m", {2, tk}, DType::kF32);
      SoftmaxOptions o;
      o.mask = m;
      Tensor y = softmax(x, o);
      g.keep(y);
      Executor ex(g, {1, 0, false});
      for (int64_t j = 0; j < 2 * tk; ++j) {
        ex.f32(x.id())[j] = 0.01f * static_cast<float>(j);
        ex.f32(m.id())[j] = j >= tk || j % 2 == 1 ? -std::numeric_limits<float>::infinity() : 0.0f;
      }
      ex.forward();
      double sum = 0;
      for (int64_t j = 0; j < tk; ++j) {
        if (j % 2 == 1) REQUIRE(ex.f32(y.id())[j] == 0.0f);
        sum += ex.f32(y.id())[j];
      }
      CHECK(std::fabs(sum - 1.0) < 1e-6);
      for (int64_t j = tk; j < 2 * tk; ++j) REQUIRE(ex.f32(y.id())[j] == 0.0f);
    }
    // Causal: row 1 allows keys 0 and 1, both −inf; its later keys are finite.
    Graph g(1);
    Tensor x = g.input("x", {3, 4}, DType::kF32);
    Tensor m = g.input_unbatched("m", {3, 4}, DType::kF32);
    SoftmaxOptions o;
    o.mask = m;
    o.causal = true;
    Tensor y = softmax(x, o);
    g.keep(y);
    Executor ex(g, {1, 0, false});
    for (int j = 0; j < 12; ++j) {
      ex.f32(x.id())[j] = 0.1f * static_cast<float>(j);
      ex.f32(m.id())[j] = j == 4 || j == 5 ? -std::numeric_limits<float>::infinity() : 0.0f;
    }
    ex.forward();
    for (int j = 4; j < 8; ++j) REQUIRE(ex.f32(y.id())[j] == 0.0f);
    CHECK(ex.f32(y.id())[0] == 1.0f);
    CHECK(std::fabs(ex.f32(y.id())[8] + ex.f32(y.id())[9] + ex.f32(y.id())[10] - 1.0f) < 1e-6f);
  });
}

TEST_CASE("softmax gives zeros for rows whose every key is masked", "[softmax]") {
  for (int64_t tk : {3, 17}) {
    OpCheck c;
    c.inputs = {{"x", {2, 4, tk}}, {"mask", {4, tk}, false, false, DType::kU8, nullptr}};
    c.inputs[1].fill = [tk](Rng& r, int64_t f) { return f / tk == 1 || f / tk == 3 ? 1.0 : double(r.below(2)); };
    c.build = [](Graph&, const std::vector<Tensor>& in) {
      SoftmaxOptions o;
      o.mask = in[1];
      return softmax(in[0], o);
    };
    const Shape xs{2, 4, tk}, ms{4, tk};
    c.reference = [=](const Inputs& x) { return ref_softmax(x[0], xs, 1.0, false, MaskKind::kBool, &x[1], ms); };
    check_op(c);
  }
  // A causal row with its allowed keys masked too is all zeros.
  Graph g(1);
  Tensor x = g.input("x", {3, 5}, DType::kF32);
  Tensor m = g.input_unbatched("m", {3, 5}, DType::kU8);
  SoftmaxOptions o;
  o.mask = m;
  o.causal = true;
  Tensor y = softmax(x, o);
  g.keep(y);
  Executor ex(g, {1, 0, false});
  for (int i = 0; i < 15; ++i) ex.f32(x.id())[i] = 0.1f * static_cast<float>(i);
  for (int i = 0; i < 15; ++i) ex.u8(m.id())[i] = (i / 5 == 1 && i % 5 <= 1) ? 1 : 0;  // row 1: keys 0, 1
  ex.forward();
  for (int j = 0; j < 5; ++j) CHECK(ex.f32(y.id())[5 + j] == 0.0f);
  CHECK(ex.f32(y.id())[0] == 1.0f);  // row 0 keeps key 0 only
}

TEST_CASE("masked_fill broadcast over leading dims and its gradient", "[masked_fill]") {
  const float value = -3.5f;
  struct Case {
    Shape xs, ms;
    bool mask_batched;
  };
  for (int64_t tk : {1, 5, 17}) {
    for (const Case& k : {Case{{2, 3, 4, tk}, {4, tk}, false}, Case{{2, 3, 4, tk}, {2, 1, 4, tk}, true},
                          Case{{2, 3, 4, tk}, {3, 4, tk}, false}, Case{{2, 4, tk}, {2, 4, tk}, true}}) {
      OpCheck c;
      c.inputs = {{"x", k.xs}, {"mask", k.ms, k.mask_batched, false, DType::kU8, nullptr}};
      c.build = [=](Graph&, const std::vector<Tensor>& in) { return masked_fill(in[0], in[1], value); };
      c.reference = [=](const Inputs& x) {
        std::vector<double> y(x[0].size());
        for (size_t f = 0; f < y.size(); ++f)
          y[f] = x[1][static_cast<size_t>(broadcast_index(k.xs, k.ms, static_cast<int64_t>(f)))] != 0 ? value : x[0][f];
        return y;
      };
      INFO("x " << k.xs.str() << " mask " << k.ms.str());
      check_op(c);
    }
  }
}

TEST_CASE("masked_fill then softmax as lesson 003 writes attention", "[masked_fill]") {
  // scores.masked_fill(mask, -1e9).softmax(-1): the same as softmax with the boolean mask
  // where a row keeps a key.
  OpCheck c;
  const Shape xs{2, 4, 6}, ms{4, 6};
  c.inputs = {{"x", xs}, {"mask", ms, false, false, DType::kU8, nullptr}};
  c.inputs[1].fill = [](Rng&, int64_t f) { return f % 6 > f / 6 ? 1.0 : 0.0; };  // causal
  c.build = [](Graph&, const std::vector<Tensor>& in) {
    SoftmaxOptions o;
    o.scale = 0.5f;
    return softmax(masked_fill(in[0], in[1], -1e9f), o);
  };
  c.reference = [=](const Inputs& x) { return ref_softmax(x[0], xs, 0.5, true); };
  check_op(c);
}

TEST_CASE("mse_loss matches the reference and differentiates both sides", "[mse_loss]") {
  for (Shape s : {Shape{2, 3, 5}, Shape{2, 17}, Shape{2, 1}}) {
    OpCheck c;
    c.inputs = {{"a", s}, {"b", s}};
    c.build = [](Graph&, const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); };
    c.reference = [](const Inputs& x) {
      double sum = 0;
      for (size_t i = 0; i < x[0].size(); ++i) sum += (x[0][i] - x[1][i]) * (x[0][i] - x[1][i]);
      return std::vector<double>{sum / static_cast<double>(x[0].size())};
    };
    check_op(c);
  }
  // Unbatched operands.
  OpCheck c;
  c.inputs = {{"a", {3, 4}, false}, {"b", {3, 4}, false}};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); };
  c.reference = [](const Inputs& x) {
    double sum = 0;
    for (size_t i = 0; i < x[0].size(); ++i) sum += (x[0][i] - x[1][i]) * (x[0][i] - x[1][i]);
    return std::vector<double>{sum / 12.0};
  };
  check_op(c);
}

TEST_CASE("mse_loss trains a parameter to its target with Adam", "[mse_loss]") {
  Graph g(1);
  Tensor w = g.parameter("w", {4, 3}, Init::kZeros);
  Tensor target = g.input_unbatched("target", {4, 3}, DType::kF32);
  Tensor loss = mse_loss(w, target);
  g.keep(loss);
  g.backward(loss);
  Executor ex(g, {2, 0, false});
  Adam adam(ex.param_count(), {0.05f});
  for (int i = 0; i < 12; ++i) ex.f32(target.id())[i] = 0.25f * static_cast<float>(i) - 1.0f;
  ex.train_step(&adam);
  const float first = ex.f32(loss.id())[0];
  for (int step = 0; step < 400; ++step) ex.train_step(&adam);
  CHECK(first > 0.5f);
  CHECK(ex.f32(loss.id())[0] < 1e-4f);
  for (int i = 0; i < 12; ++i) CHECK(std::fabs(ex.f32(w.id())[i] - ex.f32(target.id())[i]) < 0.02f);
}

// ---- dropout ----

struct DropoutGraph {
  Graph g{4};
  Tensor x, dy, y;
  DropoutGraph(float p, uint64_t seed, int64_t n) {
    x = g.input("x", {n}, DType::kF32, /*requires_grad=*/true);
    dy = g.input("dy", {n}, DType::kF32);
    y = dropout(x, p, seed);
    g.keep(y);
    g.backward(y, dy);
  }
  void feed(Executor& ex, int64_t count) const {
    for (int64_t i = 0; i < count; ++i) {
      ex.f32(x.id())[i] = 0.5f + 0.001f * static_cast<float>(i % 1000);
      ex.f32(dy.id())[i] = 1.0f - 0.002f * static_cast<float>(i % 777);
    }
  }
};

TEST_CASE("dropout is the identity in forward and drops about p in train_step", "[dropout]") {
  const float p = 0.3f;
  const int64_t n = 5000, count = 4 * n;
  DropoutGraph d(p, 42, n);
  Executor ex(d.g, {1, 0, false});
  d.feed(ex, count);
  ex.forward();
  for (int64_t i = 0; i < count; ++i) REQUIRE(ex.f32(d.y.id())[i] == ex.f32(d.x.id())[i]);

  ex.train_step();
  const float keep = 1.0f / (1.0f - p);
  const float* y = ex.f32(d.y.id());
  const float* x = ex.f32(d.x.id());
  const float* dx = ex.f32(d.g.grad(d.x).id());
  const float* dy = ex.f32(d.dy.id());
  int64_t dropped = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (y[i] == 0.0f) {
      ++dropped;
      REQUIRE(dx[i] == 0.0f);  // the backward applies the same mask
    } else {
      REQUIRE(y[i] == x[i] * keep);
      REQUIRE(dx[i] == dy[i] * keep);
    }
  }
  const double fraction = static_cast<double>(dropped) / static_cast<double>(count);
  CHECK(std::fabs(fraction - p) < 0.02);

  // Each step draws a fresh mask; forward() stays the identity after training.
  std::vector<float> first(y, y + count);
  ex.train_step();
  int64_t differ = 0;
  for (int64_t i = 0; i < count; ++i) differ += (y[i] == 0.0f) != (first[static_cast<size_t>(i)] == 0.0f);
  CHECK(differ > count / 10);
  ex.forward();
  for (int64_t i = 0; i < count; ++i) REQUIRE(ex.f32(d.y.id())[i] == ex.f32(d.x.id())[i]);
}

TEST_CASE("dropout masks are the same for 1 and 2 threads and reproducible", "[dropout]") {
  const int64_t n = 1000, count = 4 * n;
  DropoutGraph a(0.5f, 7, n), b(0.5f, 7, n), other_seed(0.5f, 8, n);
  Executor e1(a.g, {1, 0, false}), e2(b.g, {2, 0, false}), e3(other_seed.g, {1, 0, false});
  a.feed(e1, count);
  b.feed(e2, count);
  other_seed.feed(e3, count);
  for (int step = 0; step < 3; ++step) {
    e1.train_step();
    e2.train_step();
    e3.train_step();
    REQUIRE(std::memcmp(e1.f32(a.y.id()), e2.f32(b.y.id()), count * 4) == 0);
    REQUIRE(std::memcmp(e1.f32(a.g.grad(a.x).id()), e2.f32(b.g.grad(b.x).id()), count * 4) == 0);
    CHECK(std::memcmp(e1.f32(a.y.id()), e3.f32(other_seed.y.id()), count * 4) != 0);
  }
  // A smaller batch draws the same mask for the elements it has.
  DropoutGraph c(0.5f, 7, n);
  Executor e4(c.g, {2, 0, false});
  e4.set_batch(2);
  c.feed(e4, 2 * n);
  DropoutGraph a2(0.5f, 7, n);
  Executor e5(a2.g, {1, 0, false});
  a2.feed(e5, count);
  e4.train_step();
  e5.train_step();
  REQUIRE(std::memcmp(e4.f32(c.y.id()), e5.f32(a2.y.id()), 2 * n * 4) == 0);
}

TEST_CASE("dropout with p 0 and p 1", "[dropout]") {
  for (float p : {0.0f, 1.0f}) {
    DropoutGraph d(p, 3, 100);
    Executor ex(d.g, {1, 0, false});
    d.feed(ex, 400);
    ex.train_step();
    for (int64_t i = 0; i < 400; ++i) {
      REQUIRE(ex.f32(d.y.id())[i] == (p == 0.0f ? ex.f32(d.x.id())[i] : 0.0f));
      REQUIRE(ex.f32(d.g.grad(d.x).id())[i] == (p == 0.0f ? ex.f32(d.dy.id())[i] : 0.0f));
    }
  }
}

// ---- shape errors ----

TEST_CASE("softmax masked_fill dropout and mse_loss name op and shapes in shape errors", "[errors]") {
  using Catch::Matchers::Contains;
  Graph g(2);
  Tensor x = g.input("scores", {3, 4, 5}, DType::kF32);
  Tensor m_bad = g.input_unbatched("m_bad", {4, 6}, DType::kU8);
  Tensor m_heads = g.input_unbatched("m_heads", {2, 4, 5}, DType::kU8);
  Tensor m_batch = g.input_unbatched("m_batch", {2, 3, 4, 5}, DType::kU8);
  Tensor m_i32 = g.input_unbatched("m_i32", {4, 5}, DType::kI32);
  Tensor m_f32 = g.input_unbatched("m_f32", {4, 5}, DType::kF32);
  Tensor row = g.input("row", {5}, DType::kF32);
  Tensor other = g.input("other", {3, 4}, DType::kF32);
  SoftmaxOptions o;
  o.mask = m_bad;
  REQUIRE_THROWS_AS(softmax(x, o), ShapeError);
  REQUIRE_THROWS_WITH(softmax(x, o), Contains("softmax") && Contains("'scores' [2, 3, 4, 5]") &&
                                         Contains("'m_bad' [4, 6] uint8") && Contains("[4, 5]"));
  o.mask = m_heads;
  REQUIRE_THROWS_WITH(softmax(x, o), Contains("softmax") && Contains("leading dims") && Contains("'m_heads' [2, 4, 5]"));
  o.mask = m_batch;
  REQUIRE_THROWS_WITH(softmax(x, o), Contains("softmax") && Contains("batch") && Contains("'m_batch' [2, 3, 4, 5]"));
  o.mask = m_i32;
  REQUIRE_THROWS_WITH(softmax(x, o), Contains("softmax") && Contains("uint8") && Contains("'m_i32' [4, 5] int32"));
  SoftmaxOptions causal;
  causal.causal = true;
  Graph g1(1);
  Tensor v = g1.input_unbatched("v", {5}, DType::kF32);
  REQUIRE_THROWS_WITH(softmax(v, causal), Contains("softmax") && Contains("causal") && Contains("'v' [5]"));
  REQUIRE_THROWS_WITH(masked_fill(x, m_f32, 0.0f), Contains("masked_fill") && Contains("uint8") && Contains("'m_f32' [4, 5]"));
  REQUIRE_THROWS_WITH(masked_fill(x, m_bad, 0.0f), Contains("masked_fill") && Contains("'m_bad' [4, 6] uint8"));
  REQUIRE_THROWS_WITH(dropout(x, 1.5f, 0), Contains("dropout") && Contains("p must be in [0, 1]") && Contains("'scores'"));
  REQUIRE_THROWS_WITH(mse_loss(x, row), Contains("mse_loss") && Contains("same shape") && Contains("'scores' [2, 3, 4, 5]") &&
                                            Contains("'row' [2, 5]"));
  REQUIRE_THROWS_AS(mse_loss(other, g.input_unbatched("other_u", {2, 3, 4}, DType::kF32)), ShapeError);
  Graph g2(2);
  Tensor elsewhere = g2.input("elsewhere", {3, 4, 5}, DType::kF32);
  REQUIRE_THROWS_WITH(mse_loss(x, elsewhere), Contains("different graphs"));
}

// ---- threads ----

TEST_CASE("the ops give the same bits for 1 and 2 threads", "[threads]") {
  struct Model {
    Graph g{3};
    Tensor x, mask, add, target, w, y, loss;
    Model() {
      x = g.input("x", {4, 12, 20}, DType::kF32, true);
      mask = g.input("mask", {1, 12, 20}, DType::kU8);
      add = g.input_unbatched("add", {12, 20}, DType::kF32, true);
      target = g.input("target", {4, 12, 20}, DType::kF32);
      w = g.parameter("w", {12, 20}, Init::kNormal, 1.0f);
      SoftmaxOptions o;
      o.mask = mask;
      o.causal = true;
      o.scale = 0.4f;
      Tensor p = softmax(x + w, o);
      SoftmaxOptions a;
      a.mask = add;
      Tensor q = softmax(dropout(masked_fill(p, mask, 0.25f), 0.2f, 99), a);
      loss = mse_loss(q, target);
      g.keep(loss);
      g.backward(loss);
    }
  };
  Model m1, m2;
  Executor e1(m1.g, {1, 5, false}), e2(m2.g, {2, 5, false});
  auto feed = [](const Model& m, Executor& ex) {
    Rng r(11);
    for (int64_t i = 0; i < 3 * 4 * 12 * 20; ++i) {
      ex.f32(m.x.id())[i] = static_cast<float>(2 * r.uniform() - 1);
      ex.f32(m.target.id())[i] = static_cast<float>(r.uniform() * 0.1);
    }
    for (int64_t i = 0; i < 3 * 12 * 20; ++i) ex.u8(m.mask.id())[i] = r.below(4) == 0;
    for (int64_t i = 0; i < 12 * 20; ++i) ex.f32(m.add.id())[i] = static_cast<float>(r.uniform() - 0.5);
  };
  feed(m1, e1);
  feed(m2, e2);
  Adam a1(e1.param_count(), {0.01f}), a2(e2.param_count(), {0.01f});
  for (int step = 0; step < 3; ++step) {
    e1.train_step(&a1);
    e2.train_step(&a2);
    REQUIRE(std::memcmp(e1.f32(m1.loss.id()), e2.f32(m2.loss.id()), 4) == 0);
    REQUIRE(std::memcmp(e1.f32(m1.g.grad(m1.x).id()), e2.f32(m2.g.grad(m2.x).id()), 3 * 4 * 12 * 20 * 4) == 0);
    REQUIRE(std::memcmp(e1.f32(m1.g.grad(m1.add).id()), e2.f32(m2.g.grad(m2.add).id()), 12 * 20 * 4) == 0);
    REQUIRE(std::memcmp(e1.params(), e2.params(), static_cast<size_t>(e1.param_count()) * 4) == 0);
  }
}

}  // namespace
