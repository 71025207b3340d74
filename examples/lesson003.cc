// Lesson 003's multi-head attention written from primitives (lesson003_attention.h), in the
// neighbor-sum model of lesson 004, trained against the installed library. Prints the
// validation accuracy and the first head's attention of one sequence; exits non-zero when the
// model did not learn.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "lesson003_attention.h"

int main() {
  using namespace attnkit;
  const ModelConfig c = lesson_config("neighbor-sum");
  const int64_t T = c.seq_len, D = c.d_model, B = 64;
  Graph g(B);
  Tensor ids = g.input("ids", {T}, DType::kI32);
  Tensor targets = g.input("targets", {T}, DType::kI32);
  Embedding tok(g, "tok", c.vocab, D), pos(g, "pos", T, D);
  lesson003::MultiHeadAttention attn(g, "attn", D, c.heads);
  Sequential head{Linear(g, "head.0", D, c.mlp_hidden), ReLU(), Linear(g, "head.2", c.mlp_hidden, c.classes)};
  Tensor h = tok(ids) + pos(g.arange(T));
  Tensor logits = head(h + attn(h, h, h));
  g.keep(logits);
  g.keep(attn.attention);
  Tensor loss = cross_entropy(logits, targets);
  g.backward(loss);

  Executor ex(g, {1, 0});
  Adam adam(ex.param_count(), {0.01f});
  const TaskData data = generate_task_data(c, 3000, 500, 0);
  Rng order(1);
  std::vector<int64_t> perm(static_cast<size_t>(data.train.size));
  for (int epoch = 0; epoch < 8; ++epoch) {
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    order.shuffle(perm.data(), data.train.size);
    for (int64_t start = 0; start < data.train.size; start += B) {
      const int64_t n = std::min(B, data.train.size - start);
      ex.set_batch(n);
      for (int64_t r = 0; r < n; ++r) {
        std::memcpy(ex.i32(ids.id()) + r * T, data.train.tokens(perm[static_cast<size_t>(start + r)]), T * 4);
        std::memcpy(ex.i32(targets.id()) + r * T, data.train.targets(perm[static_cast<size_t>(start + r)]), T * 4);
      }
      ex.train_step(&adam);
    }
  }
  int64_t correct = 0, total = 0;
  for (int64_t start = 0; start < data.val.size; start += B) {
    const int64_t n = std::min(B, data.val.size - start);
    ex.set_batch(n);
    std::memcpy(ex.i32(ids.id()), data.val.tokens(start), static_cast<size_t>(n * T) * 4);
    std::memcpy(ex.i32(targets.id()), data.val.targets(start), static_cast<size_t>(n * T) * 4);
    ex.forward();
    for (int64_t r = 0; r < n * T; ++r) {
      const float* row = ex.f32(logits.id()) + r * c.classes;
      correct += std::max_element(row, row + c.classes) - row == data.val.targets(start)[r];
      ++total;
    }
  }
  const double accuracy = static_cast<double>(correct) / static_cast<double>(total);
  std::printf("lesson 003 attention from primitives, neighbor-sum: validation accuracy %.4f\n", accuracy);
  const float* w = ex.f32(attn.attention.id());  // the last batch's first sequence, head 0
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j < T; ++j) std::printf(" %.2f", w[i * T + j]);
    std::printf("\n");
  }
  return accuracy > 0.9 ? 0 : 1;
}
