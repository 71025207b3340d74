// Graph ops of reductions (engine/functional.h): sum and mean over all elements (a 1-element
// unbatched tensor, e.g. a loss) or over the last dim, and their backwards. Each output
// element is summed in one fixed order by one thread (ops/math.h reduce_sum), so the results
// are the same bits for any thread count.
#include "engine/functional.h"
#include "engine/op_table.h"
#include "ops/math.h"

namespace attnkit {
namespace {

bool is_mean(OpKind k) { return k == OpKind::kMean || k == OpKind::kMeanLast || k == OpKind::kMeanBackward; }
bool is_last(OpKind k) { return k == OpKind::kSumLast || k == OpKind::kMeanLast; }

// The space of x's dims with the reduced output's strides: 0 along every dim (all), or
// contiguous over all but the last (last).
Strided reduce_space(const Shape& x, bool last) {
  Strided s;
  s.rank = x.rank;
  int64_t step = 1;
  for (int k = x.rank - 1; k >= 0; --k) {
    s.dims[k] = x.dims[k];
    if (last && k < x.rank - 1) {
      s.stride[0][k] = step;
      step *= x.dims[k];
    }
  }
  return coalesce(s, 1);
}

void reduce_build(Graph& g, Node& n) {
  const bool last = is_last(n.op);
  const char* op = is_mean(n.op) ? "mean" : "sum";
  if (n.in.size() != 1 || n.in[0] == kNoTensor) shape_error(g, op, "needs one tensor", {});
  const TensorDesc& x = g.tensor(n.in[0]);
  if (x.dtype != DType::kF32) shape_error(g, op, "needs a float tensor", n.in);
  const std::string name = std::string(op) + "(" + x.name + (last ? ", -1)" : ")");
  if (!last) {
    n.out = {g.new_tensor(name, DType::kF32, Shape{1}, false)};
    return;
  }
  if (x.batched && x.shape.rank == 1)
    shape_error(g, op, "the last dim of this tensor is the batch (sum over all elements instead)", n.in);
  Shape out;
  out.rank = x.shape.rank - 1;
  for (int i = 0; i < out.rank; ++i) out.dims[i] = x.shape.dims[i];
  if (out.rank == 0) out = Shape{1};  // a vector's sum: one element (not a 0-dim tensor)
  n.out = {g.new_tensor(name, DType::kF32, out, x.batched)};
}

void reduce_run(const RunContext& c, const Node& n, Slice s) {
  const bool last = is_last(n.op);
  const Shape x = c.shape(n.in[0]);
  const float divisor = !is_mean(n.op) ? 1.0f : static_cast<float>(last ? x.last() : x.numel());
  reduce_sum(reduce_space(x, last), c.f32(n.in[0]), 1.0f, divisor, c.f32(n.out[0]), n.accumulates(0), s);
}

void reduce_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = is_mean(n.op) ? OpKind::kMeanBackward : OpKind::kSumBackward;
  b.in = {ad.grad(n.out[0])};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

// in: dy (1 element, unbatched: of a sum over all; else over the last dim); out: dx, each
// element dy of its sum (divided by the count for a mean).
void reduce_backward_run(const RunContext& c, const Node& n, Slice s) {
  const TensorId dy = n.in[0];
  const Shape x = c.shape(n.out[0]), ys = c.shape(dy);
  // A 1-element dy: the sum of every element (when x has one row, the same as over its last
  // dim).
  const bool over_last = ys.numel() != 1;
  const Strided sp = reduce_space(x, over_last);
  const bool mean = is_mean(n.op);
  const float count = static_cast<float>(over_last ? x.last() : x.numel());
  elementwise(mean ? MathFn::kDivScalar : MathFn::kCopy, sp, c.f32(dy), nullptr, nullptr, count,
              c.f32(n.out[0]), n.accumulates(0), s);
}

void no_build(Graph& g, Node& n) {}

Tensor reduce(OpKind all, OpKind last, const Tensor& x, int dim) {
  const int rank = x.shape().rank;
  if (dim != -1 && dim != rank - 1)
    throw ShapeError(std::string(all == OpKind::kMean ? "mean" : "sum") + ": only the last dim (-1) can be reduced, got dim " +
                     std::to_string(dim) + " of " + x.graph().describe(x.id()));
  return x.graph().apply(last, {x.id()})[0];
}

}  // namespace

Tensor sum(const Tensor& x) { return x.graph().apply(OpKind::kSum, {x.id()})[0]; }
Tensor mean(const Tensor& x) { return x.graph().apply(OpKind::kMean, {x.id()})[0]; }
Tensor sum(const Tensor& x, int dim) { return reduce(OpKind::kSum, OpKind::kSumLast, x, dim); }
Tensor mean(const Tensor& x, int dim) { return reduce(OpKind::kMean, OpKind::kMeanLast, x, dim); }

extern const OpDef kSumOp = {"sum", reduce_build, reduce_run, reduce_differentiate, false};
extern const OpDef kMeanOp = {"mean", reduce_build, reduce_run, reduce_differentiate, false};
extern const OpDef kSumLastOp = {"sum_last", reduce_build, reduce_run, reduce_differentiate, false};
extern const OpDef kMeanLastOp = {"mean_last", reduce_build, reduce_run, reduce_differentiate, false};
extern const OpDef kSumBackwardOp = {"sum_backward", no_build, reduce_backward_run, nullptr, false};
extern const OpDef kMeanBackwardOp = {"mean_backward", no_build, reduce_backward_run, nullptr, false};

}  // namespace attnkit
