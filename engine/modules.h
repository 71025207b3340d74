// Modules with the course's behaviour, so a model reads like the lesson code:
//   Tensor h = tok(ids) + pos(g.arange(T));
//   Tensor logits = head(h + attn(h));
// Calling a module records nodes in the graph; nothing runs until an Executor runs it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph.h"

namespace attnkit {

// Initialization (see README "Initialization"): Linear weights ~ N(0, gain²/fan_in) with
// gain 1, biases 0, embeddings ~ N(0, 1), LayerNorm gamma 1 and beta 0; attention's query and
// key projections use gain 0.5, so the attention logits start 16× smaller in variance and
// softmax starts near uniform instead of saturated.
class Embedding {
 public:
  Embedding(Graph& g, const std::string& name, int64_t vocab, int64_t dim);
  Tensor operator()(Tensor ids) const;
  Tensor weight;  // [vocab, dim]
};

// x·W (+ b), W [in, out]. When x is an embedding lookup table[ids] — or a sum of lookups and
// small unbatched tensors, like tok(ids) + pos(arange(T)) — and the tables have fewer rows
// than x, the product is folded into the tables (exact algebra, other rounding):
//   table[ids]·W + b = (table·W + b)[ids],   (a + c)·W + b = (a·W + b) + c·W,
// so it costs vocab rows instead of batch × T rows, forward and backward. Graphs with
// fold_embedding_projections() off, or where the tables are not smaller, get the plain product.
Tensor linear(Tensor x, Tensor weight, Tensor bias = {});

class Linear {
 public:
  Linear(Graph& g, const std::string& name, int64_t in, int64_t out, bool bias = true,
         float init_gain = 1.0f);
  Tensor operator()(Tensor x) const;
  Tensor weight;  // [in, out]: y = x·W + b
  Tensor bias;    // [out], or invalid without bias
};

struct ReLU {
  Tensor operator()(Tensor x) const;
};

class LayerNorm {
 public:
  LayerNorm(Graph& g, const std::string& name, int64_t dim, float eps = 1e-5f);
  Tensor operator()(Tensor x) const;
  Tensor gamma, beta;
  float eps;
};

// Applies its layers in order: Sequential head{Linear(g, "head.0", 32, 128), ReLU(), …}.
class Sequential {
 public:
  template <class... Layers>
  explicit Sequential(Layers... layers) : layers_{std::function<Tensor(Tensor)>(layers)...} {}
  Tensor operator()(Tensor x) const {
    for (const auto& f : layers_) x = f(x);
    return x;
  }

 private:
  std::vector<std::function<Tensor(Tensor)>> layers_;
};

struct Attention {
  Tensor out;      // [batch, Tq, Dv]
  Tensor weights;  // [batch, heads, Tq, Tk], rows sum to 1
};

// softmax(Q·Kᵀ·scale, forbidden := −1e9)·V over `heads` column blocks of q, k, v
// ([batch, tokens, dim]); scale defaults to 1/√(dim/heads). mask: optional uint8
// [batch, Tq, Tk] input, non-zero = forbidden; causal forbids keys after the query.
Attention scaled_dot_product_attention(Tensor q, Tensor k, Tensor v, Tensor mask = {},
                                       bool causal = false, int64_t heads = 1, float scale = 0.0f);

// Gain of the query and key projections' initialization. Measured over the lesson tasks at
// their own hyperparameters (tools/eval_seeds.sh) when it was chosen: neighbor-sum seeds 0–29
// reached mean validation accuracy 0.992 (min 0.76) with 0.5, 0.919 (min 0.21) with 1.0
// (today's figures: README, "Accuracy at the lesson's hyperparameters").
inline constexpr float kQueryKeyInitGain = 0.5f;

// Separate Q, K, V, O projections Linear(D, D) with bias, heads of D/H, scaled by √(D/H).
class MultiHeadAttention {
 public:
  MultiHeadAttention(Graph& g, const std::string& name, int64_t d_model, int64_t heads,
                     bool causal = false);
  // Self-attention.
  Tensor operator()(Tensor x, Tensor mask = {}) const { return (*this)(x, x, mask); }
  // Cross-attention: queries from x_q, keys and values from x_kv.
  Tensor operator()(Tensor x_q, Tensor x_kv, Tensor mask) const;
  // The attention probabilities of the last call, [batch, heads, Tq, Tk]: kept readable after
  // each run (like `model.attn.attn` in the lesson).
  Tensor attn() const { return *last_weights_; }

  Linear q, k, v, o;
  int64_t heads;
  bool causal;

 private:
  std::shared_ptr<Tensor> last_weights_ = std::make_shared<Tensor>();
};

// Mean cross-entropy of logits [..., C] against int32 targets [...]: a target of -1 is ignored
// (left out of the mean); any other value outside [0, C) is an error naming the input.
Tensor cross_entropy(Tensor logits, Tensor targets);

}  // namespace attnkit
