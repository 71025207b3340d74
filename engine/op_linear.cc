// Linear: y = x·W (+ b) with W stored [in, out] (the course's layout), x [..., in].
#include "engine/op_table.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"

namespace attnkit {
namespace {

// x·W + b and its backward go through sgemm on the whole product (the bias added in the
// GEMM's store), so every element is computed the same way whatever the thread count.
// in: x, W, b (b may be absent).
void linear_build(Graph& g, Node& n) {
  if (n.in.size() == 2) n.in.push_back(kNoTensor);
  if (n.in.size() != 3) shape_error(g, "linear", "needs x, weight and an optional bias", {});
  const TensorDesc& x = g.tensor(n.in[0]);
  const TensorDesc& w = g.tensor(n.in[1]);
  if (x.dtype != DType::kF32 || w.dtype != DType::kF32) shape_error(g, "linear", "needs float tensors", n.in);
  if (w.shape.rank != 2 || x.shape.last() != w.shape[0])
    shape_error(g, "linear", "x's last dim must equal weight's first (weight is [in, out])", {n.in[0], n.in[1]});
  if (n.in[2] != kNoTensor) {
    const TensorDesc& b = g.tensor(n.in[2]);
    if (b.dtype != DType::kF32 || b.shape.rank != 1 || b.shape[0] != w.shape[1])
      shape_error(g, "linear", "the bias must be float [out]", {n.in[1], n.in[2]});
  }
  const int64_t heads = n.attrs.heads;
  if (heads < 1 || x.shape.last() % heads != 0)
    shape_error(g, "linear", "heads must be at least 1 and divide x's last dim", {n.in[0]});
  if (heads > 1 && (n.attrs.relu || n.attrs.relu_last || n.in.size() > 3))
    shape_error(g, "linear", "a per-head product has no fused ReLU or addend", n.in);
  Shape ys = x.shape;
  ys[-1] = heads * w.shape[1];
  n.out = {g.new_tensor(w.name + "(" + x.name + ")", DType::kF32, ys, x.batched)};
}

// attrs.heads = H > 1: W's rows and x's columns in H blocks of k = in / H, the output's columns
// in H blocks of W's width N: y[:, h·N + j] = Σ_c x[:, h·k + c]·W[h·k + c, j] (+ b[j] for h = 0).
// (Graph passes make these for the heads of a folded attention's values, whose products would
// otherwise be a narrow of x and of W, a Linear and a concat per head.) Each block is one
// product with strides; its slices split the block's rows (no task counter: several per node).
void heads_linear_run(const RunContext& c, const Node& n, Slice s) {
  const Shape xs = c.shape(n.in[0]);
  const int64_t heads = n.attrs.heads, rows = xs.rows(), k = xs.last() / heads, out = c.shape(n.in[1])[1];
  const float *x = c.f32(n.in[0]), *w = c.f32(n.in[1]);
  float* y = c.f32(n.out[0]);
  const Slice ss{s.index, s.count, nullptr, s.bf16};
  for (int64_t h = 0; h < heads; ++h) {
    GemmEpilogue e;
    e.bias = h == 0 && n.in[2] != kNoTensor ? c.f32(n.in[2]) : nullptr;
    sgemm_epilogue_slice(false, false, rows, out, k, 1.0f, x + h * k, heads * k, w + h * k * out, out,
                         n.accumulates(0) ? 1.0f : 0.0f, y + h * out, heads * out, e, ss);
  }
}

void linear_run(const RunContext& c, const Node& n, Slice s) {
  if (n.attrs.heads > 1) return heads_linear_run(c, n, s);
  const Shape xs = c.shape(n.in[0]);
  const int64_t rows = xs.rows(), in = xs.last(), out = c.shape(n.in[1])[1];
  GemmEpilogue e;
  e.bias = n.in[2] != kNoTensor ? c.f32(n.in[2]) : nullptr;
  e.relu = n.attrs.relu;  // y = max(x·W + b, 0) (a fused ReLU, see Graph::fuse_elementwise)
  if (n.in.size() > 3) e.addend = c.f32(n.in[3]), e.ld_addend = out;  // a fused residual sum
  e.relu_last = n.attrs.relu_last;  // max(x·W + b + r, 0)
  e.b_stamp = c.constant_stamp(n.in[1]);  // W packed once per chunked run (bf16)
  // Accumulating (inference graphs, Graph::fuse_residual_relu): y = relu(x·W + y + b), y
  // written before by a lookup.
  sgemm_epilogue_slice(false, false, rows, out, in, 1.0f, c.f32(n.in[0]), in, c.f32(n.in[1]),
                       out, n.accumulates(0) ? 1.0f : 0.0f, c.f32(n.out[0]), out, e, s);
}

// Backward node: in (x, W, dy); out (dx, dW, db), each possibly absent. The three write
// disjoint memory, so they share one node (no barrier between them).
void linear_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kLinearBackward;
  b.in = {n.in[0], n.in[1], ad.grad(n.out[0])};
  b.backward = true;
  b.attrs.heads = n.attrs.heads;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  set_out_accumulate(b, 1, ad.contribute(n.in[1]));
  set_out_accumulate(b, 2, n.in[2] == kNoTensor ? Autodiff::Target{} : ad.contribute(n.in[2]));
  ad.graph().add_node(std::move(b));
}

// The backward of heads_linear_run, block by block: dx_h = dy_h·W_hᵀ, dW_h = x_hᵀ·dy_h, and db the
// column sums of head 0's block of dy.
void heads_linear_backward_run(const RunContext& c, const Node& n, Slice s) {
  const Shape xs = c.shape(n.in[0]);
  const int64_t heads = n.attrs.heads, rows = xs.rows(), k = xs.last() / heads, out = c.shape(n.in[1])[1];
  const float *x = c.f32(n.in[0]), *w = c.f32(n.in[1]), *dy = c.f32(n.in[2]);
  const int64_t ldx = heads * k, ldy = heads * out;
  const Slice ss{s.index, s.count, nullptr, s.bf16};
  for (int64_t h = 0; h < heads; ++h) {
    if (n.out[0] != kNoTensor)
      sgemm_epilogue_slice(false, true, rows, k, out, 1.0f, dy + h * out, ldy, w + h * k * out, out,
                           n.accumulates(0) ? 1.0f : 0.0f, c.f32(n.out[0]) + h * k, ldx, GemmEpilogue{}, ss);
    if (n.out[1] != kNoTensor)
      sgemm_epilogue_slice(true, false, k, out, rows, 1.0f, x + h * k, ldx, dy + h * out, ldy,
                           n.accumulates(1) ? 1.0f : 0.0f, c.f32(n.out[1]) + h * k * out, out, GemmEpilogue{}, ss);
  }
  if (n.out.size() > 2 && n.out[2] != kNoTensor && s.index == 0) {  // rows ldy apart: one at a time, in order
    float* db = c.f32(n.out[2]);
    for (int64_t r = 0; r < rows; ++r) bias_backward(dy + r * ldy, db, 1, out, Slice{}, r > 0 || n.accumulates(2));
  }
}

void linear_backward_run(const RunContext& c, const Node& n, Slice s) {
  if (n.attrs.heads > 1) return heads_linear_backward_run(c, n, s);
  const Shape xs = c.shape(n.in[0]);
  const int64_t rows = xs.rows(), in = xs.last(), out = c.shape(n.in[1])[1];
  const float *x = c.f32(n.in[0]), *w = c.f32(n.in[1]), *dy = c.f32(n.in[2]);
  // In the forward pass y = x·W, so dx = dy·Wᵀ and dW = xᵀ·dy.
  // With attrs.relu, x is a ReLU's output and out[0] the gradient of its input: dx where
  // x > 0 (a fused relu_backward, see Graph::fuse_elementwise).
  if (n.out[0] != kNoTensor) {
    GemmEpilogue e;
    if (n.attrs.relu) e.mask = x, e.ldm = in;
    e.b_stamp = c.constant_stamp(n.in[1]);
    sgemm_epilogue_slice(false, true, rows, in, out, 1.0f, dy, out, w, out,
                         n.accumulates(0) ? 1.0f : 0.0f, c.f32(n.out[0]), in, e, s);
  }
  // db = Σ_rows dy: summed while the dW product packs dy when that product is on the packed
  // path (bitwise the same sums), else a pass of its own.
  const bool db = n.out.size() > 2 && n.out[2] != kNoTensor;
  const bool db_fused = db && n.out[1] != kNoTensor && sgemm_fuses_colsum(false, in, out, rows);
  if (n.out[1] != kNoTensor) {
    GemmEpilogue e;
    if (db_fused) e.colsum = c.f32(n.out[2]), e.colsum_accumulate = n.accumulates(2);
    sgemm_epilogue_slice(true, false, in, out, rows, 1.0f, x, in, dy, out,
                         n.accumulates(1) ? 1.0f : 0.0f, c.f32(n.out[1]), out, e,
                         s.with_counter(1));  // its own task counter
  }
  if (db && !db_fused) bias_backward(dy, c.f32(n.out[2]), rows, out, s, n.accumulates(2));
}

void no_build(Graph&, Node&) {}

}  // namespace

extern const OpDef kLinearOp = {"linear", linear_build, linear_run, linear_differentiate, false};
extern const OpDef kLinearBackwardOp = {"linear_backward", no_build, linear_backward_run, nullptr, false};

}  // namespace attnkit
