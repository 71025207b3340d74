#include "engine/modules.h"
#include "engine/op_table.h"

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

namespace {

Tensor plain_linear(Graph& g, TensorId x, const Tensor& w, const Tensor& b) {
  return g.apply(OpKind::kLinear, {x, w.id(), b.valid() ? b.id() : kNoTensor})[0];
}

// Rows the product x·W costs when folded into x's embedding tables (at most x's own rows).
int64_t folded_rows(const Graph& g, TensorId x, int depth) {
  const TensorDesc& d = g.tensor(x);
  const int64_t rows = d.shape.rows();
  const int64_t p = g.producer(x);
  if (p < 0 || depth > 8) return rows;
  const Node& n = g.nodes()[static_cast<size_t>(p)];
  if (n.op == OpKind::kEmbedding) {
    const int64_t addend = n.in.size() > 2 && n.in[2] != kNoTensor ? folded_rows(g, n.in[2], depth + 1) : 0;
    return std::min(rows, g.tensor(n.in[0]).shape[0] + addend);
  }
  if (n.op == OpKind::kAdd)
    return std::min(rows, folded_rows(g, n.in[0], depth + 1) + folded_rows(g, n.in[1], depth + 1));
  return rows;
}

Tensor folded_linear(Graph& g, TensorId x, const Tensor& w, const Tensor& b, int depth) {
  if (folded_rows(g, x, depth) >= g.tensor(x).shape.rows()) return plain_linear(g, x, w, b);
  const Node n = g.nodes()[static_cast<size_t>(g.producer(x))];  // a copy: apply() appends
  if (n.op == OpKind::kEmbedding) {  // table[ids]·W + b = (table·W + b)[ids] (+ addend·W)
    const Tensor projected = plain_linear(g, n.in[0], w, b);
    const TensorId addend = n.in[2] != kNoTensor ? folded_linear(g, n.in[2], w, Tensor(), depth + 1).id() : kNoTensor;
    return g.apply(OpKind::kEmbedding, {projected.id(), n.in[1], addend})[0];
  }
  // (a + c)·W + b = (a·W + b) + c·W; a is the full-shape operand, c may broadcast.
  const TensorDesc& c = g.tensor(n.in[1]);
  const int64_t pa = g.producer(n.in[0]);
  if (!c.batched && pa >= 0 && g.nodes()[static_cast<size_t>(pa)].op == OpKind::kEmbedding &&
      g.nodes()[static_cast<size_t>(pa)].in[2] == kNoTensor &&
      folded_rows(g, n.in[0], depth + 1) < g.tensor(n.in[0]).shape.rows()) {
    // a = table[ids]: one lookup adds c·W on the way, (table·W + b)[ids] + c·W.
    const Node lookup = g.nodes()[static_cast<size_t>(pa)];
    const Tensor projected = plain_linear(g, lookup.in[0], w, b);
    const Tensor addend = folded_linear(g, n.in[1], w, Tensor(), depth + 1);
    return g.apply(OpKind::kEmbedding, {projected.id(), lookup.in[1], addend.id()})[0];
  }
  return folded_linear(g, n.in[0], w, b, depth + 1) + folded_linear(g, n.in[1], w, Tensor(), depth + 1);
}

}  // namespace

Tensor linear(Tensor x, Tensor weight, Tensor bias) {
  Graph& g = weight.graph();
  if (x.valid() && &x.graph() == &g && g.fold_embedding_projections() && x.desc().dtype == DType::kF32 &&
      weight.shape().rank == 2 && x.shape().last() == weight.shape()[0])
    return folded_linear(g, x.id(), weight, bias, 0);
  return plain_linear(g, x.id(), weight, bias);
}

Tensor Linear::operator()(Tensor x) const { return linear(x, weight, bias); }

int64_t Graph::uses(TensorId t, TensorId loss) const {
  int64_t n = tensor(t).keep || t == loss ? 1 : 0;
  for (const Node& node : nodes_)
    for (TensorId in : node.in) n += in == t;
  return n;
}

// See graph.h. The lessons' head(h + attn(h)): attn(h) = a·Wo + bo is used only by the sum,
// and the sum only by head.0, so head.0(h + attn(h)) = h·W (folded into the lookup tables) +
// a·(Wo·W) + (bo·W + b): the output projection's batch × T rows disappear, forward and
// backward, for a D × D × out product of the weights.
void Graph::optimize_forward(TensorId loss) {
  auto uses = [&](TensorId t) { return this->uses(t, loss); };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node lin = nodes_[i];
    if (lin.op != OpKind::kLinear) continue;
    const TensorId x = lin.in[0];
    const int64_t px = producer(x);
    if (px < 0 || nodes_[static_cast<size_t>(px)].op != OpKind::kAdd || uses(x) != 1) continue;
    const Node sum = nodes_[static_cast<size_t>(px)];
    // Which operand is a Linear's output used only here (c = a·Wc + bc), which a lookup sum (p)?
    TensorId c = kNoTensor, p = kNoTensor;
    for (int k = 0; k < 2 && c == kNoTensor; ++k) {
      const TensorId cand = sum.in[static_cast<size_t>(k)], other = sum.in[static_cast<size_t>(1 - k)];
      const int64_t pc = producer(cand);
      if (pc < 0 || nodes_[static_cast<size_t>(pc)].op != OpKind::kLinear || uses(cand) != 1) continue;
      if (tensor(cand).shape != tensor(x).shape || tensor(other).shape != tensor(x).shape) continue;
      const TensorId a = nodes_[static_cast<size_t>(pc)].in[0];
      if (tensor(a).shape.last() > tensor(x).shape.last()) continue;  // a·(Wc·W) must not cost more
      if (folded_rows(*this, other, 0) >= tensor(other).shape.rows()) continue;
      c = cand, p = other;
    }
    if (c == kNoTensor) continue;
    const Node proj = nodes_[static_cast<size_t>(producer(c))];
    const Tensor w(this, lin.in[1]), b(this, lin.in[2]), wc(this, proj.in[1]), bc(this, proj.in[2]);
    const size_t first_new = nodes_.size();
    const Tensor w_merged = plain_linear(*this, wc.id(), w, Tensor());           // Wc·W
    const Tensor b_merged = bc.valid() ? plain_linear(*this, bc.id(), w, b) : b;  // bc·W + b
    // The lookup first: the product ya then runs after it and can add it in its store
    // (see fuse_elementwise).
    const Tensor yp = folded_linear(*this, p, w, Tensor(), 0);
    const Tensor ya = plain_linear(*this, proj.in[0], w_merged, b_merged);
    (void)(ya + yp);  // the last new node: its output becomes the old node's below
    // The new nodes take the old node's place and write its output tensor.
    std::vector<Node> added(nodes_.begin() + static_cast<std::ptrdiff_t>(first_new), nodes_.end());
    nodes_.resize(first_new);
    added.back().out[0] = lin.out[0];
    nodes_.erase(nodes_.begin() + static_cast<std::ptrdiff_t>(i));
    nodes_.insert(nodes_.begin() + static_cast<std::ptrdiff_t>(i), added.begin(), added.end());
    i += added.size() - 1;
    forward_nodes_ = nodes_.size();
  }
}

void Graph::remove_dead_forward_nodes(TensorId loss) {
  std::vector<bool> live(tensors_.size(), false);
  live[static_cast<size_t>(loss)] = true;
  for (size_t t = 0; t < tensors_.size(); ++t) live[t] = live[t] || tensors_[t].keep;
  std::vector<bool> keep_node(nodes_.size(), false);
  for (size_t i = nodes_.size(); i-- > 0;) {
    const Node& n = nodes_[i];
    for (TensorId o : n.out) keep_node[i] = keep_node[i] || (o != kNoTensor && live[static_cast<size_t>(o)]);
    if (!keep_node[i]) continue;
    for (TensorId in : n.in)
      if (in != kNoTensor) live[static_cast<size_t>(in)] = true;
  }
  size_t j = 0;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (keep_node[i]) {
      if (i != j) nodes_[j] = std::move(nodes_[i]);  // (a self-move would empty the node)
      ++j;
    }
  nodes_.resize(j);
  forward_nodes_ = nodes_.size();
}

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
