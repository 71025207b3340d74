// Attention's products for any sizes (declared in ops/attention.h): the short path of
// ops/attention.cc where the dims fit it, GEMM calls one (batch, head) product at a time
// otherwise. The graph op (engine/op_attention.cc) hands each thread a range of products.
#include <algorithm>
#include <vector>

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/softmax.h"

namespace attnkit {

const float* AttentionDims::entry_values(const float* v, int64_t b, float* tile) const {
  if (!v_ids) return v + b * tk * dv;
  for (int64_t l = 0; l < tk; ++l) std::copy_n(value_row(v, b, l), dv, tile + l * dv);
  return tile;
}

// A thread's tile for AttentionDims::entry_values, grown once (no allocation per step after
// it). The head-summed short path reads the table's rows in place and never asks for one.
float* value_tile(const AttentionDims& m) {
  thread_local std::vector<float> tile;
  const size_t need = static_cast<size_t>(m.v_ids ? m.tk * m.dv : 0);
  if (tile.size() < need) tile.resize(need);
  return tile.data();
}

namespace {
// One thread's slice for the GEMM path's per-product calls, in the precision m asks for.
Slice bf16_slice(const AttentionDims& m) {
  Slice s;
  s.bf16 = m.bf16;
  return s;
}
}  // namespace
namespace {

// Softmax over the score rows of products [p0, p1) at once (they are contiguous in the
// probabilities buffer), so short rows are vectorized across many rows. A mask is per batch
// entry, so with a mask the products are taken one batch entry at a time.
template <class Fn>
void for_each_mask_run(const AttentionDims& m, const AttentionMasking& mk, int64_t p0, int64_t p1, Fn&& fn) {
  SoftmaxMask mask;
  mask.causal = mk.causal;
  if (!mk.mask) {
    fn(p0, p1, mask);
    return;
  }
  for (int64_t p = p0; p < p1;) {
    const int64_t b = p / m.heads, end = std::min(p1, (b + 1) * m.heads);
    mask.data = mk.mask + b * m.tq * m.tk;
    mask.group_div = end - p;  // every product of this run reads the same slab
    fn(p, end, mask);
    p = end;
  }
}

// y (+)= P·V of product p, with y's layout and ReLU as m says (see AttentionDims).
void values_gemm(const float* probs, const float* v, float* y, const AttentionDims& m, int64_t p) {
  const int64_t b = p / m.heads, h = p % m.heads, ldy = m.y_row();
  float* yp = y + b * m.tq * ldy + h * m.y_head();
  sgemm_slice(false, false, m.tq, m.dvh, m.tk, 1.0f, probs + p * m.tq * m.tk, m.tk,
              m.entry_values(v, b, value_tile(m)) + h * m.dvh, m.dv, m.y_add(h) ? 1.0f : 0.0f, yp, ldy, bf16_slice(m));
  if (m.relu && m.y_last(h))
    for (int64_t i = 0; i < m.tq; ++i) relu_forward(yp + i * ldy, yp + i * ldy, m.dvh);
}

// A training attention's start table (m.start with m.v_ids, head-summed: products cover whole
// entries): the short path's SummedRows reads its rows in place; every other path gets the
// rows of entries [p0 / heads, p1 / heads) copied into y here and adds to them (the dims returned).
AttentionDims start_copied(const AttentionDims& m, float* y, int64_t p0, int64_t p1) {
  if (!m.start || !m.v_ids) return m;
  const int64_t ldy = m.y_row();
  for (int64_t b = p0 / m.heads; b < (p1 + m.heads - 1) / m.heads; ++b)
    for (int64_t t = 0; t < m.tq; ++t)
      std::copy_n(m.start + (static_cast<int64_t>(m.v_ids[b * m.tk + t]) * m.tk + t) * ldy, ldy,
                  y + (b * m.tq + t) * ldy);
  AttentionDims plain = m;
  plain.start = nullptr;
  plain.accumulate = true;
  return plain;
}

// The indexed forward for batch entries [b0, b1) outside the short path: each entry's rows
// are copied out of the tables into contiguous tiles and the plain forward runs on them.
void indexed_forward_tiles(const float* q, const float* k, const float* v, float* probs, float* y,
                           const AttentionDims& m, const AttentionMasking& mk, int64_t b0, int64_t b1) {
  thread_local std::vector<float> tiles;  // grows once: no allocation per call after the first
  const size_t need = static_cast<size_t>(m.tq * m.d + m.tk * m.d + m.tk * m.dv);
  if (tiles.size() < need) tiles.resize(need);
  float *qt = tiles.data(), *kt = qt + m.tq * m.d, *vt = kt + m.tk * m.d;
  AttentionDims plain = m;
  plain.ids = nullptr;
  plain.start = nullptr;
  plain.accumulate = m.accumulate || m.start != nullptr;
  const int64_t ldy = m.y_row(), tt = m.tq * m.tk;
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t t = 0; t < m.tq; ++t) {
      const int64_t row = m.table_row(b, t);
      std::copy_n(q + row * m.d, m.d, qt + t * m.d);
      std::copy_n(k + row * m.d, m.d, kt + t * m.d);
      std::copy_n(v + row * m.dv, m.dv, vt + t * m.dv);
      if (m.start) std::copy_n(m.start + row * ldy, ldy, y + (b * m.tq + t) * ldy);
    }
    AttentionMasking mb = mk;
    if (mk.mask) mb.mask = mk.mask + b * tt;
    attention_forward(qt, kt, vt, probs + b * m.heads * tt, y + b * m.tq * ldy, plain, mb, 0, m.heads);
  }
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* probs, float* y,
                       const AttentionDims& m, const AttentionMasking& mk, int64_t p0, int64_t p1) {
  const int64_t tt = m.tq * m.tk;
  auto softmax_rows = [&](int64_t r0, int64_t r1) {
    for_each_mask_run(m, mk, r0, r1, [&](int64_t a, int64_t b, const SoftmaxMask& mask) {
      softmax_forward(probs + a * tt, probs + a * tt, b - a, m.tq, m.tk, mk.scale, mask);
    });
  };
  if (m.ids) {  // (whole batch entries)
    const int64_t b0 = p0 / m.heads, b1 = p1 / m.heads;
    if (!attention_indexed_fits(m)) return indexed_forward_tiles(q, k, v, probs, y, m, mk, b0, b1);
    if (m.score_table) {
      attention_indexed_table_probs(q, k, probs, m, mk, b0, b1);
    } else {
      attention_indexed_scores(q, k, probs, m, b0, b1);
      softmax_rows(p0, p1);
    }
    attention_indexed_values(probs, v, y, m, b0, b1);
    return;
  }
  if (attention_short_scores(q, k, probs, m, p0, p1)) {
    // Short rows: the softmax of all the range's rows at once (vectorized across rows).
    softmax_rows(p0, p1);
    if (attention_short_values(probs, v, y, m, p0, p1)) return;
    const AttentionDims mv = start_copied(m, y, p0, p1);
    for (int64_t p = p0; p < p1; ++p) values_gemm(probs, v, y, mv, p);
    return;
  }
  const AttentionDims mv = start_copied(m, y, p0, p1);
  // Long rows: one product at a time, so its scores are softmaxed and multiplied by V while
  // they are still in cache (all products' scores first went out to memory and back twice:
  // ~10% of the node at T = 128).
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t b = p / m.heads, h = p % m.heads;
    sgemm_slice(false, true, m.tq, m.tk, m.dh, 1.0f, q + b * m.tq * m.d + h * m.dh, m.d,
                k + b * m.tk * m.d + h * m.dh, m.d, 0.0f, probs + p * tt, m.tk, bf16_slice(m));
    softmax_rows(p, p + 1);
    values_gemm(probs, v, y, mv, p);
  }
}

void attention_backward(const float* q, const float* k, const float* v, const float* probs, const float* dy,
                        const float* dweights, float* dprobs, float* dq, float* dk, float* dv, bool accumulate_q,
                        bool accumulate_k, bool accumulate_v, const AttentionDims& m, const AttentionMasking& mk,
                        int64_t p0, int64_t p1, float* weights_grad) {
  if (dy && !dweights && !weights_grad &&
      attention_short_backward(q, k, v, probs, dy, dq, dk, dv, accumulate_q, accumulate_k, accumulate_v, m, mk, p0, p1))
    return;
  const int64_t tt = m.tq * m.tk;
  // One product at a time (its dP, then dS in place, stay in cache for the two products
  // that read them). In the forward pass y = P·V: dP = dy·Vᵀ and dV = Pᵀ·dy; with
  // P = softmax(scale·Q·Kᵀ), dS = d(Q·Kᵀ) (the scale folded in), then dQ = dS·K and
  // dK = dSᵀ·Q.
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t b = p / m.heads, h = p % m.heads;
    const int64_t ldy = m.y_row();  // (sum_heads: every head reads the one dy)
    const float* dy_p = dy ? dy + b * m.tq * ldy + h * m.y_head() : nullptr;
    float* dS = dprobs + p * tt;
    // dP = dy·Vᵀ + the weights' own gradient: in dS (then dS in place), or kept in weights_grad.
    float* const dp_all = weights_grad ? weights_grad : dprobs;
    float* const dP = dp_all + p * tt;
    if (dy)
      sgemm_slice(false, true, m.tq, m.tk, m.dvh, 1.0f, dy_p, ldy, m.entry_values(v, b, value_tile(m)) + h * m.dvh,
                  m.dv, 0.0f, dP, m.tk, bf16_slice(m));
    if (dweights) axpy(1.0f, dweights + p * tt, dP, tt, /*accumulate=*/dy != nullptr, Slice{});
    if (dv && dy)
      sgemm_slice(true, false, m.tk, m.dvh, m.tq, 1.0f, probs + p * tt, m.tk, dy_p, ldy,
                  accumulate_v ? 1.0f : 0.0f, dv + b * m.tk * m.dv + h * m.dvh, m.dv, bf16_slice(m));
    for_each_mask_run(m, mk, p, p + 1, [&](int64_t r0, int64_t r1, const SoftmaxMask& mask) {
      softmax_backward(probs + r0 * tt, dp_all + r0 * tt, dprobs + r0 * tt, r1 - r0, m.tq, m.tk,
                       mk.scale, mask, false);
    });
    if (dq)
      sgemm_slice(false, false, m.tq, m.dh, m.tk, 1.0f, dS, m.tk, k + b * m.tk * m.d + h * m.dh, m.d,
                  accumulate_q ? 1.0f : 0.0f, dq + b * m.tq * m.d + h * m.dh, m.d, bf16_slice(m));
    if (dk)
      sgemm_slice(true, false, m.tk, m.dh, m.tq, 1.0f, dS, m.tk, q + b * m.tq * m.d + h * m.dh, m.d,
                  accumulate_k ? 1.0f : 0.0f, dk + b * m.tk * m.d + h * m.dh, m.d, bf16_slice(m));
  }
}

AttentionWork attention_work(const AttentionDims& m, const AttentionMasking& mk, int64_t batch) {
  AttentionWork w;
  w.heads = m.heads;
  w.lanes = attention_lanes(m, mk);
  w.groups = w.lanes > 0 ? batch / w.lanes : 0;
  w.rest = m.sum_heads ? m.heads : 1;
  w.units = w.groups + (batch - w.groups * w.lanes) * m.heads / w.rest;
  return w;
}

void attention_forward_units(const float* q, const float* k, const float* v, float* probs, float* y,
                             const AttentionDims& m, const AttentionMasking& mk, const AttentionWork& w,
                             int64_t u0, int64_t u1) {
  if (u0 < w.groups) {  // whole groups: probabilities with entries as lanes, then P·V as the short path
    const int64_t g1 = std::min(u1, w.groups), p0 = w.product(u0), p1 = w.product(g1);
    attention_lanes_probs(q, k, probs, m, mk, u0, g1);
    if (!attention_short_values(probs, v, y, m, p0, p1)) {
      const AttentionDims mv = start_copied(m, y, p0, p1);
      for (int64_t p = p0; p < p1; ++p) values_gemm(probs, v, y, mv, p);
    }
  }
  if (u1 > w.groups) attention_forward(q, k, v, probs, y, m, mk, w.product(std::max(u0, w.groups)), w.product(u1));
}

}  // namespace attnkit
