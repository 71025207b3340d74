// Uses the installed library the way a C++ developer would (the README's example): declares
// the neighbor-sum model, trains it a little, reads its attention maps. Exits non-zero on a
// wrong result.
#include <attnkit/attnkit.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using namespace attnkit;
  // A kernel call: 2×3 · 3×2 against a hand-computed result.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  std::vector<float> c(4, NAN);
  sgemm(false, false, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f, c.data(), 2);
  const float want[4] = {58, 64, 139, 154};
  for (int i = 0; i < 4; ++i)
    if (c[i] != want[i]) { std::printf("sgemm wrong at %d: %g\n", i, c[i]); return 1; }

  // A model: y_i = (x_{i-1} + x_{i+1}) mod 10 on a ring, as in the lesson.
  const int64_t T = 10, V = 10, D = 32, B = 64;
  Graph g(B);
  Tensor ids = g.input("ids", {T}, DType::kI32);
  Tensor targets = g.input("targets", {T}, DType::kI32);
  Embedding tok(g, "tok", V, D), pos(g, "pos", T, D);
  MultiHeadAttention attn(g, "attn", D, 2);
  Sequential head{Linear(g, "head.0", D, 128), ReLU(), Linear(g, "head.2", 128, V)};
  Tensor h = tok(ids) + pos(g.arange(T));
  Tensor logits = head(h + attn(h));
  Tensor loss = cross_entropy(logits, targets);
  g.backward(loss);

  Executor ex(g, {1, 0});
  Adam adam(ex.param_count(), {0.01f});
  Rng rng(1);
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    int32_t* x = ex.i32(ids.id());
    int32_t* y = ex.i32(targets.id());
    for (int64_t i = 0; i < B * T; ++i) x[i] = static_cast<int32_t>(rng.below(V));
    for (int64_t i = 0; i < B * T; ++i) {
      const int64_t r = i / T, t = i % T;
      y[i] = (x[r * T + (t + T - 1) % T] + x[r * T + (t + 1) % T]) % V;
    }
    ex.train_step(&adam);
    (step == 0 ? first : last) = ex.f32(loss.id())[0];
  }
  const float* maps = ex.f32(attn.attn().id());  // [B, heads, T, T]
  double row = 0;
  for (int64_t j = 0; j < T; ++j) row += maps[j];
  if (!(last < first) || std::fabs(row - 1.0) > 1e-4) {
    std::printf("training did not behave: loss %g -> %g, attention row sum %g\n", first, last, row);
    return 1;
  }
  std::printf("consumer ok (%s): loss %.3f -> %.3f, arena %lld bytes (lower bound %lld)\n",
              simd_target_name(), first, last, static_cast<long long>(ex.plan().arena_bytes),
              static_cast<long long>(ex.plan().lower_bound_bytes));
  return 0;
}
