// The attention op inside a graph: forward against PyTorch's float64 reference (with masks
// and with the MultiHeadAttention module), and the masked backward against finite differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "engine/executor.h"
#include "engine/functional.h"
#include "engine/modules.h"
#include "engine/npy.h"
#include "engine/npz.h"
#include "engine/rng.h"

namespace attnkit {
namespace {

std::map<std::string, NpyArray> reference(const std::string& name) {
  return read_npz(std::string(ATTNKIT_TEST_DATA) + "/pytorch/" + name + ".ref.npz");
}

TEST_CASE("attention with a mask matches PyTorch inside a graph") {
  auto r = reference("sdpa_causal_batched");  // Q, K, V [B, H, T, dh], mask [T, T]
  const auto& qs = r.at("Q").shape;
  const int64_t B = qs[0], H = qs[1], T = qs[2], dh = qs[3], D = H * dh;
  Graph g(B);
  Tensor q = g.input("q", {T, D}, DType::kF32), k = g.input("k", {T, D}, DType::kF32);
  Tensor v = g.input("v", {T, D}, DType::kF32), mask = g.input("mask", {T, T}, DType::kU8);
  Attention a = scaled_dot_product_attention(q, k, v, mask, false, H);
  g.keep(a.out);
  Executor ex(g);
  // [B, H, T, dh] -> [B, T, H·dh]: heads are column blocks.
  auto put = [&](const char* name, Tensor t) {
    const auto src = to_float32(r.at(name), name);
    float* dst = ex.f32(t.id());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t e = 0; e < dh; ++e) dst[(b * T + i) * D + h * dh + e] = src[static_cast<size_t>(((b * H + h) * T + i) * dh + e)];
  };
  put("Q", q), put("K", k), put("V", v);
  const auto m = to_int32(r.at("mask"), "mask");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T * T; ++j) ex.u8(mask.id())[b * T * T + j] = static_cast<uint8_t>(m[static_cast<size_t>(j)]);
  ex.forward();
  const auto want_w = to_float32(r.at("weights"), "weights");
  const auto want_o = to_float32(r.at("out"), "out");
  for (size_t j = 0; j < want_w.size(); ++j) REQUIRE(ex.f32(a.weights.id())[j] == Approx(want_w[j]).margin(1e-5));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t e = 0; e < dh; ++e)
          REQUIRE(ex.f32(a.out.id())[(b * T + i) * D + h * dh + e] ==
                  Approx(want_o[static_cast<size_t>(((b * H + h) * T + i) * dh + e)]).margin(1e-5));
}

TEST_CASE("MultiHeadAttention matches PyTorch's multi-head attention") {
  auto r = reference("mha_2heads");
  const auto& xs = r.at("x").shape;
  const int64_t B = xs[0], T = xs[1], D = xs[2], H = to_int32(r.at("num_heads"), "num_heads")[0];
  Graph g(B);
  Tensor x = g.input("x", {T, D}, DType::kF32);
  MultiHeadAttention mha(g, "mha", D, H);
  Tensor y = mha(x);
  g.keep(y);
  Executor ex(g);
  auto load = [&](const char* name, const Linear& l) {
    const auto w = to_float32(r.at(std::string("W") + name), name);
    const auto bias = to_float32(r.at(std::string("b") + name), name);
    std::memcpy(ex.f32(l.weight.id()), w.data(), w.size() * 4);  // in_out layout, like ours
    std::memcpy(ex.f32(l.bias.id()), bias.data(), bias.size() * 4);
  };
  load("q", mha.q), load("k", mha.k), load("v", mha.v), load("o", mha.o);
  const auto xv = to_float32(r.at("x"), "x");
  std::memcpy(ex.f32(x.id()), xv.data(), xv.size() * 4);
  ex.forward();
  const auto want_y = to_float32(r.at("out"), "out"), want_a = to_float32(r.at("attn"), "attn");
  for (size_t j = 0; j < want_y.size(); ++j) REQUIRE(ex.f32(y.id())[j] == Approx(want_y[j]).margin(2e-5));
  for (size_t j = 0; j < want_a.size(); ++j) REQUIRE(ex.f32(mha.attn().id())[j] == Approx(want_a[j]).margin(2e-5));
}

TEST_CASE("masked multi-head attention backward matches finite differences") {
  // Padding masks that differ per batch entry (and one fully masked row), 2 heads, causal off
  // and on: gradients of every parameter against central differences of the float loss.
  for (bool causal : {false, true}) {
    const int64_t B = 3, T = 5, D = 8, V = 6;
    Graph g(B);
    Tensor ids = g.input("ids", {T}, DType::kI32), targets = g.input("targets", {T}, DType::kI32);
    Tensor mask = g.input("mask", {T, T}, DType::kU8);
    Embedding tok(g, "tok", V, D);
    MultiHeadAttention mha(g, "mha", D, 2, causal);
    Linear out(g, "out", D, V);
    Tensor loss = cross_entropy(out(mha(tok(ids), mask)), targets);
    g.backward(loss);
    Executor ex(g, {2, 1, false});
    Rng rng(4);
    for (int64_t i = 0; i < B * T; ++i) {
      ex.i32(ids.id())[i] = static_cast<int32_t>(rng.below(V));
      ex.i32(targets.id())[i] = static_cast<int32_t>(rng.below(V));
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j)  // batch entry b pads its last b keys; row 0 of entry 2 is fully masked
          ex.u8(mask.id())[(b * T + i) * T + j] = (j >= T - b) || (b == 2 && i == 0);
    for (int64_t i = 0; i < ex.param_count(); ++i) ex.params()[i] += static_cast<float>(0.1 * rng.normal());
    ex.train_step();
    std::vector<float> grads(ex.grads(), ex.grads() + ex.param_count());
    for (const ParamInfo& p : g.params()) {
      for (int64_t j = 0; j < p.numel; j += 7) {
        float& w = ex.params()[p.offset + j];
        const float saved = w, h = 1e-2f;
        w = saved + h;
        ex.forward();
        const double up = ex.f32(loss.id())[0];
        w = saved - h;
        ex.forward();
        const double down = ex.f32(loss.id())[0];
        w = saved;
        const double numeric = (up - down) / (2.0 * h);
        INFO((causal ? "causal " : "") << p.name << "[" << j << "]: analytic " << grads[static_cast<size_t>(p.offset + j)] << " numeric " << numeric);
        REQUIRE(std::abs(grads[static_cast<size_t>(p.offset + j)] - numeric) <= 2e-3 + 2e-2 * std::abs(numeric));
      }
    }
  }
}

}  // namespace
}  // namespace attnkit

namespace attnkit {
namespace {

// Values of a reference array as float.
std::vector<float> ref_f(const std::map<std::string, NpyArray>& r, const char* name) { return to_float32(r.at(name), name); }

void require_near(const float* got, const std::vector<float>& want, const std::string& what, double tol = 2e-5) {
  for (size_t j = 0; j < want.size(); ++j) {
    INFO(what << " at " << j);
    REQUIRE(got[j] == Approx(want[j]).margin(tol));
  }
}

}  // namespace

TEST_CASE("attention with upstream gradients on the output and the weights matches PyTorch: fused and primitives") {
  auto r = reference("sdpa_causal_batched");  // L = Σ out·dout + Σ weights·dweights
  const auto& qs = r.at("Q").shape;
  const int64_t B = qs[0], H = qs[1], T = qs[2], dh = qs[3], D = H * dh;
  const auto mask = to_int32(r.at("mask"), "mask");
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  SECTION("the fused op (heads as column blocks)") {
    Graph g(B);
    Tensor q = g.input("q", {T, D}, DType::kF32, true), k = g.input("k", {T, D}, DType::kF32, true);
    Tensor v = g.input("v", {T, D}, DType::kF32, true), m = g.input("mask", {T, T}, DType::kU8);
    Tensor dout = g.input("dout", {T, D}, DType::kF32), dweights = g.input("dweights", {H, T, T}, DType::kF32);
    Attention a = scaled_dot_product_attention(q, k, v, m, false, H);
    g.retain_grad(a.weights);  // its whole gradient: dout·Vᵀ + dweights
    g.backward(sum(a.out * dout) + sum(a.weights * dweights));
    Executor ex(g);
    // [B, H, T, dh] <-> [B, T, H·dh]
    auto index = [&](int64_t b, int64_t h, int64_t i, int64_t e) { return (b * T + i) * D + h * dh + e; };
    auto put = [&](const char* name, Tensor t) {
      const auto src = ref_f(r, name);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < T; ++i)
            for (int64_t e = 0; e < dh; ++e) ex.f32(t.id())[index(b, h, i, e)] = src[static_cast<size_t>(((b * H + h) * T + i) * dh + e)];
    };
    put("Q", q), put("K", k), put("V", v), put("dout", dout);
    const auto dw = ref_f(r, "dweights");
    std::copy(dw.begin(), dw.end(), ex.f32(dweights.id()));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < T * T; ++j) ex.u8(m.id())[b * T * T + j] = static_cast<uint8_t>(mask[static_cast<size_t>(j)]);
    ex.train_step(nullptr);
    for (const char* name : {"grad_Q", "grad_K", "grad_V"}) {
      const Tensor t = name[5] == 'Q' ? q : name[5] == 'K' ? k : v;
      const auto want = ref_f(r, name);
      const float* got = ex.f32(g.grad(t).id());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < T; ++i)
            for (int64_t e = 0; e < dh; ++e) {
              INFO(name << " [" << b << ", " << h << ", " << i << ", " << e << "]");
              REQUIRE(got[index(b, h, i, e)] == Approx(want[static_cast<size_t>(((b * H + h) * T + i) * dh + e)]).margin(2e-5));
            }
    }
    // The retained weights' gradient against dout·Vᵀ + dweights from the reference's inputs, in double.
    const auto rv = ref_f(r, "V"), rdout = ref_f(r, "dout");
    const float* got = ex.f32(g.grad(a.weights).id());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j) {
            const int64_t at = ((b * H + h) * T + i) * T + j;
            double want = dw[static_cast<size_t>(at)];
            for (int64_t e = 0; e < dh; ++e)
              want += static_cast<double>(rdout[static_cast<size_t>(((b * H + h) * T + i) * dh + e)]) *
                      rv[static_cast<size_t>(((b * H + h) * T + j) * dh + e)];
            INFO("grad(weights) [" << b << ", " << h << ", " << i << ", " << j << "]");
            REQUIRE(got[at] == Approx(want).margin(2e-5));
          }
  }
  SECTION("primitives: matmul, softmax with a boolean mask, matmul") {
    Graph g(B);
    Tensor q = g.input("q", {H, T, dh}, DType::kF32, true), k = g.input("k", {H, T, dh}, DType::kF32, true);
    Tensor v = g.input("v", {H, T, dh}, DType::kF32, true), m = g.input_unbatched("mask", {T, T}, DType::kU8);
    Tensor dout = g.input("dout", {H, T, dh}, DType::kF32), dweights = g.input("dweights", {H, T, T}, DType::kF32);
    SoftmaxOptions o;
    o.scale = scale, o.mask = m;
    Tensor w = softmax(matmul(q, k, false, true), o);
    Tensor out = matmul(w, v);
    g.keep(w), g.keep(out);
    g.backward(sum(out * dout) + sum(w * dweights));
    Executor ex(g);
    for (auto [name, t] : std::vector<std::pair<const char*, Tensor>>{{"Q", q}, {"K", k}, {"V", v}, {"dout", dout}, {"dweights", dweights}}) {
      const auto src = ref_f(r, name);
      std::copy(src.begin(), src.end(), ex.f32(t.id()));
    }
    for (int64_t j = 0; j < T * T; ++j) ex.u8(m.id())[j] = static_cast<uint8_t>(mask[static_cast<size_t>(j)]);
    ex.train_step(nullptr);
    require_near(ex.f32(w.id()), ref_f(r, "weights"), "weights");
    require_near(ex.f32(out.id()), ref_f(r, "out"), "out");
    require_near(ex.f32(g.grad(q).id()), ref_f(r, "grad_Q"), "grad_Q");
    require_near(ex.f32(g.grad(k).id()), ref_f(r, "grad_K"), "grad_K");
    require_near(ex.f32(g.grad(v).id()), ref_f(r, "grad_V"), "grad_V");
  }
}

TEST_CASE("padding and no-mask attention from primitives match PyTorch with a boolean and with an additive mask") {
  for (const char* name : {"sdpa_pad", "sdpa_nomask"}) {
    for (const bool additive : {false, true}) {
      INFO(name << (additive ? ", additive mask" : ", boolean mask"));
      auto r = reference(name);
      const int64_t m = r.at("Q").shape[0], d = r.at("Q").shape[1], n = r.at("K").shape[0], dv = r.at("V").shape[1];
      const bool masked = r.count("mask") > 0;
      Graph g(1);
      Tensor q = g.input_unbatched("q", {m, d}, DType::kF32, true), k = g.input_unbatched("k", {n, d}, DType::kF32, true);
      Tensor v = g.input_unbatched("v", {n, dv}, DType::kF32, true);
      Tensor mask = masked ? g.input_unbatched("mask", {m, n}, additive ? DType::kF32 : DType::kU8) : Tensor();
      Tensor dout = g.input_unbatched("dout", {m, dv}, DType::kF32);
      SoftmaxOptions o;
      o.scale = 1.0f / std::sqrt(static_cast<float>(d)), o.mask = mask;
      Tensor w = softmax(matmul(q, k, false, true), o);
      Tensor out = matmul(w, v);
      g.keep(w), g.keep(out);
      g.backward(out, dout);
      Executor ex(g);
      for (auto [key, t] : std::vector<std::pair<const char*, Tensor>>{{"Q", q}, {"K", k}, {"V", v}, {"dout", dout}}) {
        const auto src = ref_f(r, key);
        std::copy(src.begin(), src.end(), ex.f32(t.id()));
      }
      if (masked) {
        const auto bits = to_int32(r.at("mask"), "mask");
        for (int64_t j = 0; j < m * n; ++j) {
          if (additive) ex.f32(mask.id())[j] = bits[static_cast<size_t>(j)] ? -1e9f : 0.0f;
          else ex.u8(mask.id())[j] = static_cast<uint8_t>(bits[static_cast<size_t>(j)]);
        }
      }
      ex.train_step(nullptr);
      require_near(ex.f32(w.id()), ref_f(r, "weights"), "weights");
      require_near(ex.f32(out.id()), ref_f(r, "out"), "out");
      require_near(ex.f32(g.grad(q).id()), ref_f(r, "grad_Q"), "grad_Q");
      require_near(ex.f32(g.grad(k).id()), ref_f(r, "grad_K"), "grad_K");
      require_near(ex.f32(g.grad(v).id()), ref_f(r, "grad_V"), "grad_V");
    }
  }
}


TEST_CASE("retain_grad on MultiHeadAttention's weights in a model: the same gradient with and without the folds") {
  // The README's model (tok + pos embeddings, two heads, a head Linear, cross-entropy): the
  // training graph folds the value projection into the tables; the weights' gradient is the
  // same as the unfolded graph's.
  constexpr int64_t B = 4, T = 10, V = 10, D = 32, H = 2;
  auto run = [&](bool folds, std::vector<float>& dweights) {
    Graph g(B);
    g.set_fold_embedding_projections(folds);
    g.set_index_attention_values(folds);
    Tensor ids = g.input("ids", {T}, DType::kI32), targets = g.input("targets", {T}, DType::kI32);
    Embedding tok(g, "tok", V, D), pos(g, "pos", T, D);
    MultiHeadAttention attn(g, "attn", D, H);
    Linear head(g, "head", D, V);
    Tensor h = tok(ids) + pos(g.arange(T));
    // Before the module ran, attn() is no tensor yet: a clear error.
    CHECK_THROWS_WITH(g.retain_grad(attn.attn()), Catch::Contains("not a tensor") && Catch::Contains("attn()"));
    Tensor logits = head(h + attn(h));
    g.retain_grad(attn.attn());
    g.backward(cross_entropy(logits, targets));
    Executor ex(g, ExecutorOptions{1, 3, false});
    ex.set_batch(B);
    for (int64_t i = 0; i < B * T; ++i) {
      ex.i32(ids.id())[i] = static_cast<int32_t>((i * 7 + 3) % V);
      ex.i32(targets.id())[i] = static_cast<int32_t>((i * 3 + 1) % V);
    }
    ex.train_step(nullptr);
    const float* got = ex.f32(g.grad(attn.attn()).id());
    dweights.assign(got, got + B * H * T * T);
  };
  std::vector<float> folded, plain;
  run(true, folded);
  run(false, plain);
  double largest = 0;
  for (float x : plain) largest = std::max(largest, std::fabs(static_cast<double>(x)));
  REQUIRE(largest > 1e-4);
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("grad(weights)[" << i << "]");
    REQUIRE(std::fabs(static_cast<double>(folded[i]) - plain[i]) <= 1e-4 * largest);
  }
}

}  // namespace attnkit
