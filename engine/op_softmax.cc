// softmax over the last axis (scale, a boolean or additive mask and causal masking fused in),
// masked_fill and dropout (engine/functional.h). Masks have x's last two dims [Tq, Tk] and
// broadcast over its leading dims; the softmax kernels are ops/softmax.h's.
#include <algorithm>
#include <cstring>

#include "engine/functional.h"
#include "engine/op_table.h"
#include "engine/rng.h"
#include "ops/softmax.h"

namespace attnkit {
namespace {

// ---- masks broadcast over leading dims ----

// x seen as [outer, groups, tq, tk] row blocks, and how a mask [slabs, tq, tk] maps onto them:
// group g of every outer block reads mask slab g / div. x's leading dims split into those the
// mask has as 1 before its first real dim (outer), the ones it shares, and those it has as 1
// after its last (div). With at most 2 leading dims (rank 4) every broadcast has this form.
struct RowLayout {
  int64_t outer = 1, groups = 1, div = 1, tq = 1, tk = 1;
};

// Leading dims of x (all but the last two, or none for rank 1) and the mask's, aligned from
// the right (1 where the mask has none).
int leading(const Shape& x) { return std::max(0, x.rank - 2); }
int64_t mask_dim(const Shape& x, const Shape& m, int i) {
  const int at = i - (leading(x) - leading(m));
  return at >= 0 ? m[at] : 1;
}

RowLayout row_layout(const Shape& x, const Shape* m) {
  RowLayout l;
  l.tk = x.last();
  l.tq = x.rank >= 2 ? x[-2] : 1;
  const int64_t total = x.numel() / (l.tq * l.tk);
  l.groups = total;
  if (!m) return l;
  const int k = leading(x);
  int first = -1, last = -1;
  for (int i = 0; i < k; ++i)
    if (mask_dim(x, *m, i) != 1) {
      if (first < 0) first = i;
      last = i;
    }
  if (first < 0) {  // one slab for all groups
    l.div = total;
    return l;
  }
  for (int i = 0; i < first; ++i) l.outer *= x[i];
  for (int i = last + 1; i < k; ++i) l.div *= x[i];
  l.groups = total / l.outer;
  return l;
}

// Calls fn(r, mr, i) for this slice's share of the rows of x seen through layout l: r the row
// of x (flat), mr the mask row it reads (flat), i its query (dim -2) index. Within each outer
// block the slice's rows are slice_range(groups·tq, s), the rows the softmax kernels take.
template <class Fn>
void for_each_row(const RowLayout& l, Slice s, Fn&& fn) {
  const auto [r0, r1] = slice_range(l.groups * l.tq, s);
  for (int64_t o = 0; o < l.outer; ++o) {
    int64_t g = r0 / l.tq, i = r0 % l.tq;
    for (int64_t r = r0; r < r1; ++r) {
      fn(o * l.groups * l.tq + r, (g / l.div) * l.tq + i, i);
      if (++i == l.tq) i = 0, ++g;
    }
  }
}

RowLayout layout_of(const RunContext& c, TensorId x_id, TensorId m_id) {
  if (m_id == kNoTensor) return row_layout(c.shape(x_id), nullptr);
  const Shape ms = c.shape(m_id);
  return row_layout(c.shape(x_id), &ms);
}

// Checks that a mask fits x as functional.h describes (uint8, or float when allow_float).
void check_mask(const Graph& g, const char* op, TensorId x_id, TensorId m_id, bool allow_float) {
  const TensorDesc &x = g.tensor(x_id), &m = g.tensor(m_id);
  const std::vector<TensorId> both = {x_id, m_id};
  if (m.dtype != DType::kU8 && !(allow_float && m.dtype == DType::kF32))
    shape_error(g, op, allow_float ? "the mask must be uint8 (non-zero = forbidden) or float (added)"
                                   : "the mask must be uint8 (non-zero = filled)",
                both);
  const int tail = std::min(2, x.shape.rank);
  bool ok = m.shape.rank >= tail && m.shape.rank <= x.shape.rank;
  for (int i = 1; ok && i <= tail; ++i) ok = m.shape[-i] == x.shape[-i];
  if (!ok)
    shape_error(g, op, "the mask's last dims must be x's " +
                (x.shape.rank >= 2 ? "[" + std::to_string(x.shape[-2]) + ", " + std::to_string(x.shape[-1]) + "]"
                                   : "[" + std::to_string(x.shape[-1]) + "]") +
                " and it may not have more dims than x", both);
  if (m.batched && !(x.batched && m.shape.rank == x.shape.rank))
    shape_error(g, op, "a batched mask needs a batched x of the same rank", both);
  const int k = leading(x.shape);
  int first = -1, last = -1;
  for (int i = 0; i < k; ++i) {
    const int64_t d = mask_dim(x.shape, m.shape, i);
    const bool batch_dim = i == 0 && x.batched;
    const bool aligned_batch = batch_dim && m.batched;
    if (batch_dim && !aligned_batch && d != 1)
      shape_error(g, op, "the mask's dim over x's batch dim must be 1 unless the mask is a batched input", both);
    if (d != 1 && d != x.shape[i])
      shape_error(g, op, "the mask's leading dims must be x's or 1 (it broadcasts over them)", both);
    if (d != 1 || aligned_batch) {
      if (first < 0) first = i;
      last = i;
    }
  }
  for (int i = first; first >= 0 && i <= last; ++i)
    if (mask_dim(x.shape, m.shape, i) != x.shape[i])
      shape_error(g, op, "the mask broadcasts over these dims in a way not supported", both);
}

// ---- softmax ----

// apply() gives (x, mask); the node keeps in: x, uint8 mask (or none), float mask (or none).
void softmax_build(Graph& g, Node& n) {
  if (n.in.size() != 2 || n.in[0] == kNoTensor) shape_error(g, "softmax", "needs x and an optional mask", {});
  const TensorDesc& x = g.tensor(n.in[0]);
  if (x.dtype != DType::kF32 || x.shape.rank < 1)
    shape_error(g, "softmax", "x must be a float tensor", {n.in[0]});
  if (n.attrs.causal && x.shape.rank < 2)
    shape_error(g, "softmax", "causal masking needs scores [..., Tq, Tk]", {n.in[0]});
  const TensorId m = n.in[1];
  if (m != kNoTensor) check_mask(g, "softmax", n.in[0], m, /*allow_float=*/true);
  const bool additive = m != kNoTensor && g.tensor(m).dtype == DType::kF32;
  n.in = {n.in[0], additive ? kNoTensor : m, additive ? m : kNoTensor};
  n.out = {g.new_tensor("softmax(" + x.name + ")", DType::kF32, x.shape, x.batched)};
}

// Zeros the rows of this slice's share whose every key is forbidden: the kernel gives them
// 1/tk each (forbidden scores become −1e9, as in the course's attention), softmax promises 0.
void zero_forbidden_rows(const uint8_t* mask, const RowLayout& l, bool causal, float* y, Slice s) {
  for_each_row(l, s, [&](int64_t r, int64_t mr, int64_t i) {
    const uint8_t* flags = mask + mr * l.tk;
    const int64_t allowed_end = causal ? std::min(i + 1, l.tk) : l.tk;  // later keys: forbidden
    int64_t j = 0;
    while (j < allowed_end && flags[j] != 0) ++j;
    if (j == allowed_end) std::memset(y + r * l.tk, 0, static_cast<size_t>(l.tk) * sizeof(float));
  });
}

void softmax_run(const RunContext& c, const Node& n, Slice s) {
  const TensorId bool_mask = n.in[1], add_mask = n.in[2];
  const RowLayout l = layout_of(c, n.in[0], bool_mask != kNoTensor ? bool_mask : add_mask);
  const int64_t block = l.groups * l.tq * l.tk;
  SoftmaxMask mask;
  mask.causal = n.attrs.causal;
  mask.group_div = l.div;
  if (bool_mask != kNoTensor) mask.data = c.u8(bool_mask);
  for (int64_t o = 0; o < l.outer; ++o) {  // every outer block reads the same mask slabs
    const float* x = c.f32(n.in[0]) + o * block;
    float* y = c.f32(n.out[0]) + o * block;
    if (add_mask != kNoTensor) {
      softmax_forward_additive(x, c.f32(add_mask), l.div, y, l.groups, l.tq, l.tk, n.attrs.scale, mask, s);
    } else {
      softmax_forward(x, y, l.groups, l.tq, l.tk, n.attrs.scale, mask, s);
    }
  }
  if (mask.data) zero_forbidden_rows(mask.data, l, mask.causal, c.f32(n.out[0]), s);
}

// Backward node: in (y, dy, uint8 mask); out (dx, dz) with dz = d(scale·x + mask) the float
// mask's gradient at x's shape (absent without one). When the float mask broadcasts, dz is
// an intermediate that a kSoftmaxMaskGrad node sums over the broadcast dims.
void softmax_differentiate(Autodiff& ad, const Node& n) {
  Graph& g = ad.graph();
  Node b;
  b.op = OpKind::kSoftmaxBackward;
  b.in = {n.out[0], ad.grad(n.out[0]), n.in[1]};
  b.attrs = n.attrs;
  b.backward = true;
  b.out.assign(2, kNoTensor);
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  Node sum;
  const TensorId add = n.in[2];
  if (ad.needs_grad(add)) {
    const TensorDesc &x = g.tensor(n.in[0]), &m = g.tensor(add);
    if (m.shape == x.shape && m.batched == x.batched) {
      set_out_accumulate(b, 1, ad.contribute(add));
    } else {
      b.out[1] = g.new_tensor("softmax(" + x.name + ").mask_grad", DType::kF32, x.shape, x.batched);
      sum.op = OpKind::kSoftmaxMaskGrad;
      sum.in = {b.out[1]};
      sum.backward = true;
      set_out_accumulate(sum, 0, ad.contribute(add));
    }
  }
  if (b.out[0] == kNoTensor && b.out[1] == kNoTensor) return;
  g.add_node(std::move(b));
  if (!sum.in.empty()) g.add_node(std::move(sum));
}

void softmax_backward_run(const RunContext& c, const Node& n, Slice s) {
  const TensorId bool_mask = n.in[2];
  const RowLayout l = layout_of(c, n.in[0], bool_mask);
  const int64_t block = l.groups * l.tq * l.tk;
  SoftmaxMask mask;
  mask.causal = n.attrs.causal;
  mask.group_div = l.div;
  if (bool_mask != kNoTensor) mask.data = c.u8(bool_mask);
  for (int64_t o = 0; o < l.outer; ++o) {
    const float* y = c.f32(n.in[0]) + o * block;
    const float* dy = c.f32(n.in[1]) + o * block;
    if (n.out[0] != kNoTensor)
      softmax_backward(y, dy, c.f32(n.out[0]) + o * block, l.groups, l.tq, l.tk, n.attrs.scale, mask,
                       n.accumulates(0), s);
    if (n.out[1] != kNoTensor)
      softmax_backward(y, dy, c.f32(n.out[1]) + o * block, l.groups, l.tq, l.tk, 1.0f, mask,
                       n.accumulates(1), s);
  }
}

// in: dz (x's shape); out: the float mask's gradient, dz summed over the dims it broadcasts
// over, each mask row by one slice in a fixed order (the same for any thread count).
void softmax_mask_grad_run(const RunContext& c, const Node& n, Slice s) {
  const Shape ms = c.shape(n.out[0]);
  const RowLayout l = row_layout(c.shape(n.in[0]), &ms);
  const float* dz = c.f32(n.in[0]);
  float* dm = c.f32(n.out[0]);
  const auto [m0, m1] = slice_range(ms.numel() / l.tk, s);
  for (int64_t mr = m0; mr < m1; ++mr) {
    const int64_t q = mr / l.tq, i = mr % l.tq;
    float* out = dm + mr * l.tk;
    if (!n.accumulates(0)) std::memset(out, 0, static_cast<size_t>(l.tk) * sizeof(float));
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t g = q * l.div; g < (q + 1) * l.div; ++g) {
        const float* src = dz + ((o * l.groups + g) * l.tq + i) * l.tk;
        for (int64_t j = 0; j < l.tk; ++j) out[j] += src[j];
      }
  }
}

// ---- masked_fill: y = mask ? value : x ----
void masked_fill_build(Graph& g, Node& n) {
  if (n.in.size() != 2 || n.in[0] == kNoTensor || n.in[1] == kNoTensor)
    shape_error(g, "masked_fill", "needs x and a mask", {});
  const TensorDesc& x = g.tensor(n.in[0]);
  if (x.dtype != DType::kF32 || x.shape.rank < 1) shape_error(g, "masked_fill", "x must be a float tensor", n.in);
  check_mask(g, "masked_fill", n.in[0], n.in[1], /*allow_float=*/false);
  n.out = {g.new_tensor("masked_fill(" + x.name + ")", DType::kF32, x.shape, x.batched)};
}

void masked_fill_run(const RunContext& c, const Node& n, Slice s) {
  const RowLayout l = layout_of(c, n.in[0], n.in[1]);
  const float* x = c.f32(n.in[0]);
  const uint8_t* mask = c.u8(n.in[1]);
  float* y = c.f32(n.out[0]);
  const float value = n.attrs.value;
  for_each_row(l, s, [&](int64_t r, int64_t mr, int64_t) {
    const float* xr = x + r * l.tk;
    const uint8_t* m = mask + mr * l.tk;
    float* yr = y + r * l.tk;  // may be xr (in place): each element is read before it is written
    for (int64_t j = 0; j < l.tk; ++j) yr[j] = m[j] ? value : xr[j];
  });
}

void masked_fill_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kMaskedFillBackward;
  b.in = {ad.grad(n.out[0]), n.in[1]};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

// in: dy, mask; out: dx = mask ? 0 : dy.
void masked_fill_backward_run(const RunContext& c, const Node& n, Slice s) {
  const RowLayout l = layout_of(c, n.in[0], n.in[1]);
  const float* dy = c.f32(n.in[0]);
  const uint8_t* mask = c.u8(n.in[1]);
  float* dx = c.f32(n.out[0]);
  const bool accumulate = n.accumulates(0);
  for_each_row(l, s, [&](int64_t r, int64_t mr, int64_t) {
    const float* d = dy + r * l.tk;
    const uint8_t* m = mask + mr * l.tk;
    float* out = dx + r * l.tk;
    if (accumulate) {
      for (int64_t j = 0; j < l.tk; ++j) out[j] += m[j] ? 0.0f : d[j];
    } else {
      for (int64_t j = 0; j < l.tk; ++j) out[j] = m[j] ? 0.0f : d[j];
    }
  });
}

// ---- dropout ----

// Elements are drawn in blocks of kDropoutBlock: block b of step t takes its draws, one per
// element in order, from Rng(key(seed, t, b)), so each element's draw depends only on
// (seed, t, element) and slices (whole blocks) may fall anywhere.
constexpr int64_t kDropoutBlock = 64;

uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t dropout_key(uint64_t seed, int64_t step, int64_t block) {
  return mix64(mix64(mix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(block));
}

// out = in · keep where kept, 0 where dropped, over this slice's whole blocks (accumulate:
// out += …). p = 1 drops everything.
void dropout_apply(const float* in, float* out, int64_t count, float p, uint64_t seed, int64_t step,
                   bool accumulate, Slice s) {
  const float keep = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  const double threshold = p;
  const auto [e0, e1] = slice_range_grain(count, kDropoutBlock, s);
  for (int64_t b0 = e0; b0 < e1; b0 += kDropoutBlock) {
    Rng rng(dropout_key(seed, step, b0 / kDropoutBlock));
    const int64_t b1 = std::min(e1, b0 + kDropoutBlock);
    for (int64_t e = b0; e < b1; ++e) {
      const float v = rng.uniform() < threshold ? 0.0f : in[e] * keep;
      out[e] = accumulate ? out[e] + v : v;
    }
  }
}

void dropout_build(Graph& g, Node& n) {
  if (n.in.size() != 1 || n.in[0] == kNoTensor) shape_error(g, "dropout", "needs x", {});
  const TensorDesc& x = g.tensor(n.in[0]);
  if (x.dtype != DType::kF32) shape_error(g, "dropout", "x must be a float tensor", n.in);
  if (!(n.attrs.value >= 0.0f && n.attrs.value <= 1.0f))
    shape_error(g, "dropout", "p must be in [0, 1], got " + std::to_string(n.attrs.value), n.in);
  n.out = {g.new_tensor("dropout(" + x.name + ")", DType::kF32, x.shape, x.batched)};
}

void dropout_run(const RunContext& c, const Node& n, Slice s) {
  const float* x = c.f32(n.in[0]);
  float* y = c.f32(n.out[0]);
  const int64_t count = c.shape(n.in[0]).numel();
  if (!c.training() || n.attrs.value == 0.0f) {  // evaluation: the identity
    if (x == y) return;  // in place
    const auto [e0, e1] = slice_range(count, s);
    if (e1 > e0) std::memcpy(y + e0, x + e0, static_cast<size_t>(e1 - e0) * sizeof(float));
    return;
  }
  dropout_apply(x, y, count, n.attrs.value, n.attrs.seed, c.training_steps(), false, s);
}

void dropout_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kDropoutBackward;
  b.in = {ad.grad(n.out[0])};
  b.attrs = n.attrs;
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

// in: dy; out: dx = dy through the forward's mask, redrawn from the same (seed, step).
void dropout_backward_run(const RunContext& c, const Node& n, Slice s) {
  const float* dy = c.f32(n.in[0]);
  float* dx = c.f32(n.out[0]);
  const int64_t count = c.shape(n.in[0]).numel();
  if (!c.training() || n.attrs.value == 0.0f) {
    const auto [e0, e1] = slice_range(count, s);
    if (n.accumulates(0)) {
      for (int64_t e = e0; e < e1; ++e) dx[e] += dy[e];
    } else if (e1 > e0) {
      std::memcpy(dx + e0, dy + e0, static_cast<size_t>(e1 - e0) * sizeof(float));
    }
    return;
  }
  dropout_apply(dy, dx, count, n.attrs.value, n.attrs.seed, c.training_steps(), n.accumulates(0), s);
}

void no_build(Graph&, Node&) {}

}  // namespace

extern const OpDef kSoftmaxOp = {"softmax", softmax_build, softmax_run, softmax_differentiate, true};
extern const OpDef kSoftmaxBackwardOp = {"softmax_backward", no_build, softmax_backward_run, nullptr, false};
extern const OpDef kSoftmaxMaskGradOp = {"softmax_mask_grad", no_build, softmax_mask_grad_run, nullptr, false};
extern const OpDef kMaskedFillOp = {"masked_fill", masked_fill_build, masked_fill_run, masked_fill_differentiate, true};
extern const OpDef kMaskedFillBackwardOp = {"masked_fill_backward", no_build, masked_fill_backward_run, nullptr, false};
extern const OpDef kDropoutOp = {"dropout", dropout_build, dropout_run, dropout_differentiate, true};
extern const OpDef kDropoutBackwardOp = {"dropout_backward", no_build, dropout_backward_run, nullptr, false};

namespace {
void same_graph(const char* op, const Tensor& a, const Tensor& b) {
  if (b.valid() && &a.graph() != &b.graph()) throw ShapeError(std::string(op) + ": tensors belong to different graphs");
}
}  // namespace

Tensor softmax(Tensor x, SoftmaxOptions options) {
  if (!x.valid()) throw ShapeError("softmax: x is not a tensor");
  same_graph("softmax", x, options.mask);
  NodeAttrs a;
  a.scale = options.scale;
  a.causal = options.causal;
  return x.graph().apply(OpKind::kSoftmax, {x.id(), options.mask.valid() ? options.mask.id() : kNoTensor}, a)[0];
}

Tensor masked_fill(Tensor x, Tensor mask, float value) {
  if (!x.valid() || !mask.valid()) throw ShapeError("masked_fill: needs x and a mask");
  same_graph("masked_fill", x, mask);
  NodeAttrs a;
  a.value = value;
  return x.graph().apply(OpKind::kMaskedFill, {x.id(), mask.id()}, a)[0];
}

Tensor dropout(Tensor x, float p, uint64_t seed) {
  if (!x.valid()) throw ShapeError("dropout: x is not a tensor");
  NodeAttrs a;
  a.value = p;
  a.seed = seed;
  return x.graph().apply(OpKind::kDropout, {x.id()}, a)[0];
}

}  // namespace attnkit
