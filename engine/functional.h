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
// Float tensors only; shape errors are ShapeError at build time, naming the op, the tensors
// and their shapes.
//
// Binary ops broadcast as in numpy: shapes align from the last dim, and a dim of 1 (or a
// missing one) stretches to the other operand's. A batched tensor's dim 0 (the batch) is the
// result's dim 0: two batched operands have the same rank; an unbatched one is at most as
// long, with 1 at the batch's position if it reaches it. The gradient of a broadcast operand
// is summed over the dims it was broadcast along, each element in a fixed order.
// add(a, b), like a + b, is kAdd (the lesson models' add, which backward()'s fusions know)
// where kAdd takes the shapes (equal, or one unbatched and the other's trailing dims), else
// the general broadcasting add.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// With a float scalar on either side. a − s is computed as a + (−s), the same bits.
Tensor add(const Tensor& a, float s);
Tensor add(float s, const Tensor& a);
Tensor sub(const Tensor& a, float s);
Tensor sub(float s, const Tensor& a);
Tensor mul(const Tensor& a, float s);
Tensor mul(float s, const Tensor& a);
Tensor div(const Tensor& a, float s);
Tensor div(float s, const Tensor& a);
Tensor neg(const Tensor& x);  // x · (−1)

Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, float s);
Tensor operator+(float s, const Tensor& a);
Tensor operator-(const Tensor& a, float s);
Tensor operator-(float s, const Tensor& a);
Tensor operator*(const Tensor& a, float s);
Tensor operator*(float s, const Tensor& a);
Tensor operator/(const Tensor& a, float s);
Tensor operator/(float s, const Tensor& a);
Tensor operator-(const Tensor& x);

// Elementwise functions, vectorized (ops/math.cc). Largest relative errors against double,
// measured on dense grids on every SIMD target (tests/test_op_math.cc checks the bounds):
// exp: Highway's Exp, 8e-8 on [−87, 88]; x > 88.72 gives +inf, x < −103.9 gives 0.
// log: Highway's Log, 7.5e-8 on [1e-30, 1e30]; denormals too; log 0 = −inf, log x<0 = NaN.
// tanh: Highway's Tanh, 2e-7 on [−10, 10].
// sigmoid: 1 / (1 + e^−x) through e^−|x|, so it neither overflows nor loses the tail: 1.8e-7
//   on [−80, 30].
// gelu: x · Φ(x), the exact (erf) form, PyTorch's default (approximate='none'), with Φ from
//   an erfc fit (relative error 1.2e-7): 2.2e-6 on [−5, 10] (absolute 4e-7); in the far tail
//   [−10, −5], where |gelu| < 1e-6, the rounding of x²/2 in e^(−x²/2) leaves 8.5e-6.
// NaN inputs give NaN.
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor gelu(const Tensor& x);

// Sum and mean of every element (of the current batch, for a batched x): a 1-element
// unbatched tensor [1], e.g. a loss for Graph::backward.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
// Over the last dim (dim = −1, or rank − 1 counting the batch dim), which is dropped
// (PyTorch's keepdim=False): [B, T, D] → [B, T]. A rank-1 unbatched x gives [1]; a batched x
// needs a dim besides the batch. Other dims are a ShapeError.
Tensor sum(const Tensor& x, int dim);
Tensor mean(const Tensor& x, int dim);


// ---- softmax, masks, dropout and losses (engine/op_softmax.cc, engine/op_loss.cc) ----

// Masks (softmax's and masked_fill's) have x's last two dims [Tq, Tk] (just [Tk] for a 1-D x)
// and broadcast over x's leading dims: each leading dim, aligned from the right, is x's or 1
// (missing dims count as 1). For scores [B, H, T, T]: a [T, T] mask serves every batch entry
// and head, [B, 1, T, T] (a batched input) every head, [B, H, T, T] gives each head its own.
// A mask aligned with a batched x's batch dim is a batched input (or has 1 there).
struct SoftmaxOptions {
  float scale = 1.0f;  // the scores are scale·x
  // Optional. uint8: non-zero = forbidden, probability 0; a row with every key forbidden
  // comes out all zeros (and passes no gradient). float: added to the scaled scores
  // (softmax(scale·x + mask), −inf for forbidden; a row with −inf at every allowed key comes
  // out all zeros too, where PyTorch gives NaN); it gets its own gradient when it needs one
  // (summed over the dims it broadcasts over).
  Tensor mask;
  // Key j is forbidden for query i when j > i (i, j: x's last two dims), with the mask's.
  bool causal = false;
};

// softmax over the last axis of a float tensor (rank 1 to 4), with the options' scale,
// mask and causal masking fused in; differentiable in x (and in a float mask).
Tensor softmax(Tensor x, SoftmaxOptions options = {});

// x where mask is 0, `value` where it is non-zero (uint8 mask, broadcast as above). The
// gradient of x is zero where filled.
Tensor masked_fill(Tensor x, Tensor mask, float value);

// Inverted dropout: in training runs (Executor::train_step) each element is zeroed with
// probability p and the rest scaled by 1/(1 − p) (p = 1: all zeros); in Executor::forward
// (evaluation) the identity. The mask is drawn from Rng by (seed, training step, element), so
// it is the same for any thread count and run to run; the backward applies the same mask.
Tensor dropout(Tensor x, float p, uint64_t seed);

// Mean of (a − b)² over all elements of two float tensors of the same shape: a 1-element
// unbatched float (a loss for backward()). Both sides get gradients.
Tensor mse_loss(Tensor a, Tensor b);


}  // namespace attnkit
