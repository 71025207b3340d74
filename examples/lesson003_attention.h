// Lesson 003's attention, line by line, in attnkit's primitive ops (engine/functional.h). The
// lesson writes, in PyTorch:
//
//   def scaled_dot_product_attention(Q, K, V, mask=None):
//       scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(Q.size(-1))
//       if mask is not None:
//           scores = scores.masked_fill(mask == 0, float('-inf'))
//       attention_weights = F.softmax(scores, dim=-1)
//       output = torch.matmul(attention_weights, V)
//       return output, attention_weights
//
//   class MultiHeadAttention(nn.Module):        # forward(Q, K, V):
//       Q = self.W_q(Q).view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)  # and K, V
//       scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
//       attention = F.softmax(scores, dim=-1)
//       context = torch.matmul(attention, V)
//       context = context.transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)
//       output = self.W_o(context)
//
// The fused attnkit::MultiHeadAttention computes the same in one node per direction; this one
// is for reading, changing and differentiating anywhere (tests/test_lesson003.cc shows both
// agree to 1e-5). The mask here follows attnkit: a uint8 tensor, non-zero = forbidden (the
// lesson's `mask == 0`).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <attnkit/attnkit.h>

namespace lesson003 {

using attnkit::Graph;
using attnkit::Linear;
using attnkit::Tensor;

struct Attended {
  Tensor output, attention_weights;
};

inline Attended scaled_dot_product_attention(Tensor Q, Tensor K, Tensor V, Tensor mask = {}) {
  // Step 1: score = Q · Kᵀ / √d_k
  Tensor scores = attnkit::matmul(Q, attnkit::transpose(K, -2, -1)) / std::sqrt(static_cast<float>(Q.shape().last()));
  // Masking (optional, e.g. causal)
  if (mask.valid()) scores = attnkit::masked_fill(scores, mask, -INFINITY);
  // Step 2: attention weights = softmax(scores)
  Tensor attention_weights = attnkit::softmax(scores);
  // Step 3: output = weights · V
  Tensor output = attnkit::matmul(attention_weights, V);
  return {output, attention_weights};
}

class MultiHeadAttention {
 public:
  // The parameters are named and initialized like attnkit::MultiHeadAttention's (name.q, name.k,
  // name.v, name.o).
  MultiHeadAttention(Graph& g, const std::string& name, int64_t d_model, int64_t num_heads)
      : num_heads(num_heads), d_model(d_model), d_k(d_model / num_heads),
        W_q(g, name + ".q", d_model, d_model, true, attnkit::kQueryKeyInitGain),
        W_k(g, name + ".k", d_model, d_model, true, attnkit::kQueryKeyInitGain),
        W_v(g, name + ".v", d_model, d_model), W_o(g, name + ".o", d_model, d_model) {}

  // Q, K, V: [batch, seq_len, d_model] (batched tensors); mask broadcasts over batch and heads.
  Tensor operator()(Tensor Q, Tensor K, Tensor V, Tensor mask = {}) {
    const int64_t batch_size = Q.shape()[0];
    // Linear projections
    Q = W_q(Q);  // (batch, seq_len, d_model)
    K = W_k(K);
    V = W_v(V);
    // Split into num_heads: (batch, num_heads, seq_len, d_k)
    Q = attnkit::transpose(attnkit::view(Q, {batch_size, -1, num_heads, d_k}), 1, 2);
    K = attnkit::transpose(attnkit::view(K, {batch_size, -1, num_heads, d_k}), 1, 2);
    V = attnkit::transpose(attnkit::view(V, {batch_size, -1, num_heads, d_k}), 1, 2);
    // Attention for every head
    Attended a = lesson003::scaled_dot_product_attention(Q, K, V, mask);  // (qualified: attnkit has a fused one)
    attention = a.attention_weights;
    // Heads back together: (batch, seq_len, d_model)
    Tensor context = attnkit::view(attnkit::transpose(a.output, 1, 2), {batch_size, -1, d_model});
    // Final linear projection
    return W_o(context);
  }

  int64_t num_heads, d_model, d_k;
  Linear W_q, W_k, W_v, W_o;
  Tensor attention;  // the weights of the last call, [batch, num_heads, seq_len, seq_len]
};

// Lesson 004's training loop on a built graph with inputs ids, targets [T] and output logits
// [T, classes]: Adam (lr 0.01), `epochs` epochs over data.train reshuffled by Rng(1), batches
// of the graph's max batch; returns the accuracy over data.val's positions.
inline double train_and_validate(attnkit::Executor& ex, Tensor ids, Tensor targets, Tensor logits,
                                 const attnkit::TaskData& data, int64_t classes, int epochs = 8) {
  const int64_t B = ex.graph().max_batch(), T = data.train.seq_len;
  attnkit::Adam adam(ex.param_count(), {0.01f});
  attnkit::Rng order(1);
  std::vector<int64_t> perm(static_cast<size_t>(data.train.size));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    order.shuffle(perm.data(), data.train.size);
    for (int64_t start = 0; start < data.train.size; start += B) {
      const int64_t n = std::min(B, data.train.size - start);
      ex.set_batch(n);
      for (int64_t r = 0; r < n; ++r) {
        const int64_t row = perm[static_cast<size_t>(start + r)];
        std::memcpy(ex.i32(ids.id()) + r * T, data.train.tokens(row), static_cast<size_t>(T) * 4);
        std::memcpy(ex.i32(targets.id()) + r * T, data.train.targets(row), static_cast<size_t>(T) * 4);
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
      const float* row = ex.f32(logits.id()) + r * classes;
      correct += std::max_element(row, row + classes) - row == data.val.targets(start)[r];
      ++total;
    }
  }
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

}  // namespace lesson003
