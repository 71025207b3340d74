// The trained models of lesson 004, declared as briefly as the lesson declares them, and a
// general stack of L attention layers the same tasks can use.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../engine/graph.h"
#include "../engine/modules.h"
#include "task_names.h"  // known_tasks()

namespace attnkit {

enum class HeadKind { kMlp, kLayerNormLinear };

struct ModelConfig {
  std::string task;          // "neighbor-sum", "duplicates", "reversal", "induction", …
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
  // Block options of the general stack. The defaults give the lessons' attention-only layers
  // h = h + attn(h); pre_norm gives pre-LayerNorm blocks h = h + attn(LN(h)), and
  // block_mlp > 0 adds h = h + MLP(h) (or MLP(LN(h))) after each attention, with that hidden
  // width (Linear–ReLU–Linear).
  bool pre_norm = false;
  int64_t block_mlp = 0;
  // How the graph computes, not what: projections of embedding lookups are folded into the
  // tables (Graph::fold_embedding_projections, see linear() in engine/modules.h). Not saved
  // in checkpoints; turning it off changes only rounding.
  bool fold_embedding_projections = true;
  // ReLUs and residual sums run inside the products next to them
  // (Graph::set_fuse_elementwise): bitwise the same results; off only to measure. Not saved
  // in checkpoints.
  bool fuse_elementwise = true;
  // An attention reads its folded values from a per-(token, position) table instead of their
  // [B, T, ·] rows (Graph::set_index_attention_values): changes only rounding (the table's
  // gradient sums in another order); off only to measure. Not saved in checkpoints.
  bool index_attention_values = true;
};

// The lesson's configuration of a task (throws Error for an unknown task). Besides the three
// lesson tasks: "induction" (2 causal layers, see models/tasks.h) and "reversal-large", the
// compute-bound benchmark model: V = 64, T = 128, D = 256, 4 heads, 2 pre-LayerNorm blocks of
// attention + MLP (hidden 4D), LayerNorm + Linear head, target = the reversed sequence.
ModelConfig lesson_config(const std::string& task);

// The task at another sequence length T and vocabulary V (0 keeps the lesson's), within the
// task's rules: the classes follow V (duplicates keeps its 2 classes), T ≥ 3 for neighbor-sum
// (two distinct neighbours on the ring), T ≥ 4 and V ≥ T for induction (a repeated segment of
// distinct tokens), T ≥ 2 and V ≥ 2 for all. Throws Error naming the rule broken.
ModelConfig resize_task(ModelConfig config, int64_t seq_len, int64_t vocab);

// Checks a configuration (sizes positive, d_model divisible by heads, …); throws Error
// naming the field.
void validate_config(const ModelConfig& config);

// Parameter-name prefix of layer l: "" for a one-layer model (the lesson's names "attn.q",
// …), "layers.<l>." otherwise.
std::string layer_prefix(const ModelConfig& config, int64_t l);

// A built model: its graph (with backward), inputs, outputs and attention modules.
struct Model {
  ModelConfig config;
  std::unique_ptr<Graph> graph;
  Tensor ids, targets;  // int32 [batch, T]
  Tensor logits;        // [batch, T, classes], kept
  Tensor loss;          // mean cross-entropy (training graphs only: invalid without backward)
  std::vector<MultiHeadAttention> attention;  // one per layer; attention[l].attn() = maps
};

// Declares the model: h = tok(ids) [+ pos(arange(T))]; for each layer h = h + attn(h)
// (with the block options above); logits = head(h). With one layer and default block options
// this is exactly the lesson's head(h + attn(h)).
Model build_model(const ModelConfig& config, int64_t max_batch, bool with_backward = true);

}  // namespace attnkit
