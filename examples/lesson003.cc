// Lesson 003's multi-head attention written from primitives (lesson003_attention.h), in the
// neighbor-sum model of lesson 004, trained against the installed library. Prints the
// validation accuracy and the first head's attention of one sequence; exits non-zero when the
// model did not learn.
#include <cstdio>

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
  const TaskData data = generate_task_data(c, 3000, 500, 0);
  const double accuracy = lesson003::train_and_validate(ex, ids, targets, logits, data, c.classes);
  std::printf("lesson 003 attention from primitives, neighbor-sum: validation accuracy %.4f\n", accuracy);
  const float* w = ex.f32(attn.attention.id());  // the last batch's first sequence, head 0
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j < T; ++j) std::printf(" %.2f", w[i * T + j]);
    std::printf("\n");
  }
  return accuracy > 0.9 ? 0 : 1;
}
