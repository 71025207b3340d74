// Graph ops of elementwise math (engine/functional.h): add, sub, mul, div with broadcasting
// and with float scalars, exp, log, tanh, sigmoid, gelu, their backwards, and the sum of a
// broadcast operand's gradient over the dims it was broadcast along (kSumTo).
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "engine/functional.h"
#include "engine/op_table.h"
#include "ops/math.h"

namespace attnkit {
namespace {

bool same_layout(const TensorDesc& a, const TensorDesc& b) {
  return a.shape == b.shape && a.batched == b.batched;
}

// The iteration space of `out` with each of `in` aligned to its last dims (numpy's rule):
// stride 0 along the dims an operand lacks or has as 1.
Strided aligned_space(const Shape& out, const Shape* in, int operands) {
  Strided s;
  s.rank = out.rank;
  for (int i = 0; i < out.rank; ++i) s.dims[i] = out.dims[i];
  for (int p = 0; p < operands; ++p) {
    const Shape& x = in[p];
    int64_t step = 1;
    for (int k = x.rank - 1; k >= 0; --k) {
      const int i = k + out.rank - x.rank;
      if (i >= 0 && x.dims[k] == out.dims[i] && x.dims[k] != 1) s.stride[p][i] = step;
      step *= x.dims[k];
    }
  }
  return s;
}

MathFn math_fn(OpKind k) {
  switch (k) {
    case OpKind::kAddBroadcast: return MathFn::kAdd;
    case OpKind::kSub: return MathFn::kSub;
    case OpKind::kMul: return MathFn::kMul;
    case OpKind::kDiv: return MathFn::kDiv;
    case OpKind::kAddScalar: return MathFn::kAddScalar;
    case OpKind::kMulScalar: return MathFn::kMulScalar;
    case OpKind::kRsubScalar: return MathFn::kRsubScalar;
    case OpKind::kDivScalar: return MathFn::kDivScalar;
    case OpKind::kRdivScalar: return MathFn::kRdivScalar;
    case OpKind::kExp: return MathFn::kExp;
    case OpKind::kLog: return MathFn::kLog;
    case OpKind::kTanh: return MathFn::kTanh;
    case OpKind::kSigmoid: return MathFn::kSigmoid;
    case OpKind::kGelu: return MathFn::kGelu;
    case OpKind::kExpBackward: return MathFn::kMul;  // dy · e^x, from the forward output
    case OpKind::kLogBackward: return MathFn::kDiv;  // dy / x
    case OpKind::kTanhBackward: return MathFn::kTanhBackward;
    case OpKind::kSigmoidBackward: return MathFn::kSigmoidBackward;
    case OpKind::kGeluBackward: return MathFn::kGeluBackward;
    case OpKind::kDivBackward: return MathFn::kDivBackward;
    default: throw Error("op_math: not an elementwise math op");
  }
}

// Every elementwise math node: out[0] over its own shape, inputs broadcast to it, the scalar
// in attrs.scale.
void math_run(const RunContext& c, const Node& n, Slice s) {
  Shape in[3];
  const float* p[3] = {nullptr, nullptr, nullptr};
  const int operands = static_cast<int>(n.in.size());
  for (int i = 0; i < operands; ++i) {
    in[i] = c.shape(n.in[static_cast<size_t>(i)]);
    p[i] = c.f32(n.in[static_cast<size_t>(i)]);
  }
  const Strided sp = coalesce(aligned_space(c.shape(n.out[0]), in, operands), operands);
  elementwise(math_fn(n.op), sp, p[0], p[1], p[2], n.attrs.scale, c.f32(n.out[0]), n.accumulates(0), s);
}

// ---- binary: y = a ∘ b, broadcast as in numpy over the dims aligned from the last ----
const char* binary_name(OpKind k) {
  switch (k) {
    case OpKind::kAddBroadcast: return "add";
    case OpKind::kSub: return "sub";
    case OpKind::kMul: return "mul";
    default: return "div";
  }
}
const char* binary_symbol(OpKind k) {
  switch (k) {
    case OpKind::kAddBroadcast: return "+";
    case OpKind::kSub: return "-";
    case OpKind::kMul: return "*";
    default: return "/";
  }
}

// The broadcast shape of a and b. The batch dim (dim 0 of a batched tensor) is the output's
// dim 0: two batched operands have the same rank, and an unbatched one is at most as long as
// the batched, with 1 at the batch's position if it reaches it.
Shape broadcast_shape(const Graph& g, const char* op, TensorId ia, TensorId ib, bool* batched) {
  const TensorDesc &a = g.tensor(ia), &b = g.tensor(ib);
  const int rank = std::max(a.shape.rank, b.shape.rank);
  if (a.batched && b.batched && a.shape.rank != b.shape.rank)
    shape_error(g, op, "batched operands must have the same rank", {ia, ib});
  const TensorDesc* bat = a.batched ? &a : b.batched ? &b : nullptr;
  const TensorDesc* other = a.batched ? &b : &a;
  if (bat && !other->batched) {
    if (other->shape.rank > bat->shape.rank)
      shape_error(g, op, "an unbatched operand cannot have more dims than the batched one", {ia, ib});
    if (other->shape.rank == bat->shape.rank && other->shape[0] != 1)
      shape_error(g, op, "an unbatched operand's dim at the batch position must be 1", {ia, ib});
  }
  Shape out;
  out.rank = rank;
  for (int i = 1; i <= rank; ++i) {
    const int64_t da = i <= a.shape.rank ? a.shape[-i] : 1, db = i <= b.shape.rank ? b.shape[-i] : 1;
    if (da != db && da != 1 && db != 1)
      shape_error(g, op, "shapes do not broadcast (dim " + std::to_string(rank - i) + ": " + std::to_string(da) +
                             " vs " + std::to_string(db) + ")", {ia, ib});
    out.dims[rank - i] = da == 1 ? db : da;
  }
  *batched = bat != nullptr;
  return out;
}

void binary_build(Graph& g, Node& n) {
  const char* op = binary_name(n.op);
  if (n.in.size() != 2 || n.in[0] == kNoTensor || n.in[1] == kNoTensor) shape_error(g, op, "needs two tensors", {});
  const TensorDesc &a = g.tensor(n.in[0]), &b = g.tensor(n.in[1]);
  if (a.dtype != DType::kF32 || b.dtype != DType::kF32) shape_error(g, op, "needs float tensors", n.in);
  bool batched = false;
  const Shape out = broadcast_shape(g, op, n.in[0], n.in[1], &batched);
  n.out = {g.new_tensor(a.name + binary_symbol(n.op) + b.name, DType::kF32, out, batched)};
}

// Appends the backward nodes of one forward node. Autodiff may have made the upstream
// gradient gy itself the gradient of an operand (an add shares it with its operands): the
// nodes then read a copy of gy, taken first, so that adding into the operand's gradient does
// not change what later nodes of this backward read. Identity contributions (an add's
// operands) come last, through pass_through, which may in turn share gy.
class GradWriter {
 public:
  GradWriter(Autodiff& ad, const Node& fwd) : ad_(ad), fwd_(fwd), gy_(ad.grad(fwd.out[0])) {
    for (TensorId x : fwd.in) {
      if (!ad.needs_grad(x) || ad.grad(x) != gy_) continue;
      Graph& g = ad.graph();
      const TensorDesc& d = g.tensor(gy_);
      Node copy;
      copy.op = OpKind::kAccumulate;
      copy.in = {gy_};
      copy.out = {g.new_tensor(d.name + "_copy", DType::kF32, d.shape, d.batched)};
      copy.backward = true;
      gy_ = copy.out[0];
      g.add_node(std::move(copy));
      break;
    }
  }
  TensorId gy() const { return gy_; }

  // grad(x) (+)= sum_scale · Σ_broadcast local, where local = kind(ins) over the output's
  // shape, or gy itself for kind kCount; the sum runs over the dims x is broadcast along.
  void add(TensorId x, OpKind kind, std::vector<TensorId> ins, float scalar = 1.0f, float sum_scale = 1.0f) {
    if (!ad_.needs_grad(x)) return;
    Graph& g = ad_.graph();
    const TensorDesc& y = g.tensor(fwd_.out[0]);
    const bool full = same_layout(g.tensor(x), y);
    if (kind == OpKind::kCount && full && sum_scale == 1.0f) {
      identities_.push_back(x);
      return;
    }
    TensorId local = gy_;
    if (kind != OpKind::kCount || full) {
      Node n;
      n.op = kind != OpKind::kCount ? kind : OpKind::kMulScalar;  // (full, kCount: sub's −gy)
      n.in = kind != OpKind::kCount ? std::move(ins) : std::vector<TensorId>{gy_};
      n.attrs.scale = kind != OpKind::kCount ? scalar : sum_scale;
      n.backward = true;
      if (full) {
        set_out_accumulate(n, 0, ad_.contribute(x));
        g.add_node(std::move(n));
        return;
      }
      local = g.new_tensor("grad_part(" + g.tensor(x).name + ")", DType::kF32, y.shape, y.batched);
      n.out = {local};
      g.add_node(std::move(n));
    }
    Node sum;
    sum.op = OpKind::kSumTo;
    sum.in = {local};
    sum.attrs.scale = sum_scale;
    sum.backward = true;
    set_out_accumulate(sum, 0, ad_.contribute(x));
    g.add_node(std::move(sum));
  }

  void finish() {
    for (TensorId x : identities_) ad_.pass_through(x, gy_);
  }

 private:
  Autodiff& ad_;
  const Node& fwd_;
  TensorId gy_;
  std::vector<TensorId> identities_;
};

void binary_differentiate(Autodiff& ad, const Node& n) {
  GradWriter w(ad, n);
  const TensorId a = n.in[0], b = n.in[1], gy = w.gy(), y = n.out[0];
  switch (n.op) {
    case OpKind::kAddBroadcast:
      w.add(b, OpKind::kCount, {});
      w.add(a, OpKind::kCount, {});
      break;
    case OpKind::kSub:
      w.add(b, OpKind::kCount, {}, 1.0f, -1.0f);
      w.add(a, OpKind::kCount, {});
      break;
    case OpKind::kMul:
      w.add(b, OpKind::kMul, {gy, a});
      w.add(a, OpKind::kMul, {gy, b});
      break;
    default:  // div: d(a/b)/da = 1/b, d(a/b)/db = −y/b
      w.add(b, OpKind::kDivBackward, {gy, y, b});
      w.add(a, OpKind::kDiv, {gy, b});
      break;
  }
  w.finish();
}

// ---- with a scalar s (attrs.scale): x + s, x · s, s − x, x / s, s / x ----
void scalar_build(Graph& g, Node& n) {
  const TensorDesc& x = g.tensor(n.in.at(0));
  const char* op = n.op == OpKind::kAddScalar ? "add" : n.op == OpKind::kMulScalar ? "mul"
                   : n.op == OpKind::kRsubScalar ? "sub" : "div";
  if (x.dtype != DType::kF32) shape_error(g, op, "needs a float tensor", n.in);
  std::ostringstream s;
  s << n.attrs.scale;
  std::string name;
  switch (n.op) {
    case OpKind::kAddScalar: name = x.name + "+" + s.str(); break;
    case OpKind::kMulScalar: name = x.name + "*" + s.str(); break;
    case OpKind::kRsubScalar: name = s.str() + "-" + x.name; break;
    case OpKind::kDivScalar: name = x.name + "/" + s.str(); break;
    default: name = s.str() + "/" + x.name; break;
  }
  n.out = {g.new_tensor(name, DType::kF32, x.shape, x.batched)};
}

void scalar_differentiate(Autodiff& ad, const Node& n) {
  GradWriter w(ad, n);
  const TensorId x = n.in[0], gy = w.gy();
  const float s = n.attrs.scale;
  switch (n.op) {
    case OpKind::kAddScalar: w.add(x, OpKind::kCount, {}); break;
    case OpKind::kMulScalar: w.add(x, OpKind::kMulScalar, {gy}, s); break;
    case OpKind::kRsubScalar: w.add(x, OpKind::kMulScalar, {gy}, -1.0f); break;
    case OpKind::kDivScalar: w.add(x, OpKind::kDivScalar, {gy}, s); break;
    default: w.add(x, OpKind::kDivBackward, {gy, n.out[0], x}); break;  // d(s/x)/dx = −y/x
  }
  w.finish();
}

// ---- unary: exp, log, tanh, sigmoid, gelu ----
const char* unary_name(OpKind k) {
  switch (k) {
    case OpKind::kExp: return "exp";
    case OpKind::kLog: return "log";
    case OpKind::kTanh: return "tanh";
    case OpKind::kSigmoid: return "sigmoid";
    default: return "gelu";
  }
}

void unary_build(Graph& g, Node& n) {
  const char* op = unary_name(n.op);
  if (n.in.size() != 1 || n.in[0] == kNoTensor) shape_error(g, op, "needs one tensor", {});
  const TensorDesc& x = g.tensor(n.in[0]);
  if (x.dtype != DType::kF32) shape_error(g, op, "needs a float tensor", n.in);
  n.out = {g.new_tensor(std::string(op) + "(" + x.name + ")", DType::kF32, x.shape, x.batched)};
}

void unary_differentiate(Autodiff& ad, const Node& n) {
  GradWriter w(ad, n);
  const TensorId x = n.in[0], y = n.out[0], gy = w.gy();
  switch (n.op) {
    case OpKind::kExp: w.add(x, OpKind::kExpBackward, {gy, y}); break;
    case OpKind::kLog: w.add(x, OpKind::kLogBackward, {gy, x}); break;
    case OpKind::kTanh: w.add(x, OpKind::kTanhBackward, {gy, y}); break;
    case OpKind::kSigmoid: w.add(x, OpKind::kSigmoidBackward, {gy, y}); break;
    default: w.add(x, OpKind::kGeluBackward, {gy, x}); break;
  }
  w.finish();
}

// ---- sum to: out (+)= scale · Σ in over the dims out is broadcast along (in aligned to out
// from the last dim); the gradient of a broadcast operand ----
void sum_to_run(const RunContext& c, const Node& n, Slice s) {
  const Shape target = c.shape(n.out[0]);
  const Strided sp = coalesce(aligned_space(c.shape(n.in[0]), &target, 1), 1);
  reduce_sum(sp, c.f32(n.in[0]), n.attrs.scale, 1.0f, c.f32(n.out[0]), n.accumulates(0), s);
}

void no_build(Graph& g, Node& n) {}

Tensor apply1(OpKind k, const Tensor& x, float scalar = 1.0f) {
  NodeAttrs attrs;
  attrs.scale = scalar;
  return x.graph().apply(k, {x.id()}, attrs)[0];
}

Tensor apply2(OpKind k, const Tensor& a, const Tensor& b) {
  if (&a.graph() != &b.graph())
    throw ShapeError(std::string(binary_name(k)) + ": tensors belong to different graphs");
  return a.graph().apply(k, {a.id(), b.id()})[0];
}

// Whether kAdd (the lessons' add, with its fusions) takes a + b: equal shapes, or one
// operand unbatched and the other's trailing dims.
bool core_add_takes(const Tensor& a, const Tensor& b) {
  const TensorDesc &da = a.desc(), &db = b.desc();
  if (da.dtype != DType::kF32 || db.dtype != DType::kF32) return false;
  if (same_layout(da, db)) return true;
  const TensorDesc &big = da.shape.rank >= db.shape.rank ? da : db, &small = &big == &da ? db : da;
  if (small.batched || small.shape.rank >= big.shape.rank) return false;
  for (int i = 1; i <= small.shape.rank; ++i)
    if (small.shape[-i] != big.shape[-i]) return false;
  return true;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  if (&a.graph() != &b.graph()) throw ShapeError("add: tensors belong to different graphs");
  if (core_add_takes(a, b)) return a.graph().apply(OpKind::kAdd, {a.id(), b.id()})[0];
  return apply2(OpKind::kAddBroadcast, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) { return apply2(OpKind::kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return apply2(OpKind::kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return apply2(OpKind::kDiv, a, b); }
Tensor add(const Tensor& a, float s) { return apply1(OpKind::kAddScalar, a, s); }
Tensor add(float s, const Tensor& a) { return apply1(OpKind::kAddScalar, a, s); }
Tensor sub(const Tensor& a, float s) { return apply1(OpKind::kAddScalar, a, -s); }
Tensor sub(float s, const Tensor& a) { return apply1(OpKind::kRsubScalar, a, s); }
Tensor mul(const Tensor& a, float s) { return apply1(OpKind::kMulScalar, a, s); }
Tensor mul(float s, const Tensor& a) { return apply1(OpKind::kMulScalar, a, s); }
Tensor div(const Tensor& a, float s) { return apply1(OpKind::kDivScalar, a, s); }
Tensor div(float s, const Tensor& a) { return apply1(OpKind::kRdivScalar, a, s); }
Tensor neg(const Tensor& x) { return apply1(OpKind::kMulScalar, x, -1.0f); }

Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, float s) { return add(a, s); }
Tensor operator+(float s, const Tensor& a) { return add(s, a); }
Tensor operator-(const Tensor& a, float s) { return sub(a, s); }
Tensor operator-(float s, const Tensor& a) { return sub(s, a); }
Tensor operator*(const Tensor& a, float s) { return mul(a, s); }
Tensor operator*(float s, const Tensor& a) { return mul(s, a); }
Tensor operator/(const Tensor& a, float s) { return div(a, s); }
Tensor operator/(float s, const Tensor& a) { return div(s, a); }
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor exp(const Tensor& x) { return apply1(OpKind::kExp, x); }
Tensor log(const Tensor& x) { return apply1(OpKind::kLog, x); }
Tensor tanh(const Tensor& x) { return apply1(OpKind::kTanh, x); }
Tensor sigmoid(const Tensor& x) { return apply1(OpKind::kSigmoid, x); }
Tensor gelu(const Tensor& x) { return apply1(OpKind::kGelu, x); }

extern const OpDef kAddBroadcastOp = {"add", binary_build, math_run, binary_differentiate, true};
extern const OpDef kSubOp = {"sub", binary_build, math_run, binary_differentiate, true};
extern const OpDef kMulOp = {"mul", binary_build, math_run, binary_differentiate, true};
extern const OpDef kDivOp = {"div", binary_build, math_run, binary_differentiate, true};
extern const OpDef kAddScalarOp = {"add_scalar", scalar_build, math_run, scalar_differentiate, true};
extern const OpDef kMulScalarOp = {"mul_scalar", scalar_build, math_run, scalar_differentiate, true};
extern const OpDef kRsubScalarOp = {"rsub_scalar", scalar_build, math_run, scalar_differentiate, true};
extern const OpDef kDivScalarOp = {"div_scalar", scalar_build, math_run, scalar_differentiate, true};
extern const OpDef kRdivScalarOp = {"rdiv_scalar", scalar_build, math_run, scalar_differentiate, true};
extern const OpDef kExpOp = {"exp", unary_build, math_run, unary_differentiate, true};
extern const OpDef kLogOp = {"log", unary_build, math_run, unary_differentiate, true};
extern const OpDef kTanhOp = {"tanh", unary_build, math_run, unary_differentiate, true};
extern const OpDef kSigmoidOp = {"sigmoid", unary_build, math_run, unary_differentiate, true};
extern const OpDef kGeluOp = {"gelu", unary_build, math_run, unary_differentiate, true};
extern const OpDef kExpBackwardOp = {"exp_backward", no_build, math_run, nullptr, true};
extern const OpDef kLogBackwardOp = {"log_backward", no_build, math_run, nullptr, true};
extern const OpDef kTanhBackwardOp = {"tanh_backward", no_build, math_run, nullptr, true};
extern const OpDef kSigmoidBackwardOp = {"sigmoid_backward", no_build, math_run, nullptr, true};
extern const OpDef kGeluBackwardOp = {"gelu_backward", no_build, math_run, nullptr, true};
extern const OpDef kDivBackwardOp = {"div_backward", no_build, math_run, nullptr, true};
extern const OpDef kSumToOp = {"sum_to", no_build, sum_to_run, nullptr, false};

}  // namespace attnkit
