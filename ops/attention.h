// Fused attention backward (and the forward's products) for short sequences (the lessons' handful of tokens): for each
// (batch, head) product, dP, the softmax backward and the products for dq, dk, dv stay in
// registers and a few KB of stack, with no GEMM calls. On the lesson models the GEMM-per-
// product path spent more time in call overhead and tiny-matrix edges than in arithmetic.
//
// Layout as in the attention op (engine/op_attention.cc): q, k are [B, T, d], v, dy are
// [B, T, dv], heads are column blocks (head h of q is columns [h·dh, (h+1)·dh)), probabilities
// are [B, H, Tq, Tk]. Product p = b·heads + h. Every product is computed by the same
// operations whichever range or thread it falls in, so results do not depend on the split.
#pragma once
#include <cstdint>

namespace attnkit {

struct AttentionDims {
  int64_t heads = 1, tq = 0, tk = 0;
  int64_t d = 0, dv = 0;    // row widths of q/k and of v/y (all heads)
  int64_t dh = 0, dvh = 0;  // per head: d / heads, dv / heads
  // Graph::fold_attention_values: sum_heads: y is [B, tq, dvh], the sum of the heads' outputs
  // (a forward range of products then covers whole batch entries; the backward's dy is that
  // [B, tq, dvh] gradient, every head's); forward only: accumulate: y's contents are added
  // to; relu: max(·, 0) once a block of y has its last contribution. dh and dvh may differ.
  bool sum_heads = false, accumulate = false, relu = false;
  // Mixed precision: the GEMM path's products (long sequences) take bf16 inputs (Slice::bf16).
  bool bf16 = false;
  // Indexed (inference, Graph::index_attention_lookups): q, k, v are tables [V, T, d or dv]
  // with T = tq = tk, and row t of batch entry b is row ids[b·T + t]·T + t of each; start
  // (optional, with the same rows, y_row() wide) is y's starting value. accumulate is then off.
  const int32_t* ids = nullptr;
  const float* start = nullptr;
  // Optional with ids: softmax(scale·S) over every row of S, the scores of all the tables'
  // rows, [heads, R, R] with R = table_rows (= V·T): S[h, a, c] is the score of query row a
  // and key row c of head h. A sequence's probabilities are then its rows' entries over their
  // sum (the rest of the table row's normalization cancels).
  const float* score_table = nullptr;
  int64_t table_rows = 0;
  // Values from a table (training, Graph::index_attention_values; not with ids): v is a
  // per-(token, position) table [V, tk, dv] and row l of batch entry b's values is its row
  // v_ids[b·tk + l]·tk + l. q, k, y and every gradient keep their [B, T, ·] layout (dv too:
  // its rows are those of the entries, summed into the table by the graph's next node).
  // With v_ids, start (optional; head-summed, tq = tk, accumulate off) is a table
  // [V, tk, y_row()] too: y's starting value for query row i of entry b is its row
  // v_ids[b·tk + i]·tk + i (the folded head's residual h·W + b).
  const int32_t* v_ids = nullptr;
  int64_t table_row(int64_t b, int64_t t) const { return static_cast<int64_t>(ids[b * tq + t]) * tq + t; }
  // Row l (all heads) of batch entry b's values in v.
  const float* value_row(const float* v, int64_t b, int64_t l) const {
    return v + (v_ids ? static_cast<int64_t>(v_ids[b * tk + l]) * tk + l : b * tk + l) * dv;
  }
  // Batch entry b's value rows, dv apart: v's own, or with v_ids copied into tile (tk·dv floats).
  const float* entry_values(const float* v, int64_t b, float* tile) const;
  int64_t y_row() const { return sum_heads ? dvh : dv; }       // y's row width
  int64_t y_head() const { return sum_heads ? 0 : dvh; }       // head h's columns start at h·y_head()
  bool y_add(int64_t h) const { return accumulate || (sum_heads && h > 0); }
  bool y_last(int64_t h) const { return !sum_heads || h == heads - 1; }
};

// A thread's tile for AttentionDims::entry_values (tk·dv floats with v_ids), grown once.
float* value_tile(const AttentionDims& m);

// The forward's scale, and which of its scores were forbidden.
struct AttentionMasking {
  float scale = 1.0f;
  const uint8_t* mask = nullptr;  // optional [B, tq, tk], non-zero = forbidden
  bool causal = false;            // key j forbidden for query i when j > i
};

// Products [p0, p1) of the backward of probs = softmax(scale·Q·Kᵀ, forbidden scores := -1e9),
// y = probs·V (softmax_forward of ops/softmax.h between two GEMMs), given probs and dy:
// dq, dk, dv (each may be nullptr: not needed), each overwritten or, with its accumulate
// flag, added to. Returns false, doing nothing, when the dims are outside what the short
// path handles (tk > 16, tq > 64 or more than 8 vectors of this CPU, per-head dims that are
// not 1 to 8 whole vectors); the caller then takes the general path.
bool attention_short_backward(const float* q, const float* k, const float* v, const float* probs,
                              const float* dy, float* dq, float* dk, float* dv, bool accumulate_q,
                              bool accumulate_k, bool accumulate_v, const AttentionDims& m,
                              const AttentionMasking& mk, int64_t p0, int64_t p1);

// The forward's products for the same short dims (returning false, doing nothing, outside
// them): scores = Q·Kᵀ unscaled into [B, H, tq, tk] (softmax_forward then scales and masks
// them in place), and y = probs·V (y overwritten), for products [p0, p1).
bool attention_short_scores(const float* q, const float* k, float* scores, const AttentionDims& m,
                            int64_t p0, int64_t p1);
bool attention_short_values(const float* probs, const float* v, float* y, const AttentionDims& m,
                            int64_t p0, int64_t p1);

// The indexed forward's short path (m.ids set; ranges of whole batch entries [b0, b1)):
// whether it takes the dims, the scores (as attention_short_scores) and y = Σ_h P_h·V_h
// (+ start, relu'd; see AttentionDims) with the value rows read from the table.
bool attention_indexed_fits(const AttentionDims& m);
void attention_indexed_scores(const float* q, const float* k, float* scores, const AttentionDims& m, int64_t b0,
                              int64_t b1);
// Probabilities from m.score_table (set), masked as mk says, for batch entries [b0, b1).
void attention_indexed_table_probs(const float* q, const float* k, float* probs, const AttentionDims& m,
                                   const AttentionMasking& mk, int64_t b0, int64_t b1);
void attention_indexed_values(const float* probs, const float* v, float* y, const AttentionDims& m, int64_t b0,
                              int64_t b1);

// The value table's gradient of a training attention whose values come from a table
// (m.v_ids; any dims): for key positions [l0, l1), table rows v_ids[b·tk + l]·tk + l of dtable
// [vocab, tk, dv] get Σ_i P[b, h, i, l]·dy[b, i] (head h's columns; sum_heads: every head reads
// the one dy) for batch entries b < batch, in order, after zeroing those positions' rows
// unless `accumulate`. Position ranges own disjoint rows: they may run on different threads.
// dtable may be nullptr (no values' gradient wanted). dstart (or nullptr), the gradient of a
// start table [vocab, tk, y_row()] (AttentionDims::start with v_ids): rows v_ids[b·tk + l]·tk + l
// of positions [l0, l1) get dy[b, l] added for every b in order, after zeroing unless
// accumulate_start.
void attention_value_table_backward(const float* probs, const float* dy, float* dtable, const AttentionDims& m,
                                    int64_t batch, int64_t vocab, bool accumulate, int64_t l0, int64_t l1,
                                    float* dstart = nullptr, bool accumulate_start = false);

// Any dims (ops/attention_products.cc): products [p0, p1) of the forward — probs =
// softmax(scale·Q·Kᵀ, masked), y = probs·V (both overwritten) — through the short path when
// it fits, else GEMM calls per product while the product's T × T block is in cache.
void attention_forward(const float* q, const float* k, const float* v, float* probs, float* y,
                       const AttentionDims& m, const AttentionMasking& mk, int64_t p0, int64_t p1);

// And of the backward, given probs: dy (the output's gradient) and dweights (the attention
// weights' own gradient, [B, H, tq, tk]) may each be nullptr; dprobs is [B, H, tq, tk] scratch.
// Without dy, dv is not written. dq, dk, dv as in attention_short_backward. weights_grad, when
// given ([B, H, tq, tk], distinct from dweights and dprobs), receives the weights' whole gradient
// dy·Vᵀ + dweights (a retained one).
void attention_backward(const float* q, const float* k, const float* v, const float* probs, const float* dy,
                        const float* dweights, float* dprobs, float* dq, float* dk, float* dv, bool accumulate_q,
                        bool accumulate_k, bool accumulate_v, const AttentionDims& m, const AttentionMasking& mk,
                        int64_t p0, int64_t p1, float* weights_grad = nullptr);

// Probabilities with batch entries as lanes (ops/attention_lanes.cc), for short sequences
// without a padding mask (causal allowed): attention_lanes returns the entries of a group,
// Lanes (8 on AVX2, 16 on AVX-512), when this CPU's path takes the dims, else 0, and
// attention_lanes_probs writes probs = softmax(scale·Q·Kᵀ) of groups [g0, g1) (batch entries
// [g0·Lanes, g1·Lanes), every head), bitwise as attention_short_scores and softmax_forward.
int64_t attention_lanes(const AttentionDims& m, const AttentionMasking& mk);
void attention_lanes_probs(const float* q, const float* k, float* probs, const AttentionDims& m,
                           const AttentionMasking& mk, int64_t g0, int64_t g1);

// How a whole attention forward over `batch` entries splits into work units: first one unit
// per group of `lanes` entries (all their heads), then one per (batch, head) product of the
// entries after the last whole group (with sum_heads, one per entry: its heads add into the
// same rows). The split depends only on the dims and the CPU, so a
// batch entry is computed the same way whatever thread or range takes its unit.
struct AttentionWork {
  int64_t lanes = 0;   // entries per group, 0: every unit is one product
  int64_t groups = 0;  // units [0, groups) are groups
  int64_t units = 0;   // all units
  int64_t heads = 1;
  int64_t rest = 1;    // products per unit after the groups: 1, or heads (sum_heads: whole entries)
  // The first (batch, head) product of unit u: unit u covers [product(u), product(u + 1)).
  int64_t product(int64_t u) const {
    return u < groups ? u * lanes * heads : groups * lanes * heads + (u - groups) * rest;
  }
};
AttentionWork attention_work(const AttentionDims& m, const AttentionMasking& mk, int64_t batch);

// attention_forward over units [u0, u1) of w.
void attention_forward_units(const float* q, const float* k, const float* v, float* probs, float* y,
                             const AttentionDims& m, const AttentionMasking& mk, const AttentionWork& w,
                             int64_t u0, int64_t u1);

}  // namespace attnkit
