// mse_loss (engine/functional.h): the mean of (a − b)² over all elements, and its gradients.
#include "engine/functional.h"
#include "engine/op_table.h"

namespace attnkit {
namespace {

// in: a, b; out: the loss [1] (unbatched).
void mse_build(Graph& g, Node& n) {
  if (n.in.size() != 2 || n.in[0] == kNoTensor || n.in[1] == kNoTensor) shape_error(g, "mse_loss", "needs a and b", {});
  const TensorDesc &a = g.tensor(n.in[0]), &b = g.tensor(n.in[1]);
  if (a.dtype != DType::kF32 || b.dtype != DType::kF32) shape_error(g, "mse_loss", "a and b must be float", n.in);
  if (a.shape != b.shape || a.batched != b.batched)
    shape_error(g, "mse_loss", "a and b must have the same shape (and both be batched or not)", n.in);
  n.out = {g.new_tensor("mse_loss(" + a.name + ", " + b.name + ")", DType::kF32, {1}, false)};
}

void mse_run(const RunContext& c, const Node& n, Slice s) {
  // A sum over all elements: one thread does it, in order and in double, so the loss is the
  // same for any thread count.
  if (s.index != 0) return;
  const float *a = c.f32(n.in[0]), *b = c.f32(n.in[1]);
  const int64_t count = c.shape(n.in[0]).numel();
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sum += d * d;
  }
  c.f32(n.out[0])[0] = static_cast<float>(sum / static_cast<double>(count));
}

// Backward node: in (a, b, dloss); out (da, db) = ±2·dloss·(a − b)/count.
void mse_differentiate(Autodiff& ad, const Node& n) {
  Node bw;
  bw.op = OpKind::kMseLossBackward;
  bw.in = {n.in[0], n.in[1], ad.grad(n.out[0])};
  bw.backward = true;
  bw.out.assign(2, kNoTensor);
  set_out_accumulate(bw, 0, ad.contribute(n.in[0]));
  set_out_accumulate(bw, 1, ad.contribute(n.in[1]));
  if (bw.out[0] != kNoTensor || bw.out[1] != kNoTensor) ad.graph().add_node(std::move(bw));
}

void mse_backward_run(const RunContext& c, const Node& n, Slice s) {
  const float *a = c.f32(n.in[0]), *b = c.f32(n.in[1]);
  const int64_t count = c.shape(n.in[0]).numel();
  const float k = static_cast<float>(2.0 * static_cast<double>(c.f32(n.in[2])[0]) / static_cast<double>(count));
  const auto [e0, e1] = slice_range(count, s);
  for (int side = 0; side < 2; ++side) {
    if (n.out[side] == kNoTensor) continue;
    float* d = c.f32(n.out[side]);
    const float ks = side == 0 ? k : -k;
    if (n.accumulates(side)) {
      for (int64_t i = e0; i < e1; ++i) d[i] += ks * (a[i] - b[i]);
    } else {
      for (int64_t i = e0; i < e1; ++i) d[i] = ks * (a[i] - b[i]);
    }
  }
}

void no_build(Graph&, Node&) {}

}  // namespace

extern const OpDef kMseLossOp = {"mse_loss", mse_build, mse_run, mse_differentiate, false};
extern const OpDef kMseLossBackwardOp = {"mse_loss_backward", no_build, mse_backward_run, nullptr, false};

Tensor mse_loss(Tensor a, Tensor b) {
  if (!a.valid() || !b.valid()) throw ShapeError("mse_loss: needs a and b");
  if (&a.graph() != &b.graph()) throw ShapeError("mse_loss: tensors belong to different graphs");
  return a.graph().apply(OpKind::kMseLoss, {a.id(), b.id()})[0];
}

}  // namespace attnkit
