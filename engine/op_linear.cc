// Matmul by a weight: y = x·W with W stored [in, out] (the course's layout), x [..., in].
#include "engine/op_table.h"
#include "ops/gemm.h"

namespace attnkit {
namespace {

// x·W and its backward go through sgemm_slice on the whole product, so every element is
// computed the same way whatever the thread count. The bias is a separate broadcast add
// (see Linear in modules.cc), which runs in place on this op's output.
void linear_build(Graph& g, Node& n) {
  if (n.in.size() != 2) shape_error(g, "matmul", "needs x and weight", {});
  const TensorDesc& x = g.tensor(n.in[0]);
  const TensorDesc& w = g.tensor(n.in[1]);
  if (x.dtype != DType::kF32 || w.dtype != DType::kF32) shape_error(g, "matmul", "needs float tensors", n.in);
  if (w.shape.rank != 2 || x.shape.last() != w.shape[0])
    shape_error(g, "matmul", "x's last dim must equal weight's first (weight is [in, out])", n.in);
  Shape ys = x.shape;
  ys[-1] = w.shape[1];
  n.out = {g.new_tensor(w.name + "(" + x.name + ")", DType::kF32, ys, x.batched)};
}

void linear_run(const RunContext& c, const Node& n, Slice s) {
  const Shape xs = c.shape(n.in[0]);
  const int64_t rows = xs.rows(), in = xs.last(), out = c.shape(n.in[1])[1];
  sgemm_slice(false, false, rows, out, in, 1.0f, c.f32(n.in[0]), in, c.f32(n.in[1]), out, 0.0f,
              c.f32(n.out[0]), out, s);
}

// Backward node: in (x, W, dy); out (dx, dW), each possibly absent.
void linear_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kLinearBackward;
  b.in = {n.in[0], n.in[1], ad.grad(n.out[0])};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  set_out_accumulate(b, 1, ad.contribute(n.in[1]));
  ad.graph().add_node(std::move(b));
}

void linear_backward_run(const RunContext& c, const Node& n, Slice s) {
  const Shape xs = c.shape(n.in[0]);
  const int64_t rows = xs.rows(), in = xs.last(), out = c.shape(n.in[1])[1];
  const float *x = c.f32(n.in[0]), *w = c.f32(n.in[1]), *dy = c.f32(n.in[2]);
  // In the forward pass y = x·W, so dx = dy·Wᵀ and dW = xᵀ·dy.
  if (n.out[0] != kNoTensor)
    sgemm_slice(false, true, rows, in, out, 1.0f, dy, out, w, out, n.accumulates(0) ? 1.0f : 0.0f,
                c.f32(n.out[0]), in, s);
  if (n.out[1] != kNoTensor)
    sgemm_slice(true, false, in, out, rows, 1.0f, x, in, dy, out, n.accumulates(1) ? 1.0f : 0.0f,
                c.f32(n.out[1]), out, s);
}

void no_build(Graph&, Node&) {}

}  // namespace

extern const OpDef kLinearOp = {"matmul", linear_build, linear_run, linear_differentiate, false};
extern const OpDef kLinearBackwardOp = {"linear_backward", no_build, linear_backward_run, nullptr, false};

}  // namespace attnkit
