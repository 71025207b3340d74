// Lesson 003's attention written from primitives (examples/lesson003_attention.h: view,
// transpose, matmul, scale, masked_fill, softmax, matmul, transpose, view, W_o) against the
// fused MultiHeadAttention: outputs, attention weights and every gradient within 1e-5, with
// and without a causal mask; the same neighbor-sum accuracy after training; and the engine's
// rules for graphs of primitives: bitwise the same for 1 and 2 threads, no heap allocation in a
// steady step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>

#include "../examples/lesson003_attention.h"

#include "allocation_counter.h"

namespace attnkit {
namespace {

constexpr int64_t kB = 4, kT = 10, kD = 32, kH = 2;

// One graph: x (requires_grad) → attention → y, seeded with dy; fused or from primitives.
struct AttentionGraph {
  std::unique_ptr<Graph> g;
  Tensor x, dy, y, weights, mask;
  std::unique_ptr<Executor> ex;
};

AttentionGraph build(bool primitives, bool causal, int threads, bool retain_weights = false) {
  AttentionGraph a;
  a.g = std::make_unique<Graph>(kB);
  Graph& g = *a.g;
  a.x = g.input("x", {kT, kD}, DType::kF32, true);
  if (primitives) {
    lesson003::MultiHeadAttention mha(g, "attn", kD, kH);
    if (causal) a.mask = g.input_unbatched("causal_mask", {kT, kT}, DType::kU8);
    a.y = mha(a.x, a.x, a.x, a.mask);
    a.weights = mha.attention;
  } else {
    MultiHeadAttention mha(g, "attn", kD, kH, causal);
    a.y = mha(a.x);
    a.weights = mha.attn();
  }
  g.keep(a.y);
  g.keep(a.weights);
  if (retain_weights) g.retain_grad(a.weights);
  a.dy = g.input("dy", {kT, kD}, DType::kF32);
  g.backward(a.y, a.dy);
  a.ex = std::make_unique<Executor>(g, ExecutorOptions{threads, 7, false});
  a.ex->set_batch(kB);
  if (a.mask.valid())
    for (int64_t i = 0; i < kT; ++i)
      for (int64_t j = 0; j < kT; ++j) a.ex->u8(a.mask.id())[i * kT + j] = j > i;
  return a;
}

// Copies every parameter of `from` into `to` by name.
void copy_params(const AttentionGraph& from, AttentionGraph& to) {
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : from.g->params()) by_name[p.name] = &p;
  for (const ParamInfo& p : to.g->params()) {
    const ParamInfo* q = by_name.at(p.name);
    REQUIRE(q->numel == p.numel);
    std::memcpy(to.ex->params() + p.offset, from.ex->params() + q->offset, static_cast<size_t>(p.numel) * 4);
  }
}

void feed(AttentionGraph& a, uint64_t seed) {
  Rng rng(seed);
  for (int64_t i = 0; i < kB * kT * kD; ++i) a.ex->f32(a.x.id())[i] = static_cast<float>(2 * rng.uniform() - 1);
  for (int64_t i = 0; i < kB * kT * kD; ++i) a.ex->f32(a.dy.id())[i] = static_cast<float>(2 * rng.uniform() - 1);
}

// |got − want| <= 1e-5 · max(|want|, floor): floor is for gradients that are zero in exact
// arithmetic (a key projection's bias does not change a softmax over keys), where both sides
// are rounding noise of the gradients around them.
void require_close(const float* got, const float* want, int64_t n, const std::string& what,
                   double floor = 1e-30) {
  double scale = floor;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  for (int64_t i = 0; i < n; ++i) {
    INFO(what << " at " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::fabs(static_cast<double>(got[i]) - want[i]) <= 1e-5 * scale);
  }
}

}  // namespace

TEST_CASE("lesson 003 attention from primitives equals the fused op: outputs weights and all gradients") {
  for (const bool causal : {false, true}) {
    INFO((causal ? "causal" : "no mask"));
    AttentionGraph fused = build(false, causal, 1), prim = build(true, causal, 1);
    copy_params(fused, prim);
    feed(fused, 3);
    feed(prim, 3);
    fused.ex->train_step(nullptr);
    prim.ex->train_step(nullptr);
    require_close(prim.ex->f32(prim.y.id()), fused.ex->f32(fused.y.id()), kB * kT * kD, "output");
    require_close(prim.ex->f32(prim.weights.id()), fused.ex->f32(fused.weights.id()), kB * kH * kT * kT, "weights");
    require_close(prim.ex->f32(prim.g->grad(prim.x).id()), fused.ex->f32(fused.g->grad(fused.x).id()), kB * kT * kD,
                  "gradient of x");
    std::map<std::string, const ParamInfo*> fp;
    for (const ParamInfo& p : fused.g->params()) fp[p.name] = &p;
    double largest = 0;  // of every parameter's gradient
    for (int64_t i = 0; i < fused.ex->param_count(); ++i)
      largest = std::max(largest, std::fabs(static_cast<double>(fused.ex->grads()[i])));
    REQUIRE(largest > 0);
    for (const ParamInfo& p : prim.g->params())
      require_close(prim.ex->grads() + p.offset, fused.ex->grads() + fp.at(p.name)->offset, p.numel,
                    "gradient of " + p.name, 1e-3 * largest);
  }
}

TEST_CASE("cross-attention (queries from one sequence, keys and values from another) equals the primitives") {
  // Lesson 003's Seq2Seq case: Q = decoder states [Tq, D], K = V = encoder outputs [Tk, D].
  constexpr int64_t kTq = 7, kTk = 12;
  for (const bool masked : {false, true}) {
    INFO((masked ? "padding mask (the last 3 keys)" : "no mask"));
    struct Cross {
      std::unique_ptr<Graph> g;
      Tensor xq, xkv, dy, y, weights, mask;
      std::unique_ptr<Executor> ex;
    } sides[2];
    for (int primitives = 0; primitives < 2; ++primitives) {
      Cross& c = sides[primitives];
      c.g = std::make_unique<Graph>(kB);
      Graph& g = *c.g;
      c.xq = g.input("decoder", {kTq, kD}, DType::kF32, true);
      c.xkv = g.input("encoder", {kTk, kD}, DType::kF32, true);
      if (primitives) {
        lesson003::MultiHeadAttention mha(g, "attn", kD, kH);
        if (masked) c.mask = g.input_unbatched("mask", {kTq, kTk}, DType::kU8);  // broadcast over batch, heads
        c.y = mha(c.xq, c.xkv, c.xkv, c.mask);
        c.weights = mha.attention;
      } else {
        MultiHeadAttention mha(g, "attn", kD, kH);
        if (masked) c.mask = g.input("mask", {kTq, kTk}, DType::kU8);  // [batch, Tq, Tk]
        c.y = mha(c.xq, c.xkv, c.mask);
        c.weights = mha.attn();
      }
      g.keep(c.y);
      g.keep(c.weights);
      c.dy = g.input("dy", {kTq, kD}, DType::kF32);
      g.backward(c.y, c.dy);
      c.ex = std::make_unique<Executor>(g, ExecutorOptions{1, 7, false});
      c.ex->set_batch(kB);
      Rng rng(11);
      for (const auto& [t, rows] : {std::pair{c.xq, kTq}, std::pair{c.xkv, kTk}, std::pair{c.dy, kTq}})
        for (int64_t i = 0; i < kB * rows * kD; ++i) c.ex->f32(t.id())[i] = static_cast<float>(2 * rng.uniform() - 1);
      if (masked) {
        const int64_t copies = primitives ? 1 : kB;
        for (int64_t i = 0; i < copies * kTq * kTk; ++i) c.ex->u8(c.mask.id())[i] = i % kTk >= kTk - 3;
      }
    }
    Cross &fused = sides[0], &prim = sides[1];
    std::map<std::string, const ParamInfo*> fp;
    for (const ParamInfo& p : fused.g->params()) fp[p.name] = &p;
    for (const ParamInfo& p : prim.g->params())
      std::memcpy(prim.ex->params() + p.offset, fused.ex->params() + fp.at(p.name)->offset,
                  static_cast<size_t>(p.numel) * 4);
    fused.ex->train_step(nullptr);
    prim.ex->train_step(nullptr);
    require_close(prim.ex->f32(prim.y.id()), fused.ex->f32(fused.y.id()), kB * kTq * kD, "output");
    const float* w = fused.ex->f32(fused.weights.id());
    require_close(prim.ex->f32(prim.weights.id()), w, kB * kH * kTq * kTk, "weights [B, H, Tq, Tk]");
    for (int64_t r = 0; r < kB * kH * kTq; ++r) {  // rows sum to 1; masked keys get nothing
      double sum = 0;
      for (int64_t j = 0; j < kTk; ++j) sum += w[r * kTk + j];
      CHECK(sum == Approx(1.0).epsilon(1e-5));
      if (masked) CHECK(w[r * kTk + kTk - 1] == 0.0f);
    }
    require_close(prim.ex->f32(prim.g->grad(prim.xq).id()), fused.ex->f32(fused.g->grad(fused.xq).id()), kB * kTq * kD,
                  "gradient of the decoder states");
    require_close(prim.ex->f32(prim.g->grad(prim.xkv).id()), fused.ex->f32(fused.g->grad(fused.xkv).id()),
                  kB * kTk * kD, "gradient of the encoder outputs");
    double largest = 0;
    for (int64_t i = 0; i < fused.ex->param_count(); ++i)
      largest = std::max(largest, std::fabs(static_cast<double>(fused.ex->grads()[i])));
    for (const ParamInfo& p : prim.g->params())
      require_close(prim.ex->grads() + p.offset, fused.ex->grads() + fp.at(p.name)->offset, p.numel,
                    "gradient of " + p.name, 1e-3 * largest);
  }
}

TEST_CASE("retain_grad on the attention weights: the fused op keeps the gradient the primitives' softmax output has") {
  // The fused op's dL/dweights (dy·Vᵀ per head) is scratch in its kernel unless retained.
  for (const bool causal : {false, true}) {
    for (const int threads : {1, 2}) {
      INFO((causal ? "causal" : "no mask") << ", " << threads << " threads");
      AttentionGraph fused = build(false, causal, threads, true), prim = build(true, causal, threads, true);
      copy_params(fused, prim);
      feed(fused, 5);
      feed(prim, 5);
      fused.ex->train_step(nullptr);
      prim.ex->train_step(nullptr);
      const float* want = prim.ex->f32(prim.g->grad(prim.weights).id());
      const float* got = fused.ex->f32(fused.g->grad(fused.weights).id());
      double largest = 0;
      for (int64_t i = 0; i < kB * kH * kT * kT; ++i) largest = std::max(largest, std::fabs(static_cast<double>(want[i])));
      REQUIRE(largest > 0.01);
      require_close(got, want, kB * kH * kT * kT, "gradient of the weights");
      // Retaining changes nothing else: x's gradient is the one without retain_grad.
      AttentionGraph plain = build(false, causal, threads);
      copy_params(fused, plain);
      feed(plain, 5);
      plain.ex->train_step(nullptr);
      require_close(fused.ex->f32(fused.g->grad(fused.x).id()), plain.ex->f32(plain.g->grad(plain.x).id()), kB * kT * kD,
                    "gradient of x with and without retain_grad");
    }
  }
}

TEST_CASE("a graph of primitives: bitwise the same for 1 and 2 threads and no allocation in a steady step") {
  AttentionGraph one = build(true, true, 1), two = build(true, true, 2);
  copy_params(one, two);
  feed(one, 5);
  feed(two, 5);
  one.ex->train_step(nullptr);
  two.ex->train_step(nullptr);
  REQUIRE(std::memcmp(one.ex->f32(one.y.id()), two.ex->f32(two.y.id()), kB * kT * kD * 4) == 0);
  REQUIRE(std::memcmp(one.ex->grads(), two.ex->grads(), static_cast<size_t>(one.ex->param_count()) * 4) == 0);
  Adam adam(two.ex->param_count(), {});
  two.ex->train_step(&adam);  // first steps: threads start, memory is touched
  const long before = g_allocations.load();
  for (int i = 0; i < 5; ++i) two.ex->train_step(&adam);
  CHECK(g_allocations.load() - before == 0);
}

// neighbor-sum's 8-epoch runs are chaotic: one init seed can land at 0.90 where its neighbours
// reach 0.999 (a change in the softmax's last bits moved seed 0 there), so the medians over
// three init seeds are compared.
TEST_CASE("neighbor-sum trains to the fused model's accuracy with lesson 003's attention") {
  const ModelConfig c = lesson_config("neighbor-sum");
  const TaskData data = generate_task_data(c, 3000, 500, 0);
  auto train = [&](bool primitives, uint64_t seed) {
    const int64_t T = c.seq_len, D = c.d_model, B = 64;
    Graph g(B);
    Tensor ids = g.input("ids", {T}, DType::kI32), targets = g.input("targets", {T}, DType::kI32);
    Embedding tok(g, "tok", c.vocab, D), pos(g, "pos", T, D);
    Sequential head{Linear(g, "head.0", D, c.mlp_hidden), ReLU(), Linear(g, "head.2", c.mlp_hidden, c.classes)};
    Tensor h = tok(ids) + pos(g.arange(T));
    Tensor logits;
    if (primitives) {
      lesson003::MultiHeadAttention attn(g, "attn", D, c.heads);
      logits = head(h + attn(h, h, h));
    } else {
      MultiHeadAttention attn(g, "attn", D, c.heads);
      logits = head(h + attn(h));
    }
    g.keep(logits);
    g.backward(cross_entropy(logits, targets));
    Executor ex(g, {1, seed});
    return lesson003::train_and_validate(ex, ids, targets, logits, data, c.classes);
  };
  std::vector<double> fused, primitives;
  for (uint64_t seed : {0, 1, 2}) {
    fused.push_back(train(false, seed));
    primitives.push_back(train(true, seed));
    INFO("seed " << seed << ": fused " << fused.back() << ", primitives " << primitives.back());
    CHECK(fused.back() > 0.85);
    CHECK(primitives.back() > 0.85);
  }
  std::sort(fused.begin(), fused.end());
  std::sort(primitives.begin(), primitives.end());
  INFO("medians: fused " << fused[1] << ", primitives " << primitives[1]);
  CHECK(fused[1] > 0.9);
  CHECK(std::fabs(primitives[1] - fused[1]) < 0.02);
}

}  // namespace attnkit
