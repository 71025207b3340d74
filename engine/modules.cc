#include "engine/modules.h"
#include "engine/op_table.h"
#include "engine/passes.h"

#include <algorithm>
#include <cmath>
#include <memory>

namespace attnkit {

Embedding::Embedding(Graph& g, const std::string& name, int64_t vocab, int64_t dim)
    : weight(g.parameter(name + ".weight", {vocab, dim}, Init::kNormal, 1.0f)) {}

Tensor Embedding::operator()(Tensor ids) const {
  return weight.graph().apply(OpKind::kEmbedding, {weight.id(), ids.id()})[0];
}

Linear::Linear(Graph& g, const std::string& name, int64_t in, int64_t out, bool with_bias,
               float init_gain)
    : weight(g.parameter(name + ".weight", {in, out}, Init::kNormal,
                         static_cast<float>(init_gain / std::sqrt(static_cast<double>(in))))) {
  if (with_bias) bias = g.parameter(name + ".bias", {out}, Init::kZeros);
}

Tensor linear(Tensor x, Tensor weight, Tensor bias) {
  Graph& g = weight.graph();
  if (x.valid() && &x.graph() == &g && g.fold_embedding_projections() && x.desc().dtype == DType::kF32 &&
      weight.shape().rank == 2 && x.shape().last() == weight.shape()[0])
    return folded_linear(g, x.id(), weight, bias, 0);
  return plain_linear(g, x.id(), weight, bias);
}

Tensor Linear::operator()(Tensor x) const { return linear(x, weight, bias); }

Tensor ReLU::operator()(Tensor x) const { return x.graph().apply(OpKind::kRelu, {x.id()})[0]; }

LayerNorm::LayerNorm(Graph& g, const std::string& name, int64_t dim, float eps_)
    : gamma(g.parameter(name + ".weight", {dim}, Init::kOnes)),
      beta(g.parameter(name + ".bias", {dim}, Init::kZeros)),
      eps(eps_) {}

Tensor LayerNorm::operator()(Tensor x) const {
  NodeAttrs a;
  a.eps = eps;
  return x.graph().apply(OpKind::kLayerNorm, {x.id(), gamma.id(), beta.id()}, a)[0];
}

Attention scaled_dot_product_attention(Tensor q, Tensor k, Tensor v, Tensor mask, bool causal,
                                       int64_t heads, float scale) {
  Graph& g = q.graph();
  NodeAttrs a;
  a.heads = heads;
  a.causal = causal;
  if (heads < 1 || q.shape().rank < 1 || q.shape().last() % heads != 0)
    shape_error(g, "attention", std::to_string(heads) + " heads do not divide the dim", {q.id()});
  a.scale = scale > 0.0f ? scale
                         : static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.shape().last() / heads)));
  auto outs = g.apply(OpKind::kAttention, {q.id(), k.id(), v.id(), mask.valid() ? mask.id() : kNoTensor}, a);
  g.keep(outs[1]);
  return {outs[0], outs[1]};
}

MultiHeadAttention::MultiHeadAttention(Graph& g, const std::string& name, int64_t d_model,
                                       int64_t heads_, bool causal_)
    : q(g, name + ".q", d_model, d_model, true, kQueryKeyInitGain),
      k(g, name + ".k", d_model, d_model, true, kQueryKeyInitGain),
      v(g, name + ".v", d_model, d_model),
      o(g, name + ".o", d_model, d_model),
      heads(heads_),
      causal(causal_) {
  if (heads_ < 1 || d_model % heads_ != 0)
    throw ShapeError(name + ": " + std::to_string(heads_) + " heads do not divide d_model " +
                     std::to_string(d_model));
}

Tensor MultiHeadAttention::operator()(Tensor x_q, Tensor x_kv, Tensor mask) const {
  Attention a = scaled_dot_product_attention(q(x_q), k(x_kv), v(x_kv), mask, causal, heads);
  *last_weights_ = a.weights;
  return o(a.out);
}

Tensor cross_entropy(Tensor logits, Tensor targets) {
  Tensor loss = logits.graph().apply(OpKind::kCrossEntropy, {logits.id(), targets.id()})[0];
  logits.graph().keep(loss);
  return loss;
}

}  // namespace attnkit
