// The trained models of lesson 004, declared as briefly as the lesson declares them, and a
// general stack of L attention layers the same tasks can use.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../engine/graph.h"
#include "../engine/modules.h"

namespace attnkit {

enum class HeadKind { kMlp, kLayerNormLinear };

struct ModelConfig {
  std::string task;          // "neighbor-sum", "duplicates", "reversal", …
  int64_t vocab = 10;        // input tokens
  int64_t classes = 10;      // output classes per position
  int64_t seq_len = 10;      // T
  int64_t d_model = 32;      // D
  int64_t heads = 1;
  int64_t layers = 1;
  bool positions = true;     // add a position embedding
  bool causal = false;
  HeadKind head = HeadKind::kMlp;
  int64_t mlp_hidden = 128;  // hidden width of the MLP head
};

// The lesson's configuration of a task (throws Error for an unknown task).
ModelConfig lesson_config(const std::string& task);

// A built model: its graph (with backward), inputs, outputs and attention modules.
struct Model {
  ModelConfig config;
  std::unique_ptr<Graph> graph;
  Tensor ids, targets;  // int32 [batch, T]
  Tensor logits;        // [batch, T, classes], kept
  Tensor loss;          // mean cross-entropy
  std::vector<MultiHeadAttention> attention;  // one per layer; attention[l].attn() = maps
};

// Declares the model: h = tok(ids) [+ pos(arange(T))]; for each layer h = h + attn(h);
// logits = head(h). With one layer this is exactly the lesson's head(h + attn(h)).
Model build_model(const ModelConfig& config, int64_t max_batch, bool with_backward = true);

}  // namespace attnkit
