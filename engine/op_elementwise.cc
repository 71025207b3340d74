// Graph ops over elements: add (with broadcast over leading dims), ReLU, gradient
// accumulation, the broadcast-add backward (column sums) and the loss seed.
#include <cstring>

#include "engine/op_table.h"
#include "ops/elementwise.h"

namespace attnkit {
namespace {

// ---- add: y = a + b; b may be a's trailing dims (broadcast over the leading ones) ----
bool is_broadcast(const Graph& g, TensorId a, TensorId b) {
  const TensorDesc &da = g.tensor(a), &db = g.tensor(b);
  if (da.shape == db.shape && da.batched == db.batched) return false;
  if (db.batched || db.shape.rank > da.shape.rank) return true;  // checked in build
  return true;
}

void add_build(Graph& g, Node& n) {
  if (n.in.size() != 2 || n.in[0] == kNoTensor || n.in[1] == kNoTensor)
    shape_error(g, "add", "needs two tensors", {});
  // Keep the full-shape tensor first.
  if (g.tensor(n.in[0]).shape.rank < g.tensor(n.in[1]).shape.rank) std::swap(n.in[0], n.in[1]);
  const TensorDesc &a = g.tensor(n.in[0]), &b = g.tensor(n.in[1]);
  if (a.dtype != DType::kF32 || b.dtype != DType::kF32) shape_error(g, "add", "needs float tensors", n.in);
  if (is_broadcast(g, n.in[0], n.in[1])) {
    bool ok = !b.batched && b.shape.rank <= a.shape.rank;
    for (int i = 1; ok && i <= b.shape.rank; ++i) ok = b.shape[-i] == a.shape[-i];
    if (!ok) shape_error(g, "add", "shapes do not match or broadcast", n.in);
  }
  n.out = {g.new_tensor(a.name + "+" + b.name, DType::kF32, a.shape, a.batched)};
}

void add_run(const RunContext& c, const Node& n, Slice s) {
  const Shape sa = c.shape(n.in[0]), sb = c.shape(n.in[1]);
  if (sa == sb) {
    add_forward(c.f32(n.in[0]), c.f32(n.in[1]), c.f32(n.out[0]), sa.numel(), s);
  } else {
    const int64_t cols = sb.numel();
    bias_add_forward(c.f32(n.in[0]), c.f32(n.in[1]), c.f32(n.out[0]), sa.numel() / cols, cols, s);
  }
}

void add_differentiate(Autodiff& ad, const Node& n) {
  const TensorId gy = ad.grad(n.out[0]);
  // b first: a may take gy itself as its gradient, and later contributions then add into it.
  ad.pass_through(n.in[1], gy);
  ad.pass_through(n.in[0], gy);
}

// ---- relu ----
void relu_build(Graph& g, Node& n) {
  const TensorDesc& x = g.tensor(n.in.at(0));
  if (x.dtype != DType::kF32) shape_error(g, "relu", "needs a float tensor", n.in);
  n.out = {g.new_tensor("relu(" + x.name + ")", DType::kF32, x.shape, x.batched)};
}

void relu_run(const RunContext& c, const Node& n, Slice s) {
  relu_forward(c.f32(n.in[0]), c.f32(n.out[0]), c.shape(n.in[0]).numel(), s);
}

void relu_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kReluBackward;
  b.in = {n.out[0], ad.grad(n.out[0])};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

// in: y, dy; out: dx.
void relu_backward_run(const RunContext& c, const Node& n, Slice s) {
  relu_backward(c.f32(n.in[0]), c.f32(n.in[1]), c.f32(n.out[0]), c.shape(n.in[0]).numel(),
                n.accumulates(0), s);
}

// ---- accumulate: out (+)= in ----
void accumulate_run(const RunContext& c, const Node& n, Slice s) {
  axpy(1.0f, c.f32(n.in[0]), c.f32(n.out[0]), c.shape(n.in[0]).numel(), n.accumulates(0), s);
}

// ---- bias backward: out[cols] (+)= Σ_rows in[rows, cols] ----
void bias_backward_run(const RunContext& c, const Node& n, Slice s) {
  const int64_t cols = c.shape(n.out[0]).numel();
  const int64_t rows = c.shape(n.in[0]).numel() / cols;
  bias_backward(c.f32(n.in[0]), c.f32(n.out[0]), rows, cols, s, n.accumulates(0));
}

// ---- ones: the seed d loss / d loss ----
void ones_run(const RunContext& c, const Node& n, Slice s) {
  if (s.index == 0) {
    float* p = c.f32(n.out[0]);
    p[0] = n.accumulates(0) ? p[0] + 1.0f : 1.0f;
  }
}

void no_build(Graph& g, Node& n) {}

}  // namespace

extern const OpDef kAddOp = {"add", add_build, add_run, add_differentiate, true};
extern const OpDef kReluOp = {"relu", relu_build, relu_run, relu_differentiate, true};
extern const OpDef kReluBackwardOp = {"relu_backward", no_build, relu_backward_run, nullptr, true};
extern const OpDef kAccumulateOp = {"accumulate", no_build, accumulate_run, nullptr, false};
extern const OpDef kBiasBackwardOp = {"bias_backward", no_build, bias_backward_run, nullptr, false};
extern const OpDef kOnesOp = {"ones", no_build, ones_run, nullptr, false};

}  // namespace attnkit
