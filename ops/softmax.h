// Row softmax with the attention scale and an optional boolean mask fused in.
#pragma once
#include <cstdint>

#include "parallel.h"

namespace attnkit {

// Which scores are forbidden. Scores are laid out [groups, tq, tk] (groups = batch·heads
// in attention, 1 for a plain row softmax over tq rows). A forbidden score is replaced by
// -1e9 before the softmax, as the course does; a fully forbidden row therefore comes out
// uniform (1/tk), exactly like the course's numpy code.
struct SoftmaxMask {
  // Optional uint8 mask, non-zero = forbidden, laid out [mask_groups, tq, tk]; group g reads
  // slab g / group_div (e.g. a [batch, tq, tk] mask shared by heads: group_div = heads; one
  // [tq, tk] mask for all groups: group_div = groups). nullptr = no mask.
  const uint8_t* data = nullptr;
  int64_t group_div = 1;
  // Causal: key j is forbidden for query i when j > i.
  bool causal = false;
};

inline constexpr float kMaskedScore = -1e9f;

// y = softmax(scale·x with forbidden scores := -1e9) over each row of length tk.
// x and y may be the same buffer. Slices split the groups·tq rows.
void softmax_forward(const float* x, float* y, int64_t groups, int64_t tq, int64_t tk,
                     float scale, const SoftmaxMask& mask, Slice s = {});

// y = softmax(scale·x + add, forbidden scores := -1e9) over each row of length tk: an additive
// (float) mask fused in. add is laid out [add_groups, tq, tk]; group g reads slab
// g / add_group_div (like SoftmaxMask::data). A row whose every allowed score is -inf comes out
// all zeros (its backward gives zeros too). x and y may be the same buffer; Slices split the
// groups·tq rows exactly as softmax_forward's do. The backward is softmax_backward: d(scale·x + add) is its result
// for scale 1, dx that for `scale`.
void softmax_forward_additive(const float* x, const float* add, int64_t add_group_div, float* y,
                              int64_t groups, int64_t tq, int64_t tk, float scale,
                              const SoftmaxMask& mask, Slice s = {});

// Backward of softmax_forward given its output y: dx = scale·y⊙(dy − Σ dy⊙y) per row, and 0
// at forbidden scores (they were replaced by a constant). dx may alias dy.
// accumulate: dx += … instead of dx = … (dx is not read when false).
void softmax_backward(const float* y, const float* dy, float* dx, int64_t groups, int64_t tq,
                      int64_t tk, float scale, const SoftmaxMask& mask, bool accumulate,
                      Slice s = {});

}  // namespace attnkit
