// Primitive ops on graph tensors, named as in PyTorch: what lesson 003 writes attention with
// (view, transpose, matmul, masked_fill, softmax), elementwise math, reductions and losses.
// Each is a node of the static graph like every other op: planned in the arena, run on the
// executor's threads, differentiated by backward().
#pragma once
#include <cstdint>
#include <vector>

#include "graph.h"

namespace attnkit {

// ---- products and shapes (engine/op_matmul.cc, engine/op_shape.cc) ----
// Axes may be negative (counted from the end). The batch dim of a batched tensor stays its
// dim 0: no shape op moves, merges or cuts it. Shape errors are ShapeError at build time.

// op(a)·op(b) over the last two dims, op(x) = xᵀ (its last two dims swapped) when trans_x:
// a [..., m, k] · b [..., k, n] → [..., m, n]. The leading dims broadcast as in torch.matmul
// (a dim of 1 or a missing one repeats): [B, H, T, dh]·[B, H, dh, T], [B, T, D]·[D, E].
// Both tensors have at least 2 dims. A batched operand has the result's rank; an unbatched
// operand of that rank has 1 as its dim 0. matmul(q, k, false, true) is q·kᵀ.
Tensor matmul(Tensor a, Tensor b, bool trans_a = false, bool trans_b = false);
// x with axes d0 and d1 swapped (a copy); transpose(x, -2, -1) transposes the matrices.
Tensor transpose(Tensor x, int d0, int d1);
// The same elements in row-major order under `shape` (the full shape, at most one -1, which
// is inferred); a batched x keeps its dim 0: x [B, T, D] → reshape(x, {B, T, H, -1}).
// Free (the memory planner puts the result in x's buffer, nothing is copied) when x is an
// intermediate that nothing uses afterwards and neither is kept; else a copy.
Tensor reshape(Tensor x, Shape shape);
Tensor view(Tensor x, Shape shape);  // reshape: the engine has no strided views
// The tensors joined along `axis`; their other dims agree.
Tensor concat(const std::vector<Tensor>& xs, int axis = -1);
// Consecutive pieces of x along `axis` of the given sizes, which sum to that dim (copies).
std::vector<Tensor> split(Tensor x, const std::vector<int64_t>& sizes, int axis = -1);
// x[…, start : start + length, …] along `axis` (a copy), as torch.narrow.
Tensor narrow(Tensor x, int axis, int64_t start, int64_t length);


// ---- elementwise math and reductions (engine/op_math.cc, engine/op_reduce.cc) ----


// ---- softmax, masks, dropout and losses (engine/op_softmax.cc, engine/op_loss.cc) ----


}  // namespace attnkit
