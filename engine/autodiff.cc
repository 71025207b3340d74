// Reverse-mode autodiff: backward(loss) walks the forward nodes in reverse and appends each
// op's backward nodes to the same graph. A tensor used several times gets its gradient
// summed: the first contribution overwrites, later ones add (decided here, at build time).
#include "engine/graph.h"
#include "engine/op_table.h"

namespace attnkit {

TensorId Autodiff::grad(TensorId t) const {
  return static_cast<size_t>(t) < grads_.size() ? grads_[static_cast<size_t>(t)] : kNoTensor;
}

bool Autodiff::needs_grad(TensorId t) const {
  return t != kNoTensor && static_cast<size_t>(t) < needs_.size() && needs_[static_cast<size_t>(t)];
}

Autodiff::Target Autodiff::contribute(TensorId t) {
  if (!needs_grad(t)) return {};
  if (grads_.size() < g_.tensors().size()) grads_.resize(g_.tensors().size(), kNoTensor);
  TensorId& slot = grads_[static_cast<size_t>(t)];
  const TensorDesc& d = g_.tensor(t);
  if (d.storage == Storage::kParam) {
    // Parameter gradients live in the flat gradient block, zeroed before each backward.
    if (slot == kNoTensor) {
      slot = g_.new_tensor("grad(" + d.name + ")", DType::kF32, d.shape, false, Storage::kParamGrad);
      TensorDesc& gd = g_.tensor(slot);
      gd.offset = d.offset;
      gd.param_index = d.param_index;
      g_.tensor(t).grad = slot;
    }
    return {slot, true};
  }
  if (slot == kNoTensor) {
    slot = g_.new_tensor("grad(" + d.name + ")", DType::kF32, d.shape, d.batched);
    g_.tensor(t).grad = slot;
    return {slot, false};
  }
  return {slot, true};
}

void Autodiff::pass_through(TensorId t, TensorId g) {
  if (!needs_grad(t)) return;
  if (grads_.size() < g_.tensors().size()) grads_.resize(g_.tensors().size(), kNoTensor);
  const TensorDesc& d = g_.tensor(t);
  if (grad(t) == kNoTensor && d.storage == Storage::kArena && d.shape == g_.tensor(g).shape &&
      d.batched == g_.tensor(g).batched) {
    grads_[static_cast<size_t>(t)] = g;  // the identity: share the gradient, no copy
    g_.tensor(t).grad = g;
    return;
  }
  const bool same = g_.tensor(t).shape == g_.tensor(g).shape;
  Node n;
  n.op = same ? OpKind::kAccumulate : OpKind::kBiasBackward;
  n.in = {g};
  n.backward = true;
  set_out_accumulate(n, 0, contribute(t));
  g_.add_node(std::move(n));
}

void Graph::backward(Tensor loss) {
  const TensorDesc& ld = tensor(loss.id());
  if (ld.dtype != DType::kF32 || ld.shape.numel() != 1 || ld.batched)
    throw ShapeError("backward: the loss must be a single float, got " + describe(loss.id()) +
                     " (backward(y, dy) seeds any tensor with its upstream gradient)");
  backward_from(loss, Tensor());
}

void Graph::backward(Tensor y, Tensor dy) {
  if (!dy.valid()) throw ShapeError("backward(y, dy): dy is not a tensor");
  const TensorDesc &yd = tensor(y.id()), &dd = tensor(dy.id());
  if (yd.dtype != DType::kF32) throw ShapeError("backward(y, dy): y must be float, got " + describe(y.id()));
  if (dd.storage != Storage::kInput || dd.dtype != DType::kF32 || dd.shape != yd.shape || dd.batched != yd.batched)
    throw ShapeError("backward(y, dy): dy must be a float input of y's shape, got y " + describe(y.id()) + ", dy " +
                     describe(dy.id()));
  backward_from(y, dy);
}

void Graph::backward_from(Tensor loss, Tensor dy) {
  if (has_backward()) throw ShapeError("backward: the graph already has its backward");
  forward_nodes_ = nodes_.size();
  if (dy.valid()) tensor(dy.id()).keep = true;  // read by the backward nodes, not by the forward
  if (fold_embedding_projections_) optimize_forward(loss.id());
  remove_dead_forward_nodes(loss.id());
  if (fold_embedding_projections_) {  // (P·V)·W + b → Σ_h P_h·(V_h·W_h) + b with V_h·W_h on the tables
    fold_attention_values();
    remove_dead_forward_nodes(loss.id());
  }
  if (index_attention_values_) {
    index_attention_values(loss.id());
    remove_dead_forward_nodes(loss.id());
  }
  forward_nodes_ = nodes_.size();

  Autodiff ad(*this);
  // Which tensors depend on a parameter or on an input with requires_grad.
  ad.needs().assign(tensors_.size(), false);
  for (size_t t = 0; t < tensors_.size(); ++t)
    if (tensors_[t].storage == Storage::kParam || tensors_[t].requires_grad) ad.needs()[t] = true;
  for (const Node& n : nodes_) {
    bool any = false;
    for (TensorId t : n.in) any = any || ad.needs_grad(t);
    if (any)
      for (TensorId t : n.out)
        if (t != kNoTensor) ad.needs()[static_cast<size_t>(t)] = true;
  }
  if (!ad.needs_grad(loss.id()))
    throw ShapeError("backward: " + describe(loss.id()) + " does not depend on any parameter or input with requires_grad");
  ad.needs().resize(tensors_.size(), false);

  // d loss / d loss = 1, or the upstream gradient dy (copied: later contributions add to it).
  Node seed;
  seed.op = dy.valid() ? OpKind::kAccumulate : OpKind::kOnes;
  if (dy.valid()) seed.in = {dy.id()};
  seed.backward = true;
  set_out_accumulate(seed, 0, ad.contribute(loss.id()));
  add_node(std::move(seed));

  for (size_t i = forward_nodes_; i-- > 0;) {
    const Node node = nodes_[i];  // copy: differentiate appends to nodes_
    bool has_grad = false;
    for (TensorId t : node.out) has_grad = has_grad || (t != kNoTensor && ad.grad(t) != kNoTensor);
    if (!has_grad) continue;
    const OpDef& def = op_def(node.op);
    if (!def.differentiate)
      throw ShapeError(std::string("backward: op ") + def.name + " has no gradient");
    def.differentiate(ad, node);
  }
  // The gradients asked for stay readable after each run.
  for (TensorDesc& d : tensors_)
    if ((d.requires_grad || d.retain_grad) && d.grad != kNoTensor) tensors_[static_cast<size_t>(d.grad)].keep = true;
  if (fuse_elementwise_) fuse_elementwise(loss.id());
  if (fuse_elementwise_) fuse_attention_addends(loss.id());
}

}  // namespace attnkit
