// Shape ops: transpose (a copy), reshape/view (free when the planner can place the result in
// its input's buffer, else a copy), concat, and split/narrow (copies of slices along an axis).
// The batch dim of a batched tensor stays its dim 0: these ops never move, merge or cut it.
#include <algorithm>
#include <cstring>

#include "engine/functional.h"
#include "engine/op_table.h"

namespace attnkit {
namespace {

// The axis an op works on (transpose: the lower of its two), from NodeAttrs::axis0.
int low_axis(const Node& n) { return n.attrs.axis0; }

int64_t prod(const Shape& s, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= s.dims[i];
  return p;
}

// An axis in [-rank, rank) as an index in [0, rank); -1 when out of range.
int normalize_axis(int axis, int rank) {
  if (axis < -rank || axis >= rank) return -1;
  return axis < 0 ? axis + rank : axis;
}

// dst[0, n) = src (Acc: dst += src).
template <bool Acc>
inline void copy_run(float* dst, const float* src, int64_t n) {
  if constexpr (Acc) {
    for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
}

// ---- transpose: swaps axes d0 < d1 ----

// Edge of the square tiles the 2-D transposes go through: two 32×32 float tiles (8 KB) stay in
// L1 while one is read by rows and the other written by rows.
constexpr int64_t kTile = 32;

// x viewed as [A, n0, Bm, n1, C] (n0, n1 the swapped dims) becomes y [A, n1, Bm, n0, C].
// C > 1: rows of C elements are copied whole. C == 1 (the last axis moves): for each (a, b),
// a 2-D transpose of the n0×n1 matrix with row stride Bm·n1 into rows of stride Bm·n0, by
// tiles; the slices split tile rows of y.
template <bool Acc>
void transpose_kernel(const float* x, float* y, const Shape& s, int d0, int d1, Slice sl) {
  const int64_t A = prod(s, 0, d0), n0 = s.dims[d0], Bm = prod(s, d0 + 1, d1), n1 = s.dims[d1];
  const int64_t C = prod(s, d1 + 1, s.rank);
  if (C > 1) {
    const auto [r0, r1] = slice_range(A * n1 * Bm * n0, sl);
    for (int64_t r = r0; r < r1; ++r) {  // r = ((a·n1 + j)·Bm + b)·n0 + i in y
      const int64_t i = r % n0, b = r / n0 % Bm, j = r / (n0 * Bm) % n1, a = r / (n0 * Bm * n1);
      copy_run<Acc>(y + r * C, x + (((a * n0 + i) * Bm + b) * n1 + j) * C, C);
    }
    return;
  }
  const int64_t lds = Bm * n1, ldd = Bm * n0, tiles = (n1 + kTile - 1) / kTile;
  const auto [u0, u1] = slice_range(A * Bm * tiles, sl);
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t t = u % tiles, b = u / tiles % Bm, a = u / (tiles * Bm);
    const float* src = x + a * n0 * lds + b * n1;
    float* dst = y + a * n1 * ldd + b * n0;
    const int64_t j0 = t * kTile, j1 = std::min(n1, j0 + kTile);
    for (int64_t i0 = 0; i0 < n0; i0 += kTile) {
      const int64_t i1 = std::min(n0, i0 + kTile);
      for (int64_t j = j0; j < j1; ++j) {
        float* drow = dst + j * ldd;
        for (int64_t i = i0; i < i1; ++i) {
          if constexpr (Acc) {
            drow[i] += src[i * lds + j];
          } else {
            drow[i] = src[i * lds + j];
          }
        }
      }
    }
  }
}

void transpose_build(Graph& g, Node& n) {
  const TensorDesc& x = g.tensor(n.in.at(0));
  const int d0 = low_axis(n), d1 = n.attrs.axis1;
  if (x.dtype != DType::kF32) shape_error(g, "transpose", "needs a float tensor", n.in);
  Shape s = x.shape;
  std::swap(s.dims[d0], s.dims[d1]);
  n.out = {g.new_tensor("transpose(" + x.name + ")", DType::kF32, s, x.batched)};
}

// Also the backward node: the gradient of a transpose is the same transpose of the gradient.
// in: x (or dy); out: y (or dx, possibly accumulated).
void transpose_run(const RunContext& c, const Node& n, Slice s) {
  const int d0 = low_axis(n), d1 = n.attrs.axis1;
  const float* x = c.f32(n.in[0]);
  float* y = c.f32(n.out[0]);
  if (n.accumulates(0)) {
    transpose_kernel<true>(x, y, c.shape(n.in[0]), d0, d1, s);
  } else {
    transpose_kernel<false>(x, y, c.shape(n.in[0]), d0, d1, s);
  }
}

void transpose_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kTranspose;
  b.in = {ad.grad(n.out[0])};
  b.attrs = n.attrs;
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

// ---- reshape: the same elements in the same order under another shape ----

// The output's shape is reshape()'s argument, which NodeAttrs cannot hold: reshape() creates
// the output tensor and passes it as a second input, which build moves to the outputs.
void output_as_input_build(Graph& g, Node& n) {
  if (n.in.size() != 2 || g.tensor(n.in[1]).shape.numel() > g.tensor(n.in[0]).shape.numel())
    shape_error(g, op_def(n.op).name, "needs a tensor and its output", n.in);
  n.out = {n.in[1]};
  n.in.resize(1);
}

// A copy, unless the planner placed the output in the input's buffer (OpDef::in_place: the
// input's last use is this node): then the bytes already are the output's and nothing runs.
void reshape_run(const RunContext& c, const Node& n, Slice s) {
  const float* x = c.f32(n.in[0]);
  float* y = c.f32(n.out[0]);
  if (x == y) return;
  const auto [b, e] = slice_range(c.shape(n.in[0]).numel(), s);
  if (e > b) std::memcpy(y + b, x + b, static_cast<size_t>(e - b) * sizeof(float));
}

// The gradient is dy under x's shape: a flat (accumulating) copy, the accumulate op.
void reshape_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kAccumulate;
  b.in = {ad.grad(n.out[0])};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

// ---- concat along an axis ----

// in: the pieces; out: y. Every tensor is viewed as [outer, width·inner] rows; the slices
// split the rows, each row concatenating one row of every piece.
void concat_build(Graph& g, Node& n) {
  const int axis = low_axis(n);
  const TensorDesc& x0 = g.tensor(n.in.at(0));
  Shape s = x0.shape;
  s[axis] = 0;
  std::string name = "concat(";
  for (size_t i = 0; i < n.in.size(); ++i) {
    const TensorDesc& x = g.tensor(n.in[i]);
    if (x.dtype != DType::kF32) shape_error(g, "concat", "needs float tensors", n.in);
    if (x.batched != x0.batched) shape_error(g, "concat", "cannot mix batched and unbatched tensors", n.in);
    bool ok = x.shape.rank == x0.shape.rank;
    for (int d = 0; ok && d < x.shape.rank; ++d) ok = d == axis || x.shape.dims[d] == x0.shape.dims[d];
    if (!ok)
      shape_error(g, "concat",
                  "the tensors' shapes must match except along axis " + std::to_string(axis), n.in);
    s[axis] += x.shape[axis];
    name += (i ? ", " : "") + x.name;
  }
  n.out = {g.new_tensor(name + ")", DType::kF32, s, x0.batched)};
}

template <bool Acc>
void concat_kernel(const RunContext& c, const Node& n, Slice sl) {
  const int axis = low_axis(n);
  const Shape ys = c.shape(n.out[0]);
  const int64_t outer = prod(ys, 0, axis), inner = prod(ys, axis + 1, ys.rank), width = ys[axis] * inner;
  float* y = c.f32(n.out[0]);
  const auto [r0, r1] = slice_range(outer, sl);
  int64_t offset = 0;
  for (TensorId t : n.in) {
    const int64_t w = c.shape(t)[axis] * inner;
    const float* x = c.f32(t);
    for (int64_t r = r0; r < r1; ++r) copy_run<Acc>(y + r * width + offset, x + r * w, w);
    offset += w;
  }
}

void concat_run(const RunContext& c, const Node& n, Slice s) {
  if (n.accumulates(0)) {
    concat_kernel<true>(c, n, s);
  } else {
    concat_kernel<false>(c, n, s);
  }
}

// The gradient of each piece is its slice of dy: a narrow node per piece that needs one.
void concat_differentiate(Autodiff& ad, const Node& n) {
  const int axis = low_axis(n);
  const TensorId gy = ad.grad(n.out[0]);
  int64_t start = 0;
  for (TensorId t : n.in) {
    Node b;
    b.op = OpKind::kNarrow;
    b.in = {gy};
    b.attrs.axis0 = axis, b.attrs.start = start;
    b.backward = true;
    set_out_accumulate(b, 0, ad.contribute(t));
    if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
    start += ad.graph().tensor(t).shape[axis];
  }
}

// ---- narrow: y = x[…, start : start + length, …] along an axis (split is one per piece) ----

// in: x; out: y (possibly accumulated). Rows of [outer, ·] as in concat.
template <bool Acc>
void narrow_kernel(const RunContext& c, const Node& n, Slice sl) {
  const int axis = low_axis(n);
  const Shape xs = c.shape(n.in[0]), ys = c.shape(n.out[0]);
  const int64_t outer = prod(xs, 0, axis), inner = prod(xs, axis + 1, xs.rank);
  const int64_t xw = xs[axis] * inner, w = ys[axis] * inner, offset = n.attrs.start * inner;
  const float* x = c.f32(n.in[0]);
  float* y = c.f32(n.out[0]);
  const auto [r0, r1] = slice_range(outer, sl);
  for (int64_t r = r0; r < r1; ++r) copy_run<Acc>(y + r * w, x + r * xw + offset, w);
}

void narrow_run(const RunContext& c, const Node& n, Slice s) {
  if (n.accumulates(0)) {
    narrow_kernel<true>(c, n, s);
  } else {
    narrow_kernel<false>(c, n, s);
  }
}

void narrow_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kNarrowBackward;
  b.in = {ad.grad(n.out[0])};
  b.attrs = n.attrs;
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

// in: dy; out: dx. dx's slice (+)= dy; when dx is overwritten (the first contribution), the
// rest of dx is zeroed: the pieces of a split whose gradients come later add into it.
void narrow_backward_run(const RunContext& c, const Node& n, Slice sl) {
  const int axis = low_axis(n);
  const Shape xs = c.shape(n.out[0]), ys = c.shape(n.in[0]);
  const int64_t outer = prod(xs, 0, axis), inner = prod(xs, axis + 1, xs.rank);
  const int64_t xw = xs[axis] * inner, w = ys[axis] * inner, offset = n.attrs.start * inner;
  const float* dy = c.f32(n.in[0]);
  float* dx = c.f32(n.out[0]);
  const auto [r0, r1] = slice_range(outer, sl);
  for (int64_t r = r0; r < r1; ++r) {
    float* row = dx + r * xw;
    if (n.accumulates(0)) {
      copy_run<true>(row + offset, dy + r * w, w);
    } else {
      std::fill(row, row + offset, 0.0f);
      copy_run<false>(row + offset, dy + r * w, w);
      std::fill(row + offset + w, row + xw, 0.0f);
    }
  }
}

// An axis of x that a shape op may cut or move: in range, and not the batch dim.
int checked_axis(const Graph& g, const char* op, TensorId x, int axis) {
  const TensorDesc& d = g.tensor(x);
  const int a = normalize_axis(axis, d.shape.rank);
  if (a < 0)
    shape_error(g, op, "axis " + std::to_string(axis) + " is out of range for " + std::to_string(d.shape.rank) +
                           " dims", {x});
  if (a == 0 && d.batched)
    shape_error(g, op, "axis " + std::to_string(axis) + " is the batch dim of a batched tensor", {x});
  return a;
}

void no_build(Graph&, Node&) {}

}  // namespace

extern const OpDef kTransposeOp = {"transpose", transpose_build, transpose_run, transpose_differentiate, false};
extern const OpDef kReshapeOp = {"reshape", output_as_input_build, reshape_run, reshape_differentiate, true};
extern const OpDef kConcatOp = {"concat", concat_build, concat_run, concat_differentiate, false};
extern const OpDef kNarrowOp = {"narrow", output_as_input_build, narrow_run, narrow_differentiate, false};
extern const OpDef kNarrowBackwardOp = {"narrow_backward", no_build, narrow_backward_run, nullptr, false};

Tensor transpose(Tensor x, int d0, int d1) {
  if (!x.valid()) throw ShapeError("transpose: needs a tensor");
  Graph& g = x.graph();
  const int a0 = checked_axis(g, "transpose", x.id(), d0), a1 = checked_axis(g, "transpose", x.id(), d1);
  if (a0 == a1) return x;  // swapping an axis with itself changes nothing
  NodeAttrs attrs;
  attrs.axis0 = std::min(a0, a1), attrs.axis1 = std::max(a0, a1);
  return g.apply(OpKind::kTranspose, {x.id()}, attrs)[0];
}

Tensor reshape(Tensor x, Shape shape) {
  if (!x.valid()) throw ShapeError("reshape: needs a tensor");
  Graph& g = x.graph();
  const TensorDesc& d = x.desc();
  const std::string want = shape.str();
  if (d.dtype != DType::kF32) shape_error(g, "reshape", "needs a float tensor", {x.id()});
  if (shape.rank < 1) shape_error(g, "reshape", "the new shape " + want + " has no dims", {x.id()});
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.rank; ++i) {
    if (shape.dims[i] == -1 && infer < 0) {
      infer = i;
    } else if (shape.dims[i] < 1) {
      shape_error(g, "reshape", "the new shape " + want + " needs positive dims and at most one -1", {x.id()});
    } else {
      known *= shape.dims[i];
    }
  }
  if (infer >= 0) {
    if (d.shape.numel() % known != 0)
      shape_error(g, "reshape", "cannot infer the -1 of " + want + " from " + std::to_string(d.shape.numel()) +
                                    " elements", {x.id()});
    shape[infer] = d.shape.numel() / known;
  }
  if (shape.numel() != d.shape.numel())
    shape_error(g, "reshape", "the new shape " + shape.str() + " has " + std::to_string(shape.numel()) +
                                  " elements, the tensor " + std::to_string(d.shape.numel()), {x.id()});
  if (d.batched && shape[0] != d.shape[0])
    shape_error(g, "reshape", "the batch dim stays dim 0 of a batched tensor: " + shape.str() +
                                  " must start with " + std::to_string(d.shape[0]), {x.id()});
  if (shape == d.shape) return x;
  const TensorId out = g.new_tensor("reshape(" + d.name + ")", DType::kF32, shape, d.batched);
  return g.apply(OpKind::kReshape, {x.id(), out})[0];
}

Tensor view(Tensor x, Shape shape) { return reshape(x, shape); }

Tensor concat(const std::vector<Tensor>& xs, int axis) {
  if (xs.empty()) throw ShapeError("concat: needs at least one tensor");
  std::vector<TensorId> ids;
  for (const Tensor& t : xs) {
    if (!t.valid()) throw ShapeError("concat: a tensor is missing");
    if (&t.graph() != &xs[0].graph()) throw ShapeError("concat: tensors belong to different graphs");
    ids.push_back(t.id());
  }
  Graph& g = xs[0].graph();
  const int a = checked_axis(g, "concat", ids[0], axis);
  if (xs.size() == 1) return xs[0];
  NodeAttrs attrs;
  attrs.axis0 = a;
  return g.apply(OpKind::kConcat, ids, attrs)[0];
}

Tensor narrow(Tensor x, int axis, int64_t start, int64_t length) {
  if (!x.valid()) throw ShapeError("narrow: needs a tensor");
  Graph& g = x.graph();
  const TensorDesc& d = x.desc();
  const int a = checked_axis(g, "narrow", x.id(), axis);
  if (d.dtype != DType::kF32) shape_error(g, "narrow", "needs a float tensor", {x.id()});
  if (start < 0 || length < 1 || start + length > d.shape[a])
    shape_error(g, "narrow", "[" + std::to_string(start) + ", " + std::to_string(start + length) +
                                 ") is not a non-empty range of axis " + std::to_string(axis) + " (size " +
                                 std::to_string(d.shape[a]) + ")", {x.id()});
  if (length == d.shape[a]) return x;
  Shape s = d.shape;
  s[a] = length;
  const TensorId out = g.new_tensor("narrow(" + d.name + ", " + std::to_string(start) + ", " +
                                        std::to_string(length) + ")", DType::kF32, s, d.batched);
  NodeAttrs attrs;
  attrs.axis0 = a, attrs.start = start;
  return g.apply(OpKind::kNarrow, {x.id(), out}, attrs)[0];
}

std::vector<Tensor> split(Tensor x, const std::vector<int64_t>& sizes, int axis) {
  if (!x.valid()) throw ShapeError("split: needs a tensor");
  Graph& g = x.graph();
  const TensorDesc& d = x.desc();
  const int a = checked_axis(g, "split", x.id(), axis);
  int64_t total = 0;
  std::string list;
  for (int64_t n : sizes) {
    if (n < 1) shape_error(g, "split", "sizes must be positive, got " + std::to_string(n), {x.id()});
    total += n;
    list += (list.empty() ? "" : ", ") + std::to_string(n);
  }
  if (sizes.empty() || total != d.shape[a])
    shape_error(g, "split", "sizes {" + list + "} sum to " + std::to_string(total) + ", not to axis " +
                                std::to_string(axis) + "'s size " + std::to_string(d.shape[a]), {x.id()});
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t n : sizes) {
    out.push_back(narrow(x, axis, start, n));
    start += n;
  }
  return out;
}

}  // namespace attnkit
