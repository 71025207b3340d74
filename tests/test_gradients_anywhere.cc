// Gradients anywhere: of inputs (requires_grad), seeded from any tensor with an upstream
// gradient (backward(y, dy)), and through every differentiable output — the attention
// weights too, whose gradient flows into Q and K. Checked against central differences of
// double references on every SIMD target (op_check.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/executor.h"
#include "engine/functional.h"
#include "engine/modules.h"
#include "engine/optimizer.h"
#include "op_check.h"

namespace attnkit {
namespace {

using test::Inputs;
using test::OpCheck;

// softmax(scale · Q_h K_hᵀ (+ causal mask)) per (batch, head): [B, H, Tq, Tk]; and P·V.
struct AttentionRef {
  int64_t B, Tq, Tk, D, Dv, H;
  double scale;
  bool causal;
  std::vector<double> probs(const std::vector<double>& q, const std::vector<double>& k) const {
    const int64_t dh = D / H;
    std::vector<double> p(static_cast<size_t>(B * H * Tq * Tk));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i) {
          double* row = p.data() + ((b * H + h) * Tq + i) * Tk;
          double mx = -1e300;
          for (int64_t j = 0; j < Tk; ++j) {
            double s = 0;
            for (int64_t e = 0; e < dh; ++e)
              s += q[static_cast<size_t>((b * Tq + i) * D + h * dh + e)] * k[static_cast<size_t>((b * Tk + j) * D + h * dh + e)];
            row[j] = causal && j > i ? -1e300 : scale * s;
            mx = std::max(mx, row[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < Tk; ++j) sum += row[j] = row[j] <= -1e299 ? 0.0 : std::exp(row[j] - mx);
          for (int64_t j = 0; j < Tk; ++j) row[j] /= sum;
        }
    return p;
  }
  std::vector<double> output(const std::vector<double>& q, const std::vector<double>& k,
                             const std::vector<double>& v) const {
    const std::vector<double> p = probs(q, k);
    const int64_t dvh = Dv / H;
    std::vector<double> y(static_cast<size_t>(B * Tq * Dv), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i)
          for (int64_t j = 0; j < Tk; ++j)
            for (int64_t e = 0; e < dvh; ++e)
              y[static_cast<size_t>((b * Tq + i) * Dv + h * dvh + e)] +=
                  p[static_cast<size_t>(((b * H + h) * Tq + i) * Tk + j)] * v[static_cast<size_t>((b * Tk + j) * Dv + h * dvh + e)];
    return y;
  }
};

OpCheck attention_case(const AttentionRef& r, bool of_weights) {
  OpCheck c;
  c.inputs = {{"q", {r.B, r.Tq, r.D}}, {"k", {r.B, r.Tk, r.D}}, {"v", {r.B, r.Tk, r.Dv}}};
  c.build = [r, of_weights](Graph& g, const std::vector<Tensor>& in) {
    NodeAttrs a;
    a.heads = r.H, a.scale = static_cast<float>(r.scale), a.causal = r.causal;
    const auto outs = g.apply(OpKind::kAttention, {in[0].id(), in[1].id(), in[2].id(), kNoTensor}, a);
    return of_weights ? outs[1] : outs[0];
  };
  c.reference = [r, of_weights](const Inputs& x) { return of_weights ? r.probs(x[0], x[1]) : r.output(x[0], x[1], x[2]); };
  return c;
}

}  // namespace

TEST_CASE("attention weights: a loss on them alone gives Q and K their gradient (short and long sequences)") {
  for (const AttentionRef& r : {AttentionRef{2, 8, 8, 16, 16, 2, 0.35, false}, AttentionRef{2, 10, 10, 32, 32, 2, 0.25, true},
                                AttentionRef{1, 20, 24, 8, 8, 1, 0.5, false}}) {
    INFO("T " << r.Tq << "x" << r.Tk << ", D " << r.D << ", heads " << r.H << (r.causal ? ", causal" : ""));
    OpCheck c = attention_case(r, /*of_weights=*/true);
    c.inputs[2].requires_grad = false;  // V does not reach the weights
    test::check_op(c);
  }
}

TEST_CASE("attention output: backward(y, dy) from the output matches finite differences for Q, K and V") {
  for (const AttentionRef& r : {AttentionRef{2, 8, 8, 16, 16, 2, 0.35, false}, AttentionRef{1, 20, 24, 8, 8, 1, 0.5, true}}) {
    INFO("T " << r.Tq << "x" << r.Tk << ", D " << r.D);
    test::check_op(attention_case(r, /*of_weights=*/false));
  }
}

TEST_CASE("gradients that cannot exist are errors naming the tensor") {
  Graph g(2);
  Tensor x = g.input("x", {3, 4}, DType::kF32);  // no requires_grad
  Tensor ids = g.input("ids", {3}, DType::kI32);
  CHECK_THROWS_WITH(g.input("bad", {3}, DType::kI32, true), Catch::Contains("only float inputs have gradients"));
  Tensor dy = g.input("dy", {3, 4}, DType::kF32);
  CHECK_THROWS_WITH(g.backward(x, dy), Catch::Contains("does not depend on any parameter or input with requires_grad"));
  Graph h(2);
  Tensor a = h.input("a", {3, 4}, DType::kF32, true);
  Tensor b = h.input("b", {3, 4}, DType::kF32);
  Tensor y = a + b;
  Tensor wrong = h.input("wrong", {4, 3}, DType::kF32);
  CHECK_THROWS_WITH(h.backward(y, wrong), Catch::Contains("dy must be a float input of y's shape"));
  CHECK_THROWS_WITH(h.grad(a), Catch::Contains("no backward() yet"));
  Tensor up = h.input("up", {3, 4}, DType::kF32);
  h.backward(y, up);
  CHECK(h.grad(a).valid());
  CHECK_THROWS_WITH(h.grad(b), Catch::Contains("grad('b' [2, 3, 4])") && Catch::Contains("no gradient is kept"));
  (void)ids;
}

}  // namespace attnkit

namespace attnkit {

TEST_CASE("a loss on the attention weights alone trains the query and key projections") {
  // Teach a head to look at the previous token: mse(weights, shifted identity).
  const int64_t B = 8, T = 6, D = 16;
  Graph g(B);
  Tensor ids = g.input("ids", {T}, DType::kI32);
  Embedding tok(g, "tok", 10, D), pos(g, "pos", T, D);
  MultiHeadAttention attn(g, "attn", D, 1);
  (void)attn(tok(ids) + pos(g.arange(T)));
  Tensor target = g.input_unbatched("target", {T, T}, DType::kF32);
  Tensor diff = attn.attn() - target;  // the target broadcasts over batch and heads
  Tensor loss = mean(diff * diff);
  g.keep(loss);
  g.backward(loss);
  Executor ex(g, {1, 3});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) ex.f32(target.id())[i * T + j] = j == (i + T - 1) % T ? 1.0f : 0.0f;
  Rng rng(4);
  Adam adam(ex.param_count(), {0.01f});
  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    for (int64_t i = 0; i < B * T; ++i) ex.i32(ids.id())[i] = static_cast<int32_t>(rng.below(10));
    ex.train_step(&adam);
    if (step == 0) first = ex.f32(loss.id())[0];
    last = ex.f32(loss.id())[0];
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.1f * first);
  // The value projection does not reach the weights: it gets no gradient.
  const ParamInfo* v = nullptr;
  for (const ParamInfo& p : g.params())
    if (p.name == "attn.v.weight") v = &p;
  REQUIRE(v);
  for (int64_t i = 0; i < v->numel; ++i) REQUIRE(ex.grads()[v->offset + i] == 0.0f);
}

}  // namespace attnkit
