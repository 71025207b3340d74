#include "models/lessons.h"

namespace attnkit {

ModelConfig lesson_config(const std::string& task) {
  ModelConfig c;
  c.task = task;
  if (task == "neighbor-sum") {  // y_i = (x_{i-1} + x_{i+1}) mod 10: look both ways, 2 heads
    c.vocab = 10, c.classes = 10, c.seq_len = 10, c.d_model = 32, c.heads = 2, c.mlp_hidden = 128;
  } else if (task == "duplicates") {  // does x_i occur elsewhere? content, no positions
    c.vocab = 12, c.classes = 2, c.seq_len = 10, c.d_model = 32, c.heads = 1, c.mlp_hidden = 64;
    c.positions = false;
  } else if (task == "reversal") {  // y = x reversed: LayerNorm + Linear head
    c.vocab = 10, c.classes = 10, c.seq_len = 8, c.d_model = 32, c.heads = 1;
    c.head = HeadKind::kLayerNormLinear;
  } else {
    throw Error("unknown task '" + task + "' (known: neighbor-sum, duplicates, reversal)");
  }
  return c;
}

Model build_model(const ModelConfig& c, int64_t max_batch, bool with_backward) {
  Model m;
  m.config = c;
  m.graph = std::make_unique<Graph>(max_batch);
  Graph& g = *m.graph;
  m.ids = g.input("ids", {c.seq_len}, DType::kI32);
  m.targets = g.input("targets", {c.seq_len}, DType::kI32);

  Embedding tok(g, "tok", c.vocab, c.d_model);
  Tensor h = tok(m.ids);
  if (c.positions) {
    Embedding pos(g, "pos", c.seq_len, c.d_model);
    h = h + pos(g.arange(c.seq_len));
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string name = c.layers == 1 ? "attn" : "layers." + std::to_string(l) + ".attn";
    m.attention.emplace_back(g, name, c.d_model, c.heads, c.causal);
    h = h + m.attention.back()(h);
  }
  if (c.head == HeadKind::kMlp) {
    Sequential head{Linear(g, "head.0", c.d_model, c.mlp_hidden), ReLU(),
                    Linear(g, "head.2", c.mlp_hidden, c.classes)};
    m.logits = head(h);
  } else {
    Sequential head{LayerNorm(g, "head.0", c.d_model), Linear(g, "head.1", c.d_model, c.classes)};
    m.logits = head(h);
  }
  g.keep(m.logits);
  m.loss = cross_entropy(m.logits, m.targets);
  if (with_backward) g.backward(m.loss);
  return m;
}

}  // namespace attnkit
