// The kernels and graph ops against PyTorch 1.13's float64 autograd (tests/data/pytorch/*.ref.npz,
// an independent oracle beside the double references in the other tests).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/functional.h"
#include "engine/modules.h"
#include "engine/npy.h"
#include "engine/npz.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/softmax.h"

namespace attnkit {
namespace {

struct Case {
  std::map<std::string, NpyArray> arrays;
  explicit Case(const std::string& name)
      : arrays(read_npz(std::string(ATTNKIT_TEST_DATA) + "/pytorch/" + name + ".ref.npz")) {}
  std::vector<float> f(const std::string& k) const { return to_float32(arrays.at(k), k); }
  std::vector<int32_t> i(const std::string& k) const { return to_int32(arrays.at(k), k); }
  const std::vector<int64_t>& shape(const std::string& k) const { return arrays.at(k).shape; }
};

void require_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t j = 0; j < got.size(); ++j) {
    INFO(what << "[" << j << "]: " << got[j] << " vs PyTorch " << want[j]);
    REQUIRE(std::abs(got[j] - want[j]) <= 2e-5f + 1e-4f * std::abs(want[j]));
  }
}

TEST_CASE("softmax matches PyTorch") {
  Case c("softmax");
  const auto& s = c.shape("x");
  const int64_t n = s.back(), rows = static_cast<int64_t>(c.f("x").size()) / n;
  std::vector<float> y(c.f("x").size()), dx(y.size());
  softmax_forward(c.f("x").data(), y.data(), 1, rows, n, 1.0f, {});
  require_close(y, c.f("out"), "out");
  softmax_backward(y.data(), c.f("dout").data(), dx.data(), 1, rows, n, 1.0f, {}, false);
  require_close(dx, c.f("grad_x"), "grad_x");
}

TEST_CASE("layernorm matches PyTorch") {
  Case c("layernorm");
  const int64_t d = c.shape("x").back(), rows = static_cast<int64_t>(c.f("x").size()) / d;
  const auto x = c.f("x"), g = c.f("gamma"), b = c.f("beta");
  std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(mean.size()), dx(x.size());
  std::vector<float> dg(static_cast<size_t>(d), 0.0f), db(dg.size(), 0.0f);
  layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, d, 1e-5f);
  require_close(y, c.f("out"), "out");
  layernorm_backward_input(x.data(), g.data(), mean.data(), rstd.data(), c.f("dout").data(), dx.data(), rows, d, false);
  layernorm_backward_params(x.data(), mean.data(), rstd.data(), c.f("dout").data(), dg.data(), db.data(), rows, d);
  require_close(dx, c.f("grad_x"), "grad_x");
  require_close(dg, c.f("grad_gamma"), "grad_gamma");
  require_close(db, c.f("grad_beta"), "grad_beta");
}

TEST_CASE("cross-entropy matches PyTorch") {
  Case c("cross_entropy");
  const int64_t classes = c.shape("logits").back(), rows = c.shape("logits")[0];
  const auto logits = c.f("logits");
  const auto targets = c.i("targets");
  std::vector<float> row_loss(static_cast<size_t>(rows)), grad(logits.size());
  cross_entropy_forward(logits.data(), targets.data(), row_loss.data(), rows, classes);
  double sum = 0;
  for (float l : row_loss) sum += l;
  require_close({static_cast<float>(sum / static_cast<double>(rows))}, c.f("out"), "out");
  cross_entropy_backward(logits.data(), targets.data(), grad.data(), rows, classes,
                         c.f("dout")[0] / static_cast<float>(rows), false);
  require_close(grad, c.f("grad_logits"), "grad_logits");
}

TEST_CASE("embedding matches PyTorch") {
  Case c("embedding");
  const int64_t vocab = c.shape("weight")[0], d = c.shape("weight")[1];
  const auto ids = c.i("ids");
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> y(static_cast<size_t>(n * d)), dw(static_cast<size_t>(vocab * d), 0.0f);
  embedding_forward(c.f("weight").data(), ids.data(), y.data(), n, vocab, d);
  require_close(y, c.f("out"), "out");
  embedding_backward(ids.data(), c.f("dout").data(), dw.data(), n, vocab, d);
  require_close(dw, c.f("grad_weight"), "grad_weight");
}

TEST_CASE("matmul and its gradients match PyTorch") {
  Case c("matmul_2d");
  const int64_t m = c.shape("A")[0], k = c.shape("A")[1], n = c.shape("B")[1];
  const auto a = c.f("A"), b = c.f("B"), dout = c.f("dout");
  std::vector<float> out(static_cast<size_t>(m * n)), da(a.size()), dbm(b.size());
  sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, out.data(), n);
  require_close(out, c.f("out"), "out");
  sgemm(false, true, m, k, n, 1.0f, dout.data(), n, b.data(), n, 0.0f, da.data(), k);   // dA = dout·Bᵀ
  sgemm(true, false, k, n, m, 1.0f, a.data(), k, dout.data(), n, 0.0f, dbm.data(), n);  // dB = Aᵀ·dout
  require_close(da, c.f("grad_A"), "grad_A");
  require_close(dbm, c.f("grad_B"), "grad_B");
}

// A batched graph input [shape[0], shape[1:]…] for a case's array.
Tensor batched_input(Graph& g, const std::string& name, const std::vector<int64_t>& shape, bool requires_grad) {
  Shape per;
  per.rank = static_cast<int>(shape.size()) - 1;
  for (int i = 1; i < static_cast<int>(shape.size()); ++i) per.dims[i - 1] = shape[static_cast<size_t>(i)];
  return g.input(name, per, DType::kF32, requires_grad);
}

void feed(const Executor& ex, Tensor t, const std::vector<float>& v) {
  REQUIRE(static_cast<int64_t>(v.size()) == t.shape().numel());
  std::memcpy(ex.f32(t.id()), v.data(), v.size() * sizeof(float));
}

std::vector<float> read(const Executor& ex, Tensor t) {
  return std::vector<float>(ex.f32(t.id()), ex.f32(t.id()) + t.shape().numel());
}

TEST_CASE("linear and its gradients match PyTorch") {
  // Through the Linear module and through matmul + add (W stored [in, out], the case's
  // w_layout "in_out").
  Case c("linear");
  const auto& xs = c.shape("x");
  for (bool module : {true, false}) {
    INFO((module ? "Linear" : "matmul + add"));
    Graph g(xs[0]);
    Tensor x = batched_input(g, "x", xs, true);
    Linear lin(g, "lin", c.shape("W")[0], c.shape("W")[1]);
    Tensor y = module ? lin(x) : matmul(x, lin.weight) + lin.bias;
    g.keep(y);
    Tensor dout = batched_input(g, "dout", c.shape("dout"), false);
    g.backward(y, dout);
    Executor ex(g, {2, 0, false});
    feed(ex, x, c.f("x"));
    feed(ex, lin.weight, c.f("W"));
    feed(ex, lin.bias, c.f("b"));
    feed(ex, dout, c.f("dout"));
    ex.train_step(nullptr);
    require_close(read(ex, y), c.f("out"), "out");
    require_close(read(ex, g.grad(x)), c.f("grad_x"), "grad_x");
    require_close(read(ex, g.grad(lin.weight)), c.f("grad_W"), "grad_W");
    require_close(read(ex, g.grad(lin.bias)), c.f("grad_b"), "grad_b");
  }
}

TEST_CASE("batched matmul and its gradients match PyTorch") {
  // Through matmul (engine/functional.h): A [B, H, m, k]·B [B, H, k, n], both batched.
  Case c("matmul_batched");
  Graph g(c.shape("A")[0]);
  Tensor a = batched_input(g, "A", c.shape("A"), true), b = batched_input(g, "B", c.shape("B"), true);
  Tensor y = matmul(a, b);
  g.keep(y);
  Tensor dout = batched_input(g, "dout", c.shape("dout"), false);
  g.backward(y, dout);
  for (int threads : {1, 2}) {
    Executor ex(g, {threads, 0, false});
    feed(ex, a, c.f("A"));
    feed(ex, b, c.f("B"));
    feed(ex, dout, c.f("dout"));
    ex.train_step(nullptr);
    require_close(read(ex, y), c.f("out"), "out");
    require_close(read(ex, g.grad(a)), c.f("grad_A"), "grad_A");
    require_close(read(ex, g.grad(b)), c.f("grad_B"), "grad_B");
  }
}

// sdpa through the kernels the attention op uses: Q·Kᵀ, masked scaled softmax, ·V, and back.
void check_sdpa(const std::string& name) {
  Case c(name);
  const int64_t m = c.shape("Q")[0], d = c.shape("Q")[1], n = c.shape("K")[0], dv = c.shape("V")[1];
  const auto q = c.f("Q"), k = c.f("K"), v = c.f("V"), dout = c.f("dout");
  std::vector<uint8_t> mask;
  SoftmaxMask sm;
  if (c.arrays.count("mask")) {
    const auto mi = c.i("mask");
    mask.assign(mi.begin(), mi.end());
    sm.data = mask.data();
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<float> p(static_cast<size_t>(m * n)), out(static_cast<size_t>(m * dv));
  sgemm(false, true, m, n, d, 1.0f, q.data(), d, k.data(), d, 0.0f, p.data(), n);
  softmax_forward(p.data(), p.data(), 1, m, n, scale, sm);
  require_close(p, c.f("weights"), "weights");
  sgemm(false, false, m, dv, n, 1.0f, p.data(), n, v.data(), dv, 0.0f, out.data(), dv);
  require_close(out, c.f("out"), "out");
  std::vector<float> dp(p.size()), dq(q.size()), dk(k.size()), dvv(v.size());
  sgemm(false, true, m, n, dv, 1.0f, dout.data(), dv, v.data(), dv, 0.0f, dp.data(), n);
  sgemm(true, false, n, dv, m, 1.0f, p.data(), n, dout.data(), dv, 0.0f, dvv.data(), dv);
  softmax_backward(p.data(), dp.data(), dp.data(), 1, m, n, scale, sm, false);
  sgemm(false, false, m, d, n, 1.0f, dp.data(), n, k.data(), d, 0.0f, dq.data(), d);
  sgemm(true, false, n, d, m, 1.0f, dp.data(), n, q.data(), d, 0.0f, dk.data(), d);
  require_close(dq, c.f("grad_Q"), "grad_Q");
  require_close(dk, c.f("grad_K"), "grad_K");
  require_close(dvv, c.f("grad_V"), "grad_V");
}

TEST_CASE("scaled dot-product attention matches PyTorch") {
  check_sdpa("sdpa_nomask");
  check_sdpa("sdpa_pad");
}

}  // namespace
}  // namespace attnkit
