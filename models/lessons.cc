#include "models/lessons.h"

#include "engine/error.h"

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
    c.head = HeadKind::kLayerNormLinear, c.mlp_hidden = 0;
  } else if (task == "induction") {  // predict what followed the previous occurrence: 2 layers
    c.vocab = 24, c.classes = 24, c.seq_len = 16, c.d_model = 64, c.heads = 1, c.layers = 2;
    c.causal = true;
    c.head = HeadKind::kLayerNormLinear, c.mlp_hidden = 0;
  } else if (task == "reversal-large") {  // the compute-bound benchmark configuration
    c.vocab = 64, c.classes = 64, c.seq_len = 128, c.d_model = 256, c.heads = 4, c.layers = 2;
    c.pre_norm = true;
    c.block_mlp = 4 * c.d_model;
    c.head = HeadKind::kLayerNormLinear, c.mlp_hidden = 0;
  } else {
    std::string known;
    for (const auto& t : known_tasks()) known += (known.empty() ? "" : ", ") + t;
    throw Error("unknown task '" + task + "' (known: " + known + ")");
  }
  return c;
}

ModelConfig resize_task(ModelConfig c, int64_t seq_len, int64_t vocab) {
  if (seq_len > 0) c.seq_len = seq_len;
  if (vocab > 0) c.vocab = vocab;
  const std::string sizes = c.task + " at T = " + std::to_string(c.seq_len) + ", V = " + std::to_string(c.vocab);
  const int64_t min_t = c.task == "neighbor-sum" ? 3 : c.task == "induction" ? 4 : 2;
  if (c.seq_len < min_t)
    throw Error(sizes + ": " + c.task + " needs T >= " + std::to_string(min_t));
  if (c.vocab < 2) throw Error(sizes + ": the vocabulary needs at least 2 tokens");
  if (c.task == "induction" && c.vocab < c.seq_len)
    throw Error(sizes + ": induction needs V >= T (each sequence holds distinct tokens and a repeated segment)");
  c.classes = c.task == "duplicates" ? 2 : c.vocab;
  return c;
}

void validate_config(const ModelConfig& c) {
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0) throw Error(std::string("model config: ") + name + " must be positive, got " + std::to_string(v));
  };
  positive(c.vocab, "vocab");
  positive(c.classes, "classes");
  positive(c.seq_len, "seq_len");
  positive(c.d_model, "d_model");
  positive(c.heads, "heads");
  positive(c.layers, "layers");
  if (c.head == HeadKind::kMlp) positive(c.mlp_hidden, "mlp_hidden");
  if (c.mlp_hidden < 0) throw Error("model config: mlp_hidden must be >= 0, got " + std::to_string(c.mlp_hidden));
  if (c.block_mlp < 0) throw Error("model config: block_mlp must be >= 0, got " + std::to_string(c.block_mlp));
  if (c.d_model % c.heads != 0)
    throw Error("model config: d_model " + std::to_string(c.d_model) + " is not divisible by heads " +
                std::to_string(c.heads));
}

std::string layer_prefix(const ModelConfig& c, int64_t l) {
  return c.layers == 1 ? std::string() : "layers." + std::to_string(l) + ".";
}

Model build_model(const ModelConfig& c, int64_t max_batch, bool with_backward) {
  validate_config(c);
  Model m;
  m.config = c;
  m.graph = std::make_unique<Graph>(max_batch);
  Graph& g = *m.graph;
  g.set_fold_embedding_projections(c.fold_embedding_projections);
  g.set_fuse_elementwise(c.fuse_elementwise);
  g.set_index_attention_values(c.index_attention_values);
  m.ids = g.input("ids", {c.seq_len}, DType::kI32);
  m.targets = g.input("targets", {c.seq_len}, DType::kI32);

  Embedding tok(g, "tok", c.vocab, c.d_model);
  Tensor h = tok(m.ids);
  if (c.positions) {
    Embedding pos(g, "pos", c.seq_len, c.d_model);
    h = h + pos(g.arange(c.seq_len));
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = layer_prefix(c, l);
    m.attention.emplace_back(g, p + "attn", c.d_model, c.heads, c.causal);
    const MultiHeadAttention& attn = m.attention.back();
    h = h + attn(c.pre_norm ? LayerNorm(g, p + "ln1", c.d_model)(h) : h);
    if (c.block_mlp > 0) {
      Sequential mlp{Linear(g, p + "mlp.0", c.d_model, c.block_mlp), ReLU(),
                     Linear(g, p + "mlp.2", c.block_mlp, c.d_model)};
      h = h + mlp(c.pre_norm ? LayerNorm(g, p + "ln2", c.d_model)(h) : h);
    }
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
  if (with_backward) {
    m.loss = cross_entropy(m.logits, m.targets);
    g.backward(m.loss);
  } else {
    g.optimize_for_inference();  // no loss: an inference graph does not compute one
  }
  return m;
}

}  // namespace attnkit
