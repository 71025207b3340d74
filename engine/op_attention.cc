// Scaled dot-product attention over heads, fused: for each (batch, head) the scores
// Q·Kᵀ go straight into the probabilities buffer, are softmaxed there (scale and mask
// fused) and multiplied by V. Heads are column blocks of [B, T, H·dh] activations, so no
// copies split or merge heads. The backward saves only the probabilities; for short
// sequences (the lessons) it is one fused kernel per product (ops/attention.h).
#include <algorithm>

#include "engine/op_table.h"
#include "ops/attention.h"

namespace attnkit {
namespace {

// in: q [B, Tq, D], k [B, Tk, D], v [B, Tk, Dv], mask (optional uint8 [B, Tq, Tk]);
// out: y [B, Tq, Dv], probs [B, H, Tq, Tk].
// Indexed (attrs.indexed, inference): in = {q, k, v tables [V, T, ·], mask, ids [B, T],
// start table [V, T, out width] or none}.
void indexed_attention_build(Graph& g, Node& n) {
  if (n.in.size() == 6) n.in.push_back(kNoTensor);
  if (n.in.size() != 7)
    shape_error(g, "attention", "an indexed attention needs q, k, v, mask, ids, start and score tables", {});
  const TensorDesc &q = g.tensor(n.in[0]), &k = g.tensor(n.in[1]), &v = g.tensor(n.in[2]), &ids = g.tensor(n.in[4]);
  const int64_t h = n.attrs.heads;
  std::vector<TensorId> qkv = {n.in[0], n.in[1], n.in[2], n.in[4]};
  if (ids.dtype != DType::kI32 || ids.shape.rank != 2) shape_error(g, "attention", "ids must be int32 [batch, T]", qkv);
  const int64_t b = ids.shape[0], t = ids.shape[1];
  for (const TensorDesc* d : {&q, &k, &v})
    if (d->dtype != DType::kF32 || d->shape.rank != 3 || d->batched || d->shape[1] != t || d->shape[0] != q.shape[0])
      shape_error(g, "attention", "indexed q, k, v must be float tables [vocab, T, dim]", qkv);
  if (q.shape[2] != k.shape[2]) shape_error(g, "attention", "q and k must have the same dim", qkv);
  if (h < 1 || q.shape[2] % h != 0 || v.shape[2] % h != 0)
    shape_error(g, "attention", std::to_string(h) + " heads do not divide the dims", qkv);
  if (n.accumulate != 0) shape_error(g, "attention", "an indexed attention starts from its start table", qkv);
  if (n.in[3] != kNoTensor) {
    const TensorDesc& m = g.tensor(n.in[3]);
    if (m.dtype != DType::kU8 || m.shape != Shape{b, t, t} || m.batched != ids.batched)
      shape_error(g, "attention", "the mask must be uint8 [batch, T, T] (non-zero = forbidden)", {n.in[4], n.in[3]});
  }
  const int64_t width = n.attrs.sum_heads ? v.shape[2] / h : v.shape[2];
  if (n.in[5] != kNoTensor) {
    const TensorDesc& st = g.tensor(n.in[5]);
    if (st.dtype != DType::kF32 || st.batched || st.shape != Shape{q.shape[0], t, width})
      shape_error(g, "attention", "the start table must be float [vocab, T, output width]", {n.in[5]});
  }
  if (n.in[6] != kNoTensor) {
    const TensorDesc& st = g.tensor(n.in[6]);
    const int64_t rows = q.shape[0] * t;
    if (st.dtype != DType::kF32 || st.batched || st.shape != Shape{h, rows, rows})
      shape_error(g, "attention", "the score table must be float [heads, vocab·T, vocab·T]", {n.in[6]});
  }
  n.out = {g.new_tensor("attention(" + q.name + ")", DType::kF32, {b, t, width}, ids.batched),
           g.new_tensor("attention(" + q.name + ").probs", DType::kF32, {b, h, t, t}, ids.batched)};
}

// Values from a table (attrs.v_indexed, training): in = {q, k, v table [V, T, Dv], mask, ids
// [B, T], optional start table [V, T, output width] (y's starting value: its rows of the
// sequence's (token, position) pairs)}; checked here, then the plain checks with the table's
// rows as the sequence's.
void value_table_check(Graph& g, Node& n) {
  if (n.in.size() == 5) n.in.push_back(kNoTensor);
  if (n.in.size() != 6)
    shape_error(g, "attention", "an attention with a value table needs q, k, v, mask, ids and a start table or none", {});
  const TensorDesc &q = g.tensor(n.in[0]), &v = g.tensor(n.in[2]), &ids = g.tensor(n.in[4]);
  if (ids.dtype != DType::kI32 || ids.shape.rank != 2 || ids.batched != q.batched || ids.shape[0] != q.shape[0])
    shape_error(g, "attention", "ids must be int32 [batch, T] like q's batch", {n.in[0], n.in[4]});
  if (v.dtype != DType::kF32 || v.batched || v.shape.rank != 3 || v.shape[1] != ids.shape[1])
    shape_error(g, "attention", "the value table must be float [vocab, T, dim]", {n.in[2], n.in[4]});
  if (g.tensor(n.in[1]).shape.rank != 3 || g.tensor(n.in[1]).shape[1] != ids.shape[1])
    shape_error(g, "attention", "k must have the value table's T tokens", {n.in[1], n.in[2]});
  if (n.in[5] != kNoTensor) {
    const TensorDesc& st = g.tensor(n.in[5]);
    const int64_t h = n.attrs.heads;
    if (!n.attrs.sum_heads || n.accumulate != 0 || q.shape.rank != 3 || q.shape[1] != ids.shape[1] || h < 1 ||
        v.shape[2] % h != 0)
      shape_error(g, "attention", "a start table needs a head-summed self-attention that does not accumulate",
                  {n.in[0], n.in[5]});
    if (st.dtype != DType::kF32 || st.batched || st.shape != Shape{v.shape[0], ids.shape[1], v.shape[2] / h})
      shape_error(g, "attention", "the start table must be float [vocab, T, output width] like the value table",
                  {n.in[2], n.in[5]});
  }
}

void attention_build(Graph& g, Node& n) {
  if (n.attrs.indexed) return indexed_attention_build(g, n);
  if (n.attrs.v_indexed) value_table_check(g, n);
  if (n.in.size() != (n.attrs.v_indexed ? 6u : 4u)) shape_error(g, "attention", "needs q, k, v and an optional mask", {});
  const TensorDesc &q = g.tensor(n.in[0]), &k = g.tensor(n.in[1]), &v = g.tensor(n.in[2]);
  const int64_t h = n.attrs.heads;
  std::vector<TensorId> qkv = {n.in[0], n.in[1], n.in[2]};
  if (q.shape.rank != 3 || k.shape.rank != 3 || v.shape.rank != 3)
    shape_error(g, "attention", "q, k, v must be [batch, tokens, dim]", qkv);
  if (q.dtype != DType::kF32 || k.dtype != DType::kF32 || v.dtype != DType::kF32)
    shape_error(g, "attention", "q, k, v must be float", qkv);
  if (q.shape[0] != k.shape[0] || q.batched != k.batched ||
      (!n.attrs.v_indexed && (k.shape[0] != v.shape[0] || k.batched != v.batched)))
    shape_error(g, "attention", "q, k, v must have the same batch", qkv);
  if (q.shape[2] != k.shape[2]) shape_error(g, "attention", "q and k must have the same dim", qkv);
  if (k.shape[1] != v.shape[1]) shape_error(g, "attention", "k and v must have the same number of tokens", qkv);
  if (h < 1 || q.shape[2] % h != 0 || v.shape[2] % h != 0)
    shape_error(g, "attention", std::to_string(h) + " heads do not divide the dims", qkv);
  const int64_t b = q.shape[0], tq = q.shape[1], tk = k.shape[1];
  if (n.in[3] != kNoTensor) {
    const TensorDesc& m = g.tensor(n.in[3]);
    if (m.dtype != DType::kU8 || m.shape != Shape{b, tq, tk} || m.batched != q.batched)
      shape_error(g, "attention", "the mask must be uint8 [batch, " + std::to_string(tq) + ", " +
                  std::to_string(tk) + "] (non-zero = forbidden)", {n.in[0], n.in[3]});
  }
  const int64_t width = n.attrs.sum_heads ? v.shape[2] / h : v.shape[2];
  n.out = {g.new_tensor("attention(" + q.name + ")", DType::kF32, {b, tq, width}, q.batched),
           g.new_tensor("attention(" + q.name + ").probs", DType::kF32, {b, h, tq, tk}, q.batched)};
}

struct Dims {
  int64_t b, h, tq, tk, d, dv, dh, dvh;
};

Dims dims_of(const RunContext& c, const Node& n) {
  const Shape qs = c.shape(n.in[0]), ks = c.shape(n.in[1]), vs = c.shape(n.in[2]);
  const int64_t h = n.attrs.heads;
  if (n.attrs.indexed) {
    const Shape is = c.shape(n.in[4]);
    return {is[0], h, is[1], is[1], qs[2], vs[2], qs[2] / h, vs[2] / h};
  }
  return {qs[0], h, qs[1], ks[1], qs[2], vs[2], qs[2] / h, vs[2] / h};
}

// For the fused short-sequence backward (ops/attention.h), which the backward node takes
// when the dims fit it (the lessons' models), else the GEMM path below.
AttentionDims short_dims(const Dims& m) { return {m.h, m.tq, m.tk, m.d, m.dv, m.dh, m.dvh}; }
AttentionDims forward_dims(const RunContext& c, const Dims& m, const Node& n) {
  AttentionDims d = short_dims(m);
  d.sum_heads = n.attrs.sum_heads;
  d.accumulate = n.accumulates(0);
  d.relu = n.attrs.relu;
  if (n.attrs.indexed) {
    d.ids = c.i32(n.in[4]);
    d.start = n.in[5] != kNoTensor ? c.f32(n.in[5]) : nullptr;
    d.score_table = n.in[6] != kNoTensor ? c.f32(n.in[6]) : nullptr;
    d.table_rows = c.shape(n.in[0])[0] * m.tq;
  }
  if (n.attrs.v_indexed) {
    d.v_ids = c.i32(n.in[4]);
    d.start = n.in.size() > 5 && n.in[5] != kNoTensor ? c.f32(n.in[5]) : nullptr;
  }
  return d;
}
AttentionMasking masking(const RunContext& c, const Node& n, TensorId mask_id) {
  return {n.attrs.scale, mask_id != kNoTensor ? c.u8(mask_id) : nullptr, n.attrs.causal};
}


// Calls fn(p0, p1) on this slice's share of the (batch, head) products: the index's
// contiguous share, or with a dynamic slice chunks of about an eighth of a thread's share
// taken from the node's counter. Each product (and each softmax row) is computed the same
// way whatever range it falls in.
template <class Fn>
void for_each_product_range(int64_t products, Slice s, Fn&& fn) {
  if (!s.dynamic()) {
    auto [p0, p1] = slice_range(products, s);
    if (p1 > p0) fn(p0, p1);
    return;
  }
  const int64_t chunk = std::max<int64_t>(1, products / (8 * s.count));
  for (;;) {
    const int64_t p0 = s.tasks->next.fetch_add(1, std::memory_order_relaxed) * chunk;
    if (p0 >= products) break;
    fn(p0, std::min(products, p0 + chunk));
  }
}

void attention_run(const RunContext& c, const Node& n, Slice s) {
  const Dims m = dims_of(c, n);
  const float *q = c.f32(n.in[0]), *k = c.f32(n.in[1]), *v = c.f32(n.in[2]);
  float *y = c.f32(n.out[0]), *probs = c.f32(n.out[1]);
  const AttentionMasking mk = masking(c, n, n.in[3]);
  AttentionDims d = forward_dims(c, m, n);
  d.bf16 = s.bf16;
  if (d.ids) {  // whole batch entries: their heads add into the same rows
    for_each_product_range(m.b, s, [&](int64_t b0, int64_t b1) {
      attention_forward(q, k, v, probs, y, d, mk, b0 * m.h, b1 * m.h);
    });
    return;
  }
  const AttentionWork w = attention_work(d, mk, m.b);  // groups of entries as lanes where they fit
  for_each_product_range(w.units, s, [&](int64_t u0, int64_t u1) {
    attention_forward_units(q, k, v, probs, y, d, mk, w, u0, u1);
  });
}

// Backward node: in (q, k, v, probs, dy, mask, dprobs); out (dq, dk, dv[, the weights' whole
// gradient when they have retain_grad]); scratch dP
// [B, H, Tq, Tk]. dy is the gradient of the output, dprobs that of the attention weights (a
// loss or regularizer on them); either may be absent. Without dy, V gets no gradient.
// With a value table (attrs.v_indexed): the backward node leaves dv out and a second node,
// attention_values_backward (in: probs, dy, ids; out: the table's gradient [V, T, Dv]), adds
// every sequence's Pᵀ·dy rows straight into the table's rows ids[b, t]·T + t, split over the
// key positions t (disjoint rows). A [B, T, Dv] rows gradient scattered by an embedding
// backward was 655 KB written and read again a neighbor-sum step (13.6 us of its 281 on Zen 4).
void attention_differentiate(Autodiff& ad, const Node& n) {
  if (n.attrs.relu || n.attrs.indexed || n.accumulate != 0)
    throw Error("attention: an indexed, ReLU'd or accumulating attention (an inference fold) has no backward");
  Graph& g = ad.graph();
  Node b;
  b.op = OpKind::kAttentionBackward;
  const TensorId dy = ad.grad(n.out[0]), dprobs = ad.grad(n.out[1]);
  b.in = {n.in[0], n.in[1], n.in[2], n.out[1], dy, n.in[3], dprobs};
  if (n.attrs.v_indexed) b.in.push_back(n.in[4]);
  b.attrs = n.attrs;
  b.backward = true;
  b.out.assign(3, kNoTensor);
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  set_out_accumulate(b, 1, ad.contribute(n.in[1]));
  Node values;  // (v_indexed: the value table's gradient, and the start table's)
  const TensorId start = n.attrs.v_indexed && n.in.size() > 5 ? n.in[5] : kNoTensor;
  const bool start_grad = dy != kNoTensor && start != kNoTensor && ad.needs_grad(start);
  if (dy != kNoTensor && n.attrs.v_indexed && (ad.needs_grad(n.in[2]) || start_grad)) {
    values.op = OpKind::kAttentionValuesBackward;
    values.in = {n.out[1], dy, n.in[4]};
    values.attrs = n.attrs;
    values.backward = true;
    values.out.assign(2, kNoTensor);
    if (ad.needs_grad(n.in[2])) set_out_accumulate(values, 0, ad.contribute(n.in[2]));
    if (start_grad) set_out_accumulate(values, 1, ad.contribute(start));
  } else if (dy != kNoTensor && !n.attrs.v_indexed) {
    set_out_accumulate(b, 2, ad.contribute(n.in[2]));
  }
  if (b.out[0] == kNoTensor && b.out[1] == kNoTensor && b.out[2] == kNoTensor) {
    if (!values.in.empty()) g.add_node(std::move(values));
    return;
  }
  const TensorDesc& probs = g.tensor(n.out[1]);
  const std::string probs_name = probs.name;
  const Shape probs_shape = probs.shape;
  const bool probs_batched = probs.batched;
  b.scratch = {g.new_tensor(probs_name + ".grad", DType::kF32, probs_shape, probs_batched)};
  if (dy != kNoTensor && g.tensor(n.out[1]).retain_grad) {
    // retain_grad on the weights: their whole gradient dy·Vᵀ (+ what later nodes gave them,
    // dprobs) is only scratch in the kernel; out[3] keeps it, and is what grad(weights) reads.
    const TensorId whole = g.new_tensor("grad(" + probs_name + ").whole", DType::kF32, probs_shape, probs_batched);
    b.out.push_back(whole);
    g.tensor(n.out[1]).grad = whole;
  }
  g.add_node(std::move(b));
  if (!values.in.empty()) g.add_node(std::move(values));
}

void attention_backward_run(const RunContext& c, const Node& n, Slice s) {
  const Dims m = dims_of(c, n);
  const float *q = c.f32(n.in[0]), *k = c.f32(n.in[1]), *v = c.f32(n.in[2]);
  const float* probs = c.f32(n.in[3]);
  const float* dy = n.in[4] != kNoTensor ? c.f32(n.in[4]) : nullptr;
  const float* dweights = n.in.size() > 6 && n.in[6] != kNoTensor ? c.f32(n.in[6]) : nullptr;
  float* dprobs = c.f32(n.scratch[0]);
  float* dq = n.out[0] != kNoTensor ? c.f32(n.out[0]) : nullptr;
  float* dk = n.out[1] != kNoTensor ? c.f32(n.out[1]) : nullptr;
  float* dv = n.out[2] != kNoTensor ? c.f32(n.out[2]) : nullptr;
  float* weights_grad = n.out.size() > 3 ? c.f32(n.out[3]) : nullptr;  // (a retained one)
  const AttentionMasking mk = masking(c, n, n.in[5]);
  AttentionDims d = short_dims(m);
  d.sum_heads = n.attrs.sum_heads;  // dy [B, Tq, Dv / H], every head's output gradient
  d.bf16 = s.bf16;
  if (n.attrs.v_indexed) d.v_ids = c.i32(n.in[7]);
  for_each_product_range(m.b * m.h, s, [&](int64_t p0, int64_t p1) {
    attention_backward(q, k, v, probs, dy, dweights, dprobs, dq, dk, dv, n.accumulates(0), n.accumulates(1),
                       n.accumulates(2), d, mk, p0, p1, weights_grad);
  });
}

// in (probs [B, H, Tq, Tk], dy, ids [B, Tk]); out the value table's gradient [V, Tk, Dv] and
// the start table's [V, Tk, output width], either absent.
void attention_values_backward_run(const RunContext& c, const Node& n, Slice s) {
  const Shape ps = c.shape(n.in[0]), ys = c.shape(n.in[1]);
  const bool table = n.out[0] != kNoTensor, start = n.out.size() > 1 && n.out[1] != kNoTensor;
  const Shape ts = c.shape(table ? n.out[0] : n.out[1]);
  const int64_t h = n.attrs.heads, tq = ps[2], tk = ps[3];
  const int64_t dv = n.attrs.sum_heads ? ys.last() * h : ys.last();  // (dy is [B, Tq, Dv / H] when summed)
  AttentionDims d{h, tq, tk, 0, dv, 0, dv / h};
  d.sum_heads = n.attrs.sum_heads;  // dy [B, Tq, Dv / H], every head's output gradient
  d.v_ids = c.i32(n.in[2]);
  const auto [l0, l1] = slice_range(tk, s);
  attention_value_table_backward(c.f32(n.in[0]), c.f32(n.in[1]), table ? c.f32(n.out[0]) : nullptr, d, ps[0],
                                 ts[0], n.accumulates(0), l0, l1, start ? c.f32(n.out[1]) : nullptr,
                                 n.accumulates(1));
}

void no_build(Graph&, Node&) {}

// An indexed attention's ids index its tables' first dim.
bool attention_ids(const Graph& g, const Node& n, size_t* input, int64_t* lo, int64_t* hi) {
  if (!n.attrs.indexed && !n.attrs.v_indexed) return false;
  *input = 4, *lo = 0, *hi = g.tensor(n.in[n.attrs.indexed ? 0 : 2]).shape[0];
  return true;
}

}  // namespace

extern const OpDef kAttentionOp = {"attention", attention_build, attention_run, attention_differentiate, false,
                                   attention_ids};
extern const OpDef kAttentionBackwardOp = {"attention_backward", no_build, attention_backward_run, nullptr, false};
extern const OpDef kAttentionValuesBackwardOp = {"attention_values_backward", no_build, attention_values_backward_run,
                                                 nullptr, false};

}  // namespace attnkit
